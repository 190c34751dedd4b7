"""The prepare stage on bad input: a clear error naming the file, and no partial output."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
import yaml

from conftest import (
    ROOT,
    TINY_PARAMS_OVERRIDE,
    deep_update,
    good_table,
    sotab_dir,
    tool_env,
)


def run_prepare(tmp_path, data_root):
    params = {"prepare": {"source": "sotab", "sotab_dir": str(data_root), "byte_budget": 256}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return subprocess.run([sys.executable, "-m", "aegir.stages.prepare", "--params", "params.yaml",
                           "--out", "out/data", "--stats", "out/stats.json"],
                          cwd=tmp_path, env=tool_env(ROOT), capture_output=True, text=True)


def test_good_sotab_directory_prepares(tmp_path):
    proc = run_prepare(tmp_path, sotab_dir(tmp_path / "sotab", good_table()))
    assert proc.returncode == 0, proc.stderr
    stats = json.loads((tmp_path / "out/stats.json").read_text())
    assert stats["splits"]["test"]["tables"] == 1 and stats["splits"]["corner_cases"]["cpa_pairs"] == 1


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("truncated", "Hotel_example.com_September2020_CPA.json.gz"),
        ("bad_json", ":1"),
        ("unknown_label", "not in"),
        ("missing_dir", "not found"),
    ],
)
def test_bad_input_fails_clearly_and_leaves_nothing(tmp_path, case, expected):
    table = good_table()
    label = "telephone"
    if case == "truncated":
        table = table[: len(table) // 2]
    elif case == "bad_json":
        table = gzip.compress(b'{"0": "Hotel Adlon", "1": \n')
    elif case == "unknown_label":
        label = "phoneNumberish"
    root = tmp_path / "sotab"
    if case != "missing_dir":
        sotab_dir(root, table, label)
    proc = run_prepare(tmp_path, root)
    assert proc.returncode != 0
    assert "prepare: error:" in proc.stderr and expected in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_failure_keeps_previous_output_intact(tmp_path):
    assert run_prepare(tmp_path, sotab_dir(tmp_path / "good", good_table())).returncode == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out/data").iterdir()}
    proc = run_prepare(tmp_path, sotab_dir(tmp_path / "bad", good_table()[:20]))
    assert proc.returncode != 0
    after = {p.name: p.read_bytes() for p in (tmp_path / "out/data").iterdir()}
    assert after == before
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no temporaries left


def test_processes_and_chunks_change_no_byte(tmp_path):
    """prepare generates and serializes the synthetic splits in ranges, in worker processes
    (aegir.data.prepare.prepare_splits): the Parquet files are the same bytes whatever the
    process count and range size, and the same as one piece per split; the tables too."""
    from aegir.config import PREPARED_SPLITS, parse_params
    from aegir.data.prepare import prepare_splits, write_parquet
    from aegir.data.synth import generate_split

    tiny = {k: v for k, v in TINY_PARAMS_OVERRIDE.items() if k in ("synthetic", "prepare")}
    params = parse_params(deep_update(tiny, {"synthetic": {
        "train_tables": 9, "valid_tables": 3, "test_tables": 4, "corner_cases_tables": 3,
        "missing_values_tables": 2, "format_heterogeneity_tables": 2, "wide_tables": 3,
        "wide_train_tables": 2}, "prepare": {"train_views": 2}}))
    runs = {"one piece": prepare_splits(params, lambda *_: None, processes=1, chunk=1000),
            "ranges of 2, 2 processes": prepare_splits(params, lambda *_: None, processes=2, chunk=2)}
    files = {}
    for name, (tables, arrow) in runs.items():
        assert list(tables) == list(arrow) == list(PREPARED_SPLITS)
        out = tmp_path / name.replace(" ", "_").replace(",", "")
        out.mkdir()
        for split in PREPARED_SPLITS:
            write_parquet(arrow[split], out / f"{split}.parquet")
        files[name] = {split: (out / f"{split}.parquet").read_bytes() for split in PREPARED_SPLITS}
    assert files["one piece"] == files["ranges of 2, 2 processes"]
    one, ranged = runs["one piece"][0], runs["ranges of 2, 2 processes"][0]
    assert one == ranged
    assert one["test"] == generate_split(params.synthetic, "test")
    assert len(one["train"]) == 2 * 9 and len(one["wide_train"]) == 2  # train with one view of each table
    assert runs["ranges of 2, 2 processes"][1]["train"].num_rows == 18
