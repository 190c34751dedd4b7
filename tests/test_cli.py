"""`aegir annotate` / `aegir evaluate` on a tiny checkpoint, and their bad-input cases."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import zstandard
from click.testing import CliRunner

from aegir.cli import main
from aegir.config import PrepareConfig, parse_params
from aegir.data.prepare import prepare_dataset
from aegir.model.checkpoint import save_checkpoint
from aegir.model.network import AegirModel, preset
from conftest import BIN, ROOT, TINY_PARAMS_OVERRIDE, good_table, sotab_dir, tool_env

CSV = "hotel,phone,zip\nHotel Adlon,+49 30 22610,01234\nThe Ritz,+44 20 7493 8181,W1J 9BR\n"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(0)
    model = AegirModel(preset("tiny"))
    prepare = PrepareConfig(byte_budget=512, max_rows=6)
    save_checkpoint(root / "model", model, {"params": {"prepare": asdict(prepare)}})
    return root / "model"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    params = parse_params({k: v for k, v in TINY_PARAMS_OVERRIDE.items() if k in ("synthetic", "prepare")})
    prepare_dataset(params, root / "data", root / "stats.json")
    return root / "data"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_help_lists_commands():
    out = subprocess.run([str(BIN / "aegir"), "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("annotate", "evaluate", "params", "stages"):
        assert command in out


def test_annotate_reads_a_wide_table_in_column_groups(tmp_path, checkpoint):
    torch.manual_seed(0)
    model = AegirModel(preset("tiny"))
    prepare = PrepareConfig(byte_budget=512, max_rows=6)
    save_checkpoint(tmp_path / "model", model, {"params": {"prepare": asdict(prepare),
                                                            "reading": {"columns": 4, "views": 2}}})
    header = ",".join(f"c{i}" for i in range(10))
    rows = "\n".join(",".join(f"v{r}-{i}" for i in range(10)) for r in range(5))
    (tmp_path / "wide.csv").write_text(header + "\n" + rows + "\n")
    result = invoke("annotate", tmp_path / "wide.csv", "--checkpoint", tmp_path / "model", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["read_groups"] == [[0, 1, 2, 3], [0, 4, 5, 6], [0, 7, 8, 9]]
    assert len(out["columns"]) == 10 and all(len(c["cta"]) == 1 for c in out["columns"])
    text = invoke("annotate", tmp_path / "wide.csv", "--checkpoint", tmp_path / "model")
    assert "read in 3 column groups" in text.output and "read in 2 row views" in text.output
    # a checkpoint that records no read_columns (written before it existed) reads tables whole
    whole = invoke("annotate", tmp_path / "wide.csv", "--checkpoint", checkpoint, "--json")
    assert whole.exit_code == 0 and "read_groups" not in json.loads(whole.output)
    assert json.loads(whole.output)["read_views"] == 1


@pytest.mark.parametrize("suffix", ["csv", "parquet", "jsonl", "json.gz"])
def test_annotate_every_format(tmp_path, checkpoint, suffix):
    rows = [line.split(",") for line in CSV.strip().splitlines()]
    path = tmp_path / f"t.{suffix}"
    if suffix == "csv":
        path.write_text(CSV)
    elif suffix == "parquet":
        pq.write_table(pa.table({h: [r[i] for r in rows[1:]] for i, h in enumerate(rows[0])}), path)
    elif suffix == "jsonl":
        path.write_text("".join(json.dumps(dict(zip(rows[0], r))) + "\n" for r in rows[1:]))
    else:
        with gzip.open(path, "wt") as f:
            f.writelines(json.dumps({str(i): c for i, c in enumerate(r)}) + "\n" for r in rows[1:])
    result = invoke("annotate", path, "--checkpoint", checkpoint, "--json", "--top-k", "3")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out["columns"]) == 3
    assert out["columns"][0]["cpa"] is None and len(out["columns"][1]["cpa"]) == 3
    for col in out["columns"]:
        confidences = [a["confidence"] for a in col["cta"]]
        assert confidences == sorted(confidences, reverse=True) and 0 < confidences[0] <= 1
    assert "01234" in out["columns"][2]["sample"]  # cells stay strings
    text = invoke("annotate", path, "--checkpoint", checkpoint)
    assert text.exit_code == 0 and "(subject)" in text.output


# --------------------------------------------------------------------------- many tables


def write_mixed_folder(root: Path) -> dict[str, int]:
    """A folder of every table format (some nested), a broken CSV and a file that is no table;
    file name → its column count."""
    rows = [line.split(",") for line in CSV.strip().splitlines()]
    (root / "nested" / "deeper").mkdir(parents=True)
    (root / "hotels.csv").write_text(CSV)
    (root / "hotels.tsv").write_text(CSV.replace(",", "\t"))
    (root / "nested" / "hotels.csv.gz").write_bytes(gzip.compress(CSV.encode()))
    (root / "nested" / "hotels.csv.zst").write_bytes(zstandard.ZstdCompressor().compress(CSV.encode()))
    pq.write_table(pa.table({h: [r[i] for r in rows[1:]] for i, h in enumerate(rows[0])}), root / "hotels.parquet")
    (root / "nested" / "deeper" / "hotels.jsonl").write_text(
        "".join(json.dumps(dict(zip(rows[0][:2], r[:2]))) + "\n" for r in rows[1:]))
    with gzip.open(root / "Hotel_example.com_September2020_CTA.json.gz", "wt") as f:
        f.writelines(json.dumps({str(i): c for i, c in enumerate(r)}) + "\n" for r in rows[1:])
    (root / "broken.csv").write_bytes("name,city\nJos\xe9,K\xf6ln\n".encode("latin-1"))
    (root / "notes.md").write_text("not a table: left out of a folder\n")
    return {"hotels.csv": 3, "hotels.tsv": 3, "hotels.csv.gz": 3, "hotels.csv.zst": 3, "hotels.parquet": 3,
            "hotels.jsonl": 2, "Hotel_example.com_September2020_CTA.json.gz": 3}


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_annotate_a_folder_of_every_format_with_one_broken_file(tmp_path, checkpoint, suffix):
    """One command, one model load: every table of the folder annotated into one row per column,
    the broken file named with its reason and skipped, the exit status 1 (a table failed)."""
    from aegir.model.checkpoint import checkpoint_fingerprint

    columns = write_mixed_folder(tmp_path / "tables")
    out = tmp_path / f"labels{suffix}"
    result = CliRunner().invoke(main, ["annotate", str(tmp_path / "tables"), "--checkpoint", str(checkpoint),
                                       "--out", str(out), "--top-k", "2"])
    assert result.exit_code == 1, result.output
    assert f"aegir: error: {tmp_path / 'tables' / 'broken.csv'}:2: not valid UTF-8" in result.output
    assert "1 of 8 table(s) failed" in result.output and f"wrote {out}: 20 columns of 7 tables" in result.output
    if suffix == ".parquet":
        rows = pq.read_table(out).to_pylist()
    elif suffix == ".csv":
        rows = list(csv.DictReader(out.open()))
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({Path(r["table"]).name for r in rows}) == sorted(columns)
    for name, count in columns.items():
        mine = [r for r in rows if Path(r["table"]).name == name]
        assert [int(r["column_index"]) for r in mine] == list(range(count)), name
    assert set(rows[0]) == {"table", "column_index", "column_name", "cta_label", "cta_confidence", "cpa_label",
                            "cpa_confidence", "cta_top_k", "cpa_top_k", "checkpoint", "fingerprint"}
    first = next(r for r in rows if r["table"].endswith("hotels.csv"))
    assert first["column_name"] == "hotel" and first["cpa_label"] in (None, "")  # the subject has no relation
    top = json.loads(first["cta_top_k"]) if suffix == ".csv" else first["cta_top_k"]
    assert len(top) == 2 and top[0]["label"] == first["cta_label"]
    assert {r["fingerprint"] for r in rows} == {checkpoint_fingerprint(checkpoint)}


def test_annotate_globs_several_paths_and_strict_stops(tmp_path, checkpoint):
    write_mixed_folder(tmp_path)
    out = tmp_path / "labels.jsonl"
    result = invoke("annotate", str(tmp_path / "*.csv"), tmp_path / "hotels.parquet", "--checkpoint", checkpoint,
                    "--json")
    assert result.exit_code == 1  # broken.csv matched the glob
    tables = json.loads(result.stdout)  # several paths: a list, one object per table annotated
    assert [Path(t["table"]).name for t in tables] == ["hotels.csv", "hotels.parquet"]
    assert all(t["fingerprint"] and t["checkpoint"] == str(checkpoint) for t in tables)
    strict = invoke("annotate", tmp_path, "--checkpoint", checkpoint, "--out", out, "--strict")
    assert strict.exit_code == 1 and "stopped at the first failure (--strict)" in strict.output
    assert not out.exists() and not list(tmp_path.glob(".labels.jsonl*"))
    none = invoke("annotate", str(tmp_path / "*.xlsx"), "--checkpoint", checkpoint)
    assert none.exit_code == 1 and "the pattern matches no table file" in none.output
    bad_out = invoke("annotate", tmp_path / "hotels.csv", "--checkpoint", checkpoint, "--out", tmp_path / "x.xlsx")
    assert bad_out.exit_code == 2 and "unknown output format '.xlsx'" in bad_out.output


def test_annotate_a_table_with_a_huge_cell(tmp_path, checkpoint):
    path = tmp_path / "notes.csv"
    path.write_text(f"name,notes\nAdlon,{'x' * 200_000}\nRitz,short\n")
    result = invoke("annotate", path, "--checkpoint", checkpoint, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["columns"][1]["sample"][0] == "x" * 200_000


def test_annotate_uses_the_checkpoint_the_report_found_best(tmp_path, checkpoint, monkeypatch):
    """No --checkpoint: results/report/best.json's pick, named with its fingerprint; without the
    report, models/phase1/primary, saying so."""
    from aegir.model.checkpoint import checkpoint_fingerprint

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(CSV)
    shutil.copytree(checkpoint, tmp_path / "models" / "phase1" / "primary")
    result = invoke("annotate", "t.csv")
    assert result.exit_code == 0, result.output
    assert "no results/report/best.json (the pipeline's report stage writes it): using models/phase1/primary" \
        in result.stderr
    assert f"checkpoint: models/phase1/primary (fingerprint {checkpoint_fingerprint(checkpoint)[:16]})" in result.stdout
    torch.manual_seed(1)
    save_checkpoint(tmp_path / "models" / "phase3" / "control", AegirModel(preset("tiny")),
                    {"params": {"prepare": asdict(PrepareConfig(byte_budget=512, max_rows=6))}})
    (tmp_path / "results" / "report").mkdir(parents=True)
    (tmp_path / "results" / "report" / "best.json").write_text(json.dumps(
        {"checkpoint": "models/phase3/control", "model": "control", "split": "real",
         "metric": "mean of CTA and CPA micro-F1", "score": 61.25}))
    result = invoke("annotate", "t.csv", "--json")
    assert result.exit_code == 0, result.output
    assert "using models/phase3/control, the best on real in results/report/best.json" in result.stderr
    out = json.loads(result.stdout)
    assert out["checkpoint"] == "models/phase3/control"
    assert out["fingerprint"] == checkpoint_fingerprint(tmp_path / "models" / "phase3" / "control")
    assert invoke("annotate", "t.csv", "--checkpoint", "models/phase1/primary", "--json").exit_code == 0


def test_ctrl_c_mid_run_leaves_no_output_file(tmp_path, checkpoint):
    """SIGINT while a folder is being annotated: exit 130, the --out file not there, no temporary
    left beside it."""
    folder = tmp_path / "tables"
    folder.mkdir()
    for i in range(600):  # a broken table every 50: the stderr lines that show the run is under way
        (folder / f"t{i:04d}.csv").write_bytes(b"a,b\n\xff,1\n" if i % 50 == 0 else CSV.encode())
    out = tmp_path / "labels.parquet"
    env = dict(tool_env(ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "aegir.cli", "annotate", str(folder), "--checkpoint",
                             str(checkpoint), "--out", str(out), "--batch-size", "4"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "aegir: error:" in line and "t0050.csv" in line:  # 50 tables done, 550 to go
            proc.send_signal(signal.SIGINT)
            break
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + rest
    assert "interrupted" in rest and f"{out} not written" in rest
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".labels")]


def test_evaluate_prepared_data_writes_json(tmp_path, checkpoint, prepared):
    out = tmp_path / "eval.json"
    result = invoke("evaluate", "--checkpoint", checkpoint, "--data", prepared, "--out", out)
    assert result.exit_code == 0, result.output
    scores = json.loads(out.read_text())
    assert set(scores) == {"train", "valid", "test", "corner_cases", "missing_values", "format_heterogeneity",
                           "real", "wide"}
    assert scores["test"]["cta"]["support"] > 0
    assert "corner_cases" in result.output


def test_evaluate_by_domain_scores_each_domains_tables_alone(tmp_path, checkpoint, prepared):
    """--by-domain: per split and domain the same predictions scored on that domain's tables;
    the supports add up to the split's, and each domain gets a printed row."""
    out = tmp_path / "eval.json"
    result = invoke("evaluate", "--checkpoint", checkpoint, "--data", prepared, "--split", "real", "--split", "test",
                    "--by-domain", "--out", out)
    assert result.exit_code == 0, result.output
    scores = json.loads(out.read_text())
    for split in ("real", "test"):
        domains = scores[split]["domains"]
        for task in ("cta", "cpa"):
            assert sum(r["support"] for r in domains[task].values()) == scores[split][task]["support"]
        for domain in domains["cta"]:
            assert f"  {split} {domain}" in result.output
    assert "Movie" in scores["real"]["domains"]["cta"]
    plain = invoke("evaluate", "--checkpoint", checkpoint, "--data", prepared, "--split", "real", "--out", out)
    assert plain.exit_code == 0 and "domains" not in json.loads(out.read_text())["real"]


