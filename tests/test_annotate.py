"""`aegir annotate`'s library side (aegir.inference.CheckpointAnnotator, aegir.annotate): a file
read lazily gives the annotation of the whole file, for a Phase 1 model, a Phase 3 orchestrator
and a Phase 4 swarm; a table the model refuses fails alone; the output file's rows."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from aegir.annotate import Failure, annotate_files, column_rows, find_tables, rows_bytes
from aegir.config import PrepareConfig
from aegir.data.user_tables import read_user_table
from aegir.inference import CheckpointAnnotator
from aegir.labels import cta_vocab
from aegir.model.checkpoint import save_checkpoint
from aegir.orchestrator.checkpoint import save_orchestrator
from aegir.swarm.model import Swarm, save_swarm
from aegir.swarm.policy import SpawnPolicy, spawn_options
from aegir.swarm.spawn import SwarmMerge, family_of_labels
from conftest import ROOT
from test_swarm import open_gates, orchestrator

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PARAMS = {"prepare": asdict(PrepareConfig(byte_budget=384, max_rows=6)), "reading": {"columns": 4, "views": 2}}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Tiny untrained checkpoints of every kind, reading wide tables in groups of 4 and 2 views:
    a Phase 1 model, a Phase 3 orchestrator over three specialists, a Phase 4 swarm over them
    whose policy spawns sub-agents, asks for second opinions and runs deep search."""
    root = tmp_path_factory.mktemp("checkpoints")
    orch, primary = orchestrator(threshold=0.01)  # (nearly) every specialist activated
    orch.vote = True  # as params.yaml's phase3.vote: the labels voted with the activated experts'
    open_gates(orch)
    dirs = {name: save_checkpoint(root / "phase1" / name, specialist.model, {"params": PARAMS})
            for name, specialist in zip(orch.specialist_names, orch.specialists)}
    phase1 = save_checkpoint(root / "phase1" / "primary", primary, {"params": PARAMS})
    phase3 = save_orchestrator(root / "phase3", orch, dirs, {"params": PARAMS})
    policy = SpawnPolicy(primary.config.d_model, spawn_options(4), len(dirs))
    with torch.no_grad():
        policy.count_head.bias.copy_(torch.tensor([0.0, 0.0, 5.0, 0.0]))  # two sub-agents
        policy.deep_head.bias.fill_(5.0)  # and deep search
        policy.consult_head.bias.fill_(5.0)  # and every second opinion
    swarm = Swarm(orch, {name: s.model for name, s in zip(orch.specialist_names, orch.specialists)}, policy,
                  SwarmMerge(len(dirs), family_of_labels(cta_vocab())[0]))
    phase4 = save_swarm(root / "phase4", swarm, phase3, dirs, {"params": PARAMS})
    return {"phase1": phase1, "phase3": phase3, "phase4": phase4}


def wide_csv(path: Path, rows: int = 240, columns: int = 9) -> Path:
    cities = ["Oslo", "Bergen", "Paris", "Lyon", "Rome"]
    header = ["name", "city", "zip", "phone", "opened", "stars", "url", "email", "rooms"][:columns]
    lines = [[f"Hotel {r}", cities[r % 5], str(10000 + r), f"+47 22 {r:06d}", f"19{r % 90:02d}-01-01", str(r % 5),
              f"https://h{r}.no", f"info@h{r}.no", str(r * 3)][:columns] for r in range(rows)]
    path.write_text("".join(",".join(line) + "\n" for line in [header, *lines]))
    return path


@pytest.mark.parametrize("name, columns, rows, first", [
    ("books.csv", 5, 4, "The Remains of the Day"), ("hotels.csv", 4, 3, "Hotel Adlon Kempinski"),
    ("employees.csv", 6, 6, "Maria Keller"), ("films.csv", 6, 6, "Parasite"), ("cars.csv", 5, 5, "Toyota Corolla"),
])
def test_the_shipped_example_tables_read_as_the_docs_show_them(name, columns, rows, first):
    """docs/examples/*.csv, the tables README.md and docs/annotate.md annotate: headers kept,
    quoted cells ("$120000", "$19,600") unquoted, non-ASCII cells (Amélie) intact."""
    table = read_user_table(ROOT / "docs" / "examples" / name)
    assert (table.num_columns, table.num_rows, table.columns[0][0]) == (columns, rows, first)
    assert sorted(p.name for p in (ROOT / "docs" / "examples").glob("*.csv")) == [
        "books.csv", "cars.csv", "employees.csv", "films.csv", "hotels.csv"]
    if name == "employees.csv":
        assert table.column_names[3] == "salary" and table.columns[3][0] == "$120000"
    if name == "cars.csv":
        assert table.column_names[3] == "price" and table.columns[3][0] == "$19,600"
    if name == "films.csv":
        assert "Amélie" in table.columns[0]


