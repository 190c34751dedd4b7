"""The prepare stage on bad input: a clear error naming the file, and no partial output."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, good_table, sotab_dir, tool_env


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