def test_evaluate_sotab_directory(tmp_path, checkpoint):
    root = sotab_dir(tmp_path / "sotab", good_table())
    result = invoke("evaluate", "--checkpoint", checkpoint, "--data", root, "--split", "test",
                    "--split", "corner_cases")
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.output.splitlines()[1:]] == ["test", "corner_cases"]


def test_evaluate_a_sotab_directory_with_only_test_scores_its_test_splits(tmp_path, checkpoint):
    """No --split: every split the directory has (here Test/ only, with its four CSV subsets)."""
    root = sotab_dir(tmp_path / "sotab", good_table())
    shutil.rmtree(root / "Train")
    shutil.rmtree(root / "Validation")
    for task in ("cta", "cpa"):
        for stem in ("training", "validation"):
            (root / f"sotab_v2_{task}_{stem}_set.csv").unlink()
    out = tmp_path / "eval.json"
    result = invoke("evaluate", "--checkpoint", checkpoint, "--data", root, "--out", out)
    assert result.exit_code == 0, result.output
    scores = json.loads(out.read_text())
    assert set(scores) == {"test", "corner_cases", "missing_values", "format_heterogeneity"}
    assert scores["test"]["cta"]["support"] == 1 and scores["test"]["cpa"]["support"] == 1


def test_evaluate_a_directory_that_is_neither_is_a_clear_error(tmp_path, checkpoint):
    (tmp_path / "stuff").mkdir()
    result = CliRunner().invoke(main, ["evaluate", "--checkpoint", str(checkpoint), "--data", str(tmp_path / "stuff")])
    assert result.exit_code != 0
    assert f"aegir: error: {tmp_path / 'stuff'}: neither prepared data" in result.output


