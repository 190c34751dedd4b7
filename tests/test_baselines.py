"""The single-column baseline: its two fits in two processes give the figures of one process."""

from __future__ import annotations

import pytest

from aegir.config import parse_params
from aegir.errors import AegirError
from aegir.stages.baselines import run
from aegir.stages.prepare import run as prepare_run
from conftest import TINY_PARAMS_OVERRIDE


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("baselines")
    params = parse_params({k: v for k, v in TINY_PARAMS_OVERRIDE.items()
                           if k in ("synthetic", "prepare", "baselines")})
    prepare_run(params, root / "data", root / "stats.json")
    return params.baselines, root / "data"


def test_two_processes_give_the_figures_of_one(setup):
    cfg, data = setup
    one = run(cfg, data, processes=1)
    two = run(cfg, data, processes=2)
    assert one == two
    assert set(one) == {"cta", "cpa"} and 0 < one["cta"]["test"]["micro_f1"] <= 100


def test_a_missing_data_directory_is_an_aegir_error_from_the_worker(setup, tmp_path):
    cfg, _ = setup
    with pytest.raises(AegirError, match="nowhere"):
        run(cfg, tmp_path / "nowhere", processes=2)
