"""The benchmarks' own checks, run at tiny sizes (what they measure is speed, which no test
times: docs/benchmarks.md)."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from aegir.model.ops import wkv as wkv_module
from aegir.model.ops import wkv_cpu
from conftest import load_benchmark

load = load_benchmark


def test_wkv_tiles_benchmark_finds_every_way_bit_equal(tmp_path, capsys):
    """bench_wkv_tiles on the tiny preset, with tiles of 10 matrices (one batch row each: 2 heads
    × 5 chunks) and two threads: the op at two batch sizes and the three kinds of training step
    (whole batch on one thread and on two, sharded) report equal results with tiles and
    without, and the code's tile size is put back."""
    bench = load("bench_wkv_tiles")
    default = wkv_module.TILE_MATRICES
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        bench.main(["--preset", "tiny", "--repeats", "1", "--batch-size", "4", "--length", "70",
                    "--tile-matrices", "10", "--data", str(tmp_path / "no-data"),
                    "--checkpoint", str(tmp_path / "no-checkpoint")])
    finally:
        torch.set_num_threads(threads)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("op,", "step,"))]
    assert [row.split(",")[0] for row in rows] == ["op", "op", "step", "step", "step"]
    assert all(row.endswith("True") for row in rows), rows
    assert default == wkv_module.TILE_MATRICES


def test_phase1_benchmark_times_every_path_and_the_kernel(tmp_path, capsys):
    """bench_phase1 at tiny sizes: before (the code of its baseline commit, from git), after (the
    preset as is: the CPU kernels when they build), after with the chunked wkv, and the context
    paths each get a row with their FLOPs, and the chunked path's ratio is printed."""
    bench = load("bench_phase1")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        bench.main(["--preset", "tiny", "--steps", "1", "--batch-size", "2", "--length", "70",
                    "--top", "3", "--data", str(tmp_path / "no-data"), "--json", str(tmp_path / "out.json")])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    figures = json.loads((tmp_path / "out.json").read_text())
    expected = {"before", "after", "before, 1 thread", "after, whole batch, 1 thread", "after, whole batch, 2 threads",
                "after, whole-table n-grams"}
    assert "over after with whole-table n-gram gradients:" in out
    if wkv_cpu.available():
        expected.add("after, chunked wkv")
        assert "after with the chunked wkv / before:" in out
        # the kernel's path counts fewer matmul FLOPs: its recurrences are not made of matmuls
        assert figures["paths"]["after"]["gflop_per_step"] < figures["paths"]["after, chunked wkv"]["gflop_per_step"]
    assert set(figures["paths"]) == expected
    # every figure follows from the step's time, its FLOPs and the batch's real bytes (2 tables
    # of at most 70 bytes), and paths of one model count its FLOPs
    real_bytes, peak = figures["real_bytes"], figures["peak_gflop_per_s"]
    assert 0 < real_bytes <= 2 * 70
    for name, path in figures["paths"].items():
        seconds = path["ms_per_step"] / 1e3
        assert path["bytes_per_s"] == pytest.approx(real_bytes / seconds, rel=1e-9), name
        assert path["gflop_per_s"] == pytest.approx(path["gflop_per_step"] / seconds, rel=1e-9), name
        assert path["share_of_peak"] == pytest.approx(path["gflop_per_s"] / peak, rel=1e-9), name
        model = "before" if name.startswith("before") else "after, chunked wkv" if "chunked" in name else "after"
        assert path["gflop_per_step"] == figures["paths"][model]["gflop_per_step"] > 0, name
    paths = figures["paths"]
    assert figures["speedup"] == pytest.approx(paths["after"]["bytes_per_s"] / paths["before"]["bytes_per_s"], rel=1e-9)
    assert f"after / before: {figures['speedup']:.2f}× bytes/s" in out
    # the figures depend on the instruction set the kernels were built for: the header names it
    assert figures["cpu"].endswith(("AVX-512", "AVX2", "no AVX2")) and f"({figures['cpu']})" in out.splitlines()[0]