def test_missing_pipeline_outputs_say_run_the_pipeline_first(tmp_path, monkeypatch):
    """The default checkpoint and data paths are pipeline outputs: their absence says so."""
    table = tmp_path / "t.csv"
    table.write_text(CSV)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["annotate", str(table)])
    assert result.exit_code != 0
    assert "models/phase1/primary: checkpoint not found" in result.output and "run the pipeline first" in result.output
    result = CliRunner().invoke(main, ["evaluate", "--data", "data/prepared"])
    assert "data/prepared: data directory not found" in result.output and "run the pipeline first" in result.output


@pytest.mark.parametrize("case", ["missing", "not_safetensors", "no_config", "truncated"])
def test_bad_checkpoint_is_a_clear_error(tmp_path, checkpoint, case):
    table = tmp_path / "t.csv"
    table.write_text(CSV)
    bad = tmp_path / "ckpt"
    if case != "missing":
        shutil.copytree(checkpoint, bad)
    if case == "not_safetensors":
        (bad / "model.safetensors").write_bytes(b"\x80\x04pickle-like bytes")
    elif case == "no_config":
        (bad / "config.json").unlink()
    elif case == "truncated":
        data = (bad / "model.safetensors").read_bytes()
        (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    result = CliRunner().invoke(main, ["annotate", str(table), "--checkpoint", str(bad)])
    assert result.exit_code != 0
    expected = {"missing": f"{bad}/config.json: missing", "no_config": f"{bad}/config.json: missing",
                "not_safetensors": f"{bad}/model.safetensors: not a readable safetensors file",
                "truncated": f"{bad}/model.safetensors: not a readable safetensors file"}[case]
    assert f"aegir: error: {expected}" in result.output, result.output


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("empty.csv", "", "empty file"),
        ("header_only.csv", "a,b\n", "a header but no data rows"),
        ("latin1.csv", "name,city\nJos\xe9,K\xf6ln\n".encode("latin-1"), "not valid UTF-8"),
        ("table.xlsx", "x", "unsupported file type"),
        ("broken.json.gz", b"\x1f\x8b\x08\x00trunc", "truncated or corrupt gzip data"),
    ],
)
def test_bad_table_is_a_clear_error(tmp_path, checkpoint, name, content, problem):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = CliRunner().invoke(main, ["annotate", str(path), "--checkpoint", str(checkpoint)])
    assert result.exit_code != 0
    assert f"aegir: error: {path}" in result.output and problem in result.output