@pytest.mark.parametrize("kind", ["phase1", "phase3", "phase4"])
def test_a_file_read_lazily_is_annotated_as_the_whole_file(tmp_path, checkpoints, kind):
    """The rows the checkpoint reads (and the first few, for the samples) are all `read` keeps of
    a 240-row file, and the annotation is the whole file's, in a batch with another table."""
    annotator = CheckpointAnnotator(checkpoints[kind])
    paths = [wide_csv(tmp_path / "wide.csv"), wide_csv(tmp_path / "short.csv", rows=4, columns=5)]
    lazy = [annotator.read(p) for p in paths]
    whole = [read_user_table(p) for p in paths]
    read = sum(1 for column in lazy[0].columns for _ in column.read_rows()) // lazy[0].num_columns
    assert lazy[0].num_rows == 240 and read < 240 / 2

    def annotate(tables):
        return annotator.annotate(tables, [annotator.serialize(t, p) for t, p in zip(tables, paths)], paths, top_k=3)

    got, expected = annotate(lazy), annotate(whole)
    assert got == expected  # the samples too: the first non-empty cells are in the first rows
    assert got[0]["fingerprint"] == annotator.fingerprint and got[0]["rows"] == 240
    if kind == "phase4":
        assert got[0]["swarm"]["subagents"] == 2 and got[0]["swarm"]["deep_search"] is not None
        assert got[0]["swarm"]["second_opinions"] == list(annotator.swarm.names)

    if kind == "phase3":
        assert got[0]["specialists"]["activated"]
        # the orchestrator votes with the experts it activated, and the text says so
        from aegir.inference import format_annotations

        assert got[0]["specialists"]["vote"] is True
        assert "; labels voted with theirs;" in format_annotations(got[0])
        quiet = {**got[0], "specialists": {**got[0]["specialists"], "vote": False}}
        assert "voted" not in format_annotations(quiet)
        # a specialist only another row view activated is named as such
        assert got[0]["specialists"]["activated_other_views"] == []  # (nearly) every gate is open in every view
        other = {**got[0], "specialists": {**got[0]["specialists"], "activated": ["primary"],
                                           "activated_other_views": ["media"]}}
        assert "specialists activated: primary (of" in format_annotations(other)
        assert "; in another row view also media;" in format_annotations(other)


class RefusingAnnotator:
    """Reads files whole; refuses (like a model would) any batch holding a table named `bad*`."""

    fingerprint = "f" * 64

    def read(self, path):
        return read_user_table(path)

    def serialize(self, table, path):
        return table.table_id

    def annotate(self, tables, examples, paths, top_k=1):
        if any(e.startswith("bad") for e in examples):
            raise ValueError("cannot read this table")
        return [{"table": str(p), "checkpoint": "ck", "fingerprint": self.fingerprint,
                 "columns": [{"index": 0, "name": "a", "cta": [{"label": "URL", "confidence": 0.5}], "cpa": None}]}
                for p in paths]


def test_a_table_the_model_refuses_fails_alone_and_the_rest_of_its_batch_is_annotated(tmp_path):
    for name in ("a.csv", "bad.csv", "c.csv", "nothing.csv"):
        (tmp_path / name).write_text("a\n1\n" if name != "nothing.csv" else "")
    files, problems = find_tables([tmp_path])
    assert [f.name for f in files] == ["a.csv", "bad.csv", "c.csv", "nothing.csv"] and not problems
    failures: list[Failure] = []
    done = []
    results = list(annotate_files(RefusingAnnotator(), files, batch_size=4, on_failure=failures.append,
                                  on_progress=done.append))
    assert [Path(r["table"]).name for r in results] == ["a.csv", "c.csv"]
    assert [(f.path.name, str(f)) for f in failures] == [
        ("nothing.csv", f"{tmp_path / 'nothing.csv'}: empty file"),
        ("bad.csv", f"{tmp_path / 'bad.csv'}: the model cannot read it: cannot read this table")]
    assert sum(done) == 4