def test_wkv_benchmark_prints_every_path_and_the_ema(capsys):
    """bench_wkv at tiny sizes: a row per length for the wkv's three paths, then one per length
    for the dechunk EMA's two (the kernel's columns a number where it builds)."""
    bench = load("bench_wkv")
    bench.main(["--lengths", "16", "40", "--batch", "2", "--heads", "2", "--head-size", "16",
                "--chunk-size", "8", "--repeats", "1"])
    lines = capsys.readouterr().out.splitlines()
    ema_at = next(i for i, line in enumerate(lines) if line.startswith("dechunk EMA"))
    wkv_rows = [line.split() for line in lines[:ema_at] if line.split() and line.split()[0] in ("16", "40")]
    ema_rows = [line.split() for line in lines[ema_at:] if line.split() and line.split()[0] in ("4", "10")]
    assert [row[0] for row in wkv_rows] == ["16", "40"] and [row[0] for row in ema_rows] == ["4", "10"]
    # the kernel's columns: a time where it builds, else nan; each ratio printed is the ratio of
    # the times printed beside it, up to their rounding (a time to 3 or 4 or 5 places, a ratio to 1)
    def ratio_fits(ratio: str, numerator: str, denominator: str) -> bool:
        n_half, d_half = (0.5 * 10.0 ** -len(x.split(".")[1]) for x in (numerator, denominator))
        n, d, r = float(numerator), float(denominator), float(ratio.rstrip("x"))
        low = (n - n_half) / (d + d_half) - 0.05
        high = (n + n_half) / (d - d_half) + 0.05 if d > d_half else math.inf
        return low <= r <= high
    for T, naive, chunked, kernel, naive_ratio, kernel_ratio in wkv_rows:
        assert ratio_fits(naive_ratio, naive, chunked), (T, naive, chunked, naive_ratio)
        assert math.isnan(float(kernel)) != wkv_cpu.available(), kernel
        if wkv_cpu.available():
            assert ratio_fits(kernel_ratio, chunked, kernel), (T, chunked, kernel, kernel_ratio)
    for L, closed, kernel, ratio in ema_rows:
        assert math.isnan(float(kernel)) != wkv_cpu.available(), kernel
        if wkv_cpu.available():
            assert ratio_fits(ratio, closed, kernel), (L, closed, kernel, ratio)


def test_baselines_benchmark_compares_equal_matrices(tmp_path, capsys):
    """bench_baselines on a tiny prepared benchmark: both vectorizers run and agree bit for bit."""
    from aegir.config import parse_params
    from aegir.data.prepare import prepare_dataset
    from conftest import TINY_PARAMS_OVERRIDE

    sections = {k: v for k, v in TINY_PARAMS_OVERRIDE.items() if k in ("synthetic", "prepare", "baselines")}
    prepare_dataset(parse_params(sections), tmp_path / "data", tmp_path / "stats.json")
    (tmp_path / "params.yaml").write_text(json.dumps(sections))
    result = load("bench_baselines").main(["--data", str(tmp_path / "data"), "--params", str(tmp_path / "params.yaml"),
                                           "--task", "cpa"])
    fit_seconds = {name: seconds[0] for name, seconds in result["seconds"].items()}
    assert result["equal"] and result["ratio"] == fit_seconds["scikit-learn"] / fit_seconds["word-wise"]
    out = capsys.readouterr().out
    assert f"word-wise / scikit-learn: {result['ratio']:.2f}× faster fit_transform; vocabulary and matrices " \
           "bit-identical" in out