def test_missing_table_and_missing_data_dir(tmp_path, checkpoint):
    result = CliRunner().invoke(main, ["annotate", str(tmp_path / "nope.csv"), "--checkpoint", str(checkpoint)])
    assert result.exit_code != 0 and f"{tmp_path / 'nope.csv'}: file not found" in result.output
    result = CliRunner().invoke(main, ["evaluate", "--checkpoint", str(checkpoint), "--data", str(tmp_path / "nodata")])
    assert result.exit_code != 0 and f"{tmp_path / 'nodata'}: data directory not found" in result.output
    assert "run the pipeline first" not in result.output  # not a pipeline output path


def test_real_errors_script_lists_per_label_f1(tmp_path, checkpoint, prepared):
    """scripts/real_errors.py on a checkpoint: a per-label table for both tasks and its JSON."""
    out = tmp_path / "errors.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/real_errors.py"), "--checkpoint", str(checkpoint),
                           "--data", str(prepared), "--split", "test", "--json", str(out)],
                          env=tool_env(ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "**CTA**" in proc.stdout and "**CPA**" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["model"]) == {"cta", "cpa"} and result["model"]["cta"]  # a row per gold label


def test_real_errors_script_names_a_missing_checkpoint(tmp_path, prepared):
    out = tmp_path / "errors.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/real_errors.py"), "--checkpoint", str(tmp_path / "nope"),
                           "--data", str(prepared), "--split", "test", "--json", str(out)],
                          env=tool_env(ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "real_errors: error:" in proc.stderr and "nope" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_read_columns_sweep_scores_each_setting(checkpoint, prepared):
    """scripts/read_columns_sweep.py: one line per setting; narrower groups read more streams."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/read_columns_sweep.py"), "--checkpoint", str(checkpoint),
                           "--data", str(prepared), "--splits", "wide", "--read-columns", "0", "3",
                           "--read-views", "1"],
                          env=tool_env(ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "read_columns" in line]
    assert len(lines) == 2 and "CTA" in lines[0]
    streams = [int(line.split(":")[1].split()[0]) for line in lines]
    assert streams[1] > streams[0]  # the wide split's tables (6–10 columns) split into groups of ≤ 3
    bad = subprocess.run([sys.executable, str(ROOT / "scripts/read_columns_sweep.py"), "--checkpoint", str(checkpoint),
                          "--data", str(prepared), "--splits", "wide", "--read-columns", "1"],
                         env=tool_env(ROOT), capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--read-columns 1" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("change,expected", [
    ({"d_model": 95}, r"presets\.cpu: model\.head_size: d_model 95 must be a positive multiple of 32"),
    ({"dmodel": 96}, r"presets\.cpu\.dmodel: unknown key"),
    ({"wkv_kernel": "no"}, r"presets\.cpu\.wkv_kernel: expected true/false"),
])
def test_params_checks_every_preset_as_phase1_builds_it(tmp_path, change, expected):
    """`aegir params` refuses a preset that phase1 would refuse (sizes that do not fit, unknown
    fields, wrong types), naming the file and the preset, before any stage runs."""
    import re

    import yaml

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["presets"]["cpu"].update(change)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(main, ["params", "--params", str(path)])
    assert result.exit_code == 2
    assert str(path) in result.output and re.search(expected, result.output), result.output
    assert invoke("params", "--params", ROOT / "params.yaml").exit_code == 0


def test_lofo_script_scores_families_and_the_baseline(tmp_path, checkpoint, prepared):
    """scripts/lofo.py end to end: one checkpoint on both sides changes no family's F1; the
    baseline fitted on the after data's train split is scored per family, the held-out pool
    being every family but the motivated one."""
    out = tmp_path / "lofo.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/lofo.py"), "--before", str(checkpoint),
                           "--after", str(checkpoint), "--before-data", str(prepared), "--after-data", str(prepared),
                           "--motivated", "movies", "--baseline", "--params", str(ROOT / "params.yaml"),
                           "--json", str(out)], env=tool_env(ROOT), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "CTA after − baseline" in proc.stdout and "| movies (motivated) |" in proc.stdout
    result = json.loads(out.read_text())
    summary, base = result["summary"], result["baseline"]
    assert all(s[task]["change"] == 0 for s in summary.values() for task in ("cta", "cpa"))
    for task in ("cta", "cpa"):
        families = [f for f in base if f not in ("held-out", "movies")]
        assert base["held-out"][task]["n"] == sum(base[f][task]["n"] for f in families if task in base[f])
        assert base["held-out"][task]["n"] == summary["held-out"][task]["n"]  # the same columns as the model's
        assert 0 <= base["held-out"][task]["f1"] <= 100


def test_lofo_script_judges_against_a_null_arm_and_scores_the_synthetic_splits(tmp_path, checkpoint, prepared,
                                                                              monkeypatch, capsys):
    """scripts/lofo.py --null --synthetic: the null arm's change beside the after runs' and their
    difference, per family and per synthetic split; each model scored on its seed's before data
    as `aegir evaluate` scores it; arms of different lengths are refused."""
    torch.manual_seed(1)
    other = tmp_path / "other"
    save_checkpoint(other, AegirModel(preset("tiny")),
                    {"params": {"prepare": asdict(PrepareConfig(byte_budget=512, max_rows=6))}})
    out = tmp_path / "lofo.json"
    script = [sys.executable, str(ROOT / "scripts/lofo.py")]
    args = ["--before", str(checkpoint), str(checkpoint), "--after", str(checkpoint), str(other),
            "--null", str(other), str(other), "--before-data", str(prepared), str(prepared),
            "--after-data", str(prepared), "--motivated", "movies", "--synthetic", "--json", str(out)]
    proc = subprocess.run(script + args, env=tool_env(ROOT), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "CTA null change | CTA after − null |" in proc.stdout and "| split |" in proc.stdout
    result = json.loads(out.read_text())
    for summary, judged in ((result["summary"], result["against_null"]),
                            (result["synthetic"]["summary"], result["synthetic"]["against_null"])):
        assert set(judged) == set(summary)
        for group, tasks in judged.items():
            for task, z in tasks.items():
                assert z["over_null"] == pytest.approx(summary[group][task]["change"] - z["null"])
    # the null arm is `other` on both seeds, the after runs `checkpoint` then `other`: after − null
    # is half the before model's lead over `other`, the same on every family and split
    split = result["synthetic"]
    assert set(split["summary"]) == {"valid", "test", "corner_cases", "missing_values", "format_heterogeneity", "wide"}
    lead = {t: split["before"][0]["test"][t]["f1"] - split["null"][0]["test"][t]["f1"] for t in ("cta", "cpa")}
    for t in ("cta", "cpa"):
        assert split["against_null"]["test"][t]["over_null"] == pytest.approx(lead[t] / 2)
    scores = tmp_path / "scores.json"
    assert invoke("evaluate", "-c", other, "-d", prepared, "--split", "test", "-o", scores).exit_code == 0
    evaluated = json.loads(scores.read_text())["test"]
    for t in ("cta", "cpa"):
        assert split["null"][1]["test"][t]["f1"] == pytest.approx(evaluated[t]["micro_f1"], abs=1e-3)
    # arms are paired by seed (refused before any model is read)
    spec = importlib.util.spec_from_file_location("lofo", ROOT / "scripts" / "lofo.py")
    lofo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lofo)
    three = ["--before-data", str(prepared), str(prepared), str(prepared)]
    for argv, message in (([*args[:args.index("--null") + 1], str(other), *args[args.index("--before-data"):]],
                           "2 --before checkpoints but 1 --null"),
                          ([*args[:args.index("--before-data")], *three, *args[args.index("--after-data"):]],
                           "3 --before-data directories for 2 seeds")):
        monkeypatch.setattr(sys, "argv", ["lofo.py", *argv])
        with pytest.raises(SystemExit) as exit_:
            lofo.main()
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_phase3_seeds_script_compares_paired_seeds(tmp_path):
    """scripts/phase3_seeds.py --show: each variant's mean and range over the seeds, the fused
    model's margin over each control per seed, flagged where the signs differ; the all-knowledge
    primaries beside them, paired by position (one per seed, else a clear error); a scores.json
    without a variant fails naming the file."""
    def scores(fused: float, control: float) -> dict:
        row = {"micro_f1": 0.0}
        out = {}
        for name, value in (("phase1", 90.0), ("control", control), ("fused", fused), ("ensemble", 91.0)):
            out[name] = {task: {split: {**row, "micro_f1": value} for split in ("corner_cases", "real")}
                         for task in ("cta", "cpa")}
        return out

    (tmp_path / "seed1").mkdir()
    (tmp_path / "seed2").mkdir()
    (tmp_path / "main.json").write_text(json.dumps(scores(92.0, 90.0)))
    (tmp_path / "seed1/scores.json").write_text(json.dumps(scores(91.0, 90.5)))
    (tmp_path / "seed2/scores.json").write_text(json.dumps(scores(89.0, 90.0)))
    out = tmp_path / "seeds.json"
    cmd = [sys.executable, str(ROOT / "scripts/phase3_seeds.py"), "--show", "--out", str(tmp_path),
           "--main-scores", str(tmp_path / "main.json"), "--splits", "corner_cases", "real", "--json", str(out)]
    proc = subprocess.run(cmd, env=tool_env(ROOT), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())["figures"]["cta"]["corner_cases"]
    assert figures["variants"]["fused"] == {"mean": 90.67, "min": 89.0, "max": 92.0}
    margin = figures["margins"]["control"]
    assert margin["per_seed"] == {"0": 2.0, "1": 0.5, "2": -1.0} and margin["mean"] == 0.5
    assert not margin["same_sign"] and "signs differ" in proc.stdout
    assert figures["margins"]["phase1"]["per_seed"] == {"0": 2.0, "1": 1.0, "2": -1.0}
    assert "seam" not in figures["variants"]  # seed 0 has no `seam` (a run from before the vote)
    # with `seam` in every seed: its figures, and the fused model's margin over it
    for name, fused in (("main.json", 92.0), ("seed1/scores.json", 91.0), ("seed2/scores.json", 89.0)):
        data = json.loads((tmp_path / name).read_text())
        data["seam"] = {task: {split: {"micro_f1": fused - 0.5} for split in ("corner_cases", "real")}
                        for task in ("cta", "cpa")}
        (tmp_path / name).write_text(json.dumps(data))
    proc = subprocess.run(cmd, env=tool_env(ROOT), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())["figures"]["cta"]["real"]
    assert figures["variants"]["seam"] == {"mean": 90.17, "min": 88.5, "max": 91.5}
    assert figures["margins"]["seam"] == {"per_seed": {"0": 0.5, "1": 0.5, "2": 0.5}, "mean": 0.5, "same_sign": True}
    # the all-knowledge primaries (phase1 scores.json, one per seed, paired by position)
    for seed, value in enumerate((93.0, 90.0, 90.0)):
        (tmp_path / f"ak{seed}").mkdir()
        (tmp_path / f"ak{seed}/scores.json").write_text(json.dumps(
            {task: {split: {"micro_f1": value} for split in ("corner_cases", "real")} for task in ("cta", "cpa")}))
    reference = [str(tmp_path / f"ak{seed}") for seed in range(3)]
    proc = subprocess.run([*cmd, "--all-knowledge", *reference], env=tool_env(ROOT), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())["figures"]["cta"]["real"]
    assert figures["variants"]["all_knowledge"] == {"mean": 91.0, "min": 90.0, "max": 93.0}
    assert figures["margins"]["all_knowledge"]["per_seed"] == {"0": -1.0, "1": 1.0, "2": -1.0}
    assert "fused − all_knowledge" in proc.stdout
    proc = subprocess.run([*cmd, "--all-knowledge", *reference[:2]], env=tool_env(ROOT), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "2 scores.json for 3 seeds" in proc.stderr
    wider = [*cmd[:cmd.index("--splits")], "--splits", "corner_cases", "wide", *cmd[cmd.index("--json"):]]
    proc = subprocess.run(wider, env=tool_env(ROOT), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no CTA score on split 'wide' in every run" in proc.stderr
    (tmp_path / "ak2/scores.json").write_text(json.dumps({"steps": 3}))
    proc = subprocess.run([*cmd, "--all-knowledge", *reference], env=tool_env(ROOT), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "ak2/scores.json: not a phase1 scores.json" in proc.stderr
    # a scores.json that is not Phase 3's
    (tmp_path / "seed2/scores.json").write_text(json.dumps({"fused": {}}))
    proc = subprocess.run(cmd, env=tool_env(ROOT), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "seed2/scores.json: no scores for ['phase1', 'control', 'ensemble']" in proc.stderr


def test_scoring_benchmark_times_every_batch_size_against_the_first(tmp_path, checkpoint, prepared, capsys):
    """benchmarks/bench_scoring.py on a tiny checkpoint: a row per batch size, the first size's
    ratio 1 and its probabilities its own; the others differ at most by float rounding; a
    missing checkpoint or split is a clear error."""
    from conftest import load_benchmark

    bench = load_benchmark("bench_scoring")
    assert bench.main(["--checkpoint", str(checkpoint), "--data", str(prepared), "--split", "test", "--tables", "6",
                       "--sizes", "4", "2", "--threads", "2", "--repeats", "1", "--json", str(tmp_path / "b.json")]) == 0
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert [row["batch_size"] for row in rows] == [4, 2]
    assert rows[0]["speedup"] == 1.0 and rows[0]["max_probability_difference"] == 0.0
    assert rows[1]["tables_per_second"] > 0 and rows[1]["max_probability_difference"] < 1e-4
    assert "tables/s" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--checkpoint", str(tmp_path / "none"), "--data", str(prepared)])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:  # a split that is not there: named, no traceback
        bench.main(["--checkpoint", str(checkpoint), "--data", str(prepared), "--split", "nosuch"])
    assert exit_info.value.code == 2 and "nosuch" in capsys.readouterr().err


def test_doc_examples_script_reruns_each_example_and_keeps_a_blocks_choice_of_header(tmp_path, checkpoint):
    """scripts/doc_examples.py: each fenced `$ aegir …` block gets what the command prints now
    (stderr, then stdout); a block without the checkpoint's header lines stays without them;
    `--check` fails on a stale block and passes once rewritten; a failing command names the file
    and line and leaves the file as it was."""
    shutil.copytree(checkpoint, tmp_path / "model")
    (tmp_path / "t.csv").write_text(CSV)
    doc = tmp_path / "doc.md"
    text = ("Intro.\n\n```\n$ aegir annotate t.csv --checkpoint model\ncheckpoint: model (fingerprint 0)\n\nold\n```\n\n"
            "Between.\n\n```\n$ aegir annotate t.csv --checkpoint model --top-k 2\nold\n```\n\nEnd.\n")
    doc.write_text(text)
    script = [sys.executable, str(ROOT / "scripts/doc_examples.py"), str(doc), "--cwd", str(tmp_path)]
    env = tool_env(tmp_path)
    check = subprocess.run([*script, "--check"], capture_output=True, text=True, env=env, timeout=300)
    assert check.returncode == 1 and f"{doc}:4" in check.stderr and f"{doc}:13" in check.stderr, check.stderr
    assert doc.read_text() == text
    run = subprocess.run(script, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = doc.read_text().splitlines()
    assert lines[:4] == ["Intro.", "", "```", "$ aegir annotate t.csv --checkpoint model"]
    first = lines[4:lines.index("```", 4)]
    second_start = lines.index("$ aegir annotate t.csv --checkpoint model --top-k 2")
    second = lines[second_start + 1:lines.index("```", second_start)]
    assert first[0].startswith("checkpoint: model (fingerprint ") and "old" not in first
    assert any(line.startswith("col  name") for line in first) and "t.csv: 3 columns, 2 rows" in "\n".join(first)
    assert not any(line.startswith("checkpoint:") for line in second) and second[0].startswith("t.csv: 3 columns")
    assert "hotel" in "\n".join(second) and lines[-1] == "End." and "Between." in lines
    assert subprocess.run([*script, "--check"], capture_output=True, text=True, env=env, timeout=300).returncode == 0
    rewritten = doc.read_text()
    doc.write_text(rewritten.replace("--top-k 2", "--top-k 2 --checkpoint missing"))
    bad = subprocess.run(script, capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 1 and f"{doc}:" in bad.stderr and "failed" in bad.stderr, bad.stderr
    assert "--checkpoint missing" in doc.read_text() and not doc.with_suffix(".md.tmp").exists()