def test_output_rows_in_every_format():
    result = {"table": "t.csv", "checkpoint": "models/phase3", "fingerprint": "ab" * 32, "columns": [
        {"index": 0, "name": "hotel", "cta": [{"label": "Hotel/name", "confidence": 0.9},
                                              {"label": "Place/name", "confidence": 0.05}], "cpa": None},
        {"index": 1, "name": None, "cta": [{"label": "telephone", "confidence": 0.6},
                                           {"label": "faxNumber", "confidence": 0.3}],
         "cpa": [{"label": "telephone", "confidence": 0.7}, {"label": "faxNumber", "confidence": 0.2}]}]}
    one = column_rows(result, top_k=1)
    assert one[1] == {"table": "t.csv", "column_index": 1, "column_name": None, "cta_label": "telephone",
                      "cta_confidence": 0.6, "cpa_label": "telephone", "cpa_confidence": 0.7,
                      "checkpoint": "models/phase3", "fingerprint": "ab" * 32}
    assert one[0]["cpa_label"] is None and one[0]["cpa_confidence"] is None
    two = column_rows(result, top_k=2)
    lines = rows_bytes(two, "jsonl", 2).decode().splitlines()
    assert json.loads(lines[0])["cta_top_k"][1] == {"label": "Place/name", "confidence": 0.05}
    text = rows_bytes(one, "csv", 1).decode().splitlines()
    assert text[0] == "table,column_index,column_name,cta_label,cta_confidence,cpa_label,cpa_confidence,checkpoint," \
                      "fingerprint" and text[1].startswith("t.csv,0,hotel,Hotel/name,0.9,,,")
    import io

    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(rows_bytes(two, "parquet", 2)))
    assert table.column("cpa_top_k").to_pylist()[0] is None and table.num_rows == 2
    assert str(table.schema.field("column_index").type) == "int32"


def test_a_swarm_written_before_second_opinions_is_refused_with_what_to_do(tmp_path, checkpoints):
    import shutil

    from safetensors.torch import load_file, save_file

    from aegir.model.checkpoint import CheckpointError
    from aegir.swarm.model import load_swarm

    old = tmp_path / "phase4"
    shutil.copytree(checkpoints["phase4"], old)
    (old / "config.json").write_text((checkpoints["phase4"] / "config.json").read_text().replace(
        '"checkpoint": "../', f'"checkpoint": "{checkpoints["phase4"].parent}/'))
    tensors = load_file(old / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if not k.startswith(("policy.consult_head.", "merge.consult"))},
              old / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"before second opinions.*dvc repro phase4"):
        load_swarm(old)


def test_a_swarm_records_how_its_merge_is_read_and_one_written_before_reads_it_as_a_product(tmp_path, checkpoints):
    import json
    import shutil

    from aegir.model.checkpoint import CheckpointError
    from aegir.swarm.model import load_swarm

    assert json.loads((checkpoints["phase4"] / "config.json").read_text())["swarm"]["merge"] == "product"
    old = tmp_path / "phase4"
    shutil.copytree(checkpoints["phase4"], old)
    config = json.loads((checkpoints["phase4"] / "config.json").read_text().replace(
        '"checkpoint": "../', f'"checkpoint": "{checkpoints["phase4"].parent}/'))
    config["swarm"]["merge"] = "geometric"
    (old / "config.json").write_text(json.dumps(config))
    assert load_swarm(old)[0].merge.mode == "geometric"
    del config["swarm"]["merge"]
    (old / "config.json").write_text(json.dumps(config))
    assert load_swarm(old)[0].merge.mode == "product"
    config["swarm"]["merge"] = "sum"
    (old / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r'"merge" must be one of'):
        load_swarm(old)