def test_baselines_benchmark_names_missing_data(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load("bench_baselines").main(["--data", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2
    assert "nowhere/train.parquet" in capsys.readouterr().err


def test_memory_benchmark_measures_both_modes_in_fresh_processes(tmp_path, capsys):
    """bench_memory at tiny sizes: one process per mode (the malloc setting is per process), each
    reporting page faults, CPU and wall time per step, then the medians per mode."""
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    bench = load("bench_memory")
    bench.main(["--preset", "tiny", "--steps", "1", "--rounds", "1", "--batch-size", "2",
                "--data", str(tmp_path / "no-data")])
    machine, *lines = capsys.readouterr().out.splitlines()
    assert machine.startswith("machine: ") and "cores" in machine  # bench_phase1.machine_line
    assert [line.split(":")[0].strip() for line in lines] == ["default", "retained", "median of default",
                                                              "median of retained"]
    assert all("faults" in line and "wall" in line for line in lines)


def test_annotate_benchmark_times_every_checkpoint_kind_and_one_process_per_table(tmp_path, capsys):
    """bench_annotate on tiny params: untrained checkpoints built for the three kinds (none under
    --models), a folder of synthetic tables annotated by each, and one table in its own process."""
    import yaml

    from conftest import ROOT, TINY_PARAMS_OVERRIDE, deep_update

    params = deep_update(yaml.safe_load((ROOT / "params.yaml").read_text()), TINY_PARAMS_OVERRIDE)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    figures = load("bench_annotate").main(["--params", str(tmp_path / "params.yaml"), "--tables", "6",
                                           "--batch-size", "4", "--per-process", "1", "--long-rows", "3000",
                                           "--models", str(tmp_path / "no-models"), "--json", str(tmp_path / "b.json")])
    assert set(figures["kinds"]) == {"phase1", "phase3", "phase4"}
    for kind, row in figures["kinds"].items():
        assert row["tables"] == 6 and row["tables_per_s"] > 0 and row["origin"].startswith("untrained"), kind
        assert row["max_columns"] <= params["synthetic"]["max_columns"]
    assert len(figures["kinds"]["phase1"]["per_process_s"]) == 1 and "mean_subagents" in figures["kinds"]["phase4"]
    assert json.loads((tmp_path / "b.json").read_text()) == figures
    (long,) = figures["long_csv"]
    assert long["rows"] == 3000 and 0.05 < long["mb"] < 0.2 and long["peak_mb"] > 0
    out = capsys.readouterr().out
    assert "phase4 (untrained, built from params.yaml): 6 tables" in out and "one process per table:" in out


def test_pipeline_benchmark_scales_each_stage_by_its_pace():
    """bench_pipeline.summarise: a stage's pace is the mean of the probes around it; its seconds
    scale by (fastest or slowest probe) / pace; the milestones add up the stages up to the last
    agent of Phase 1, up to phase3, and all of them."""
    bench = load("bench_pipeline")
    rows = [{"stage": "prepare", "probe_before": 1.0, "seconds": 60.0},
            {"stage": "primary", "probe_before": 1.0, "seconds": 120.0},
            {"stage": "phase1@places", "probe_before": 2.0, "seconds": 120.0},
            {"stage": "phase3", "probe_before": 2.0, "seconds": 240.0},
            {"stage": "report", "probe_before": 1.0, "seconds": 60.0}]
    summary = bench.summarise(rows, final_probe=1.0)
    assert [row["pace"] for row in rows] == [1.0, 1.5, 2.0, 1.5, 1.0]
    assert rows[2]["at_fastest"] == 60.0 and rows[2]["at_slowest"] == 120.0
    assert rows[1]["at_fastest"] == 80.0 and rows[1]["at_slowest"] == 160.0
    totals = summary["totals"]
    assert totals["phase1"] == {"seconds": 5.0, "at_fastest": 3.33, "at_slowest": 6.67, "budget": 15.0}  # 200, 400 s
    assert totals["phase3"]["seconds"] == 9.0 and totals["phase3"]["at_slowest"] == 12.0  # 120 + 160 + 120 + 320 s
    assert totals["all"]["seconds"] == 10.0 and totals["all"]["budget"] == 30.0
    assert summary["probe_seconds"] == {"fastest": 1.0, "slowest": 2.0}
    assert bench.milestone("phase1@media") == "phase1" and bench.milestone("phase4") is None


def test_phase1_benchmark_imports_the_model_of_either_layout():
    """bench_phase1's "before" code from git: the default revision (the model in model/aegir.py)
    and HEAD (model/network.py) both give a module with the model and its presets."""
    bench = load("bench_phase1")
    for rev in (bench.BASELINE_REV, "HEAD"):
        module = bench.import_baseline(rev)
        assert callable(module.AegirModel) and callable(module.preset), rev
        for name in [n for n in sys.modules if n.startswith("aegir_baseline")]:
            del sys.modules[name]  # the next revision imports afresh


def test_every_cpu_benchmark_names_its_machine_with_the_shared_line():
    """Each CPU benchmark prints bench_phase1.machine_line (CPU name, vector ISA, cores, torch and
    its threads, load): figures from different CPU kinds must say which they came from. bench_device
    (a GPU's) names its device instead; bench_phase1 defines the line."""
    from conftest import BENCHMARKS

    for path in sorted(BENCHMARKS.glob("bench_*.py")):
        if path.stem in {"bench_phase1", "bench_device"}:
            continue
        text = path.read_text(encoding="utf-8")
        assert "print(machine_line())" in text, f"{path.name} prints no machine line"
        assert 'print(f"machine:' not in text, f"{path.name} prints its own machine line"
