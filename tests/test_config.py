"""params.yaml → typed config: unknown keys, wrong types and absurd values name the key."""

from __future__ import annotations

import pytest
import yaml

from aegir.config import SOURCE_SPLITS, load_params, parse_params
from aegir.errors import ConfigError
from conftest import ROOT


def test_project_params_parse():
    params = load_params(ROOT / "params.yaml")
    assert params.prepare.source == "synthetic"
    assert all(params.synthetic.tables_in(split) > 0 for split in SOURCE_SPLITS)
    assert isinstance(params.synthetic.locales, tuple)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"prepare": {"byte_budgett": 10}}, "prepare.byte_budgett"),
        ({"prepar": {}}, "prepar"),
        ({"prepare": {"byte_budget": "big"}}, "prepare.byte_budget"),
        ({"prepare": {"byte_budget": 3}}, "prepare.byte_budget"),
        ({"prepare": {"source": "kaggle"}}, "prepare.source"),
        ({"prepare": {"source": "sotab"}}, "prepare.sotab_dir"),
        ({"synthetic": {"missing_rate": 1.5}}, "synthetic.missing_rate"),
        ({"synthetic": {"train_tables": 0}}, "synthetic.train_tables"),
        ({"synthetic": {"min_rows": 9, "max_rows": 2}}, "synthetic.max_rows"),
        ({"synthetic": {"locales": "en_US"}}, "synthetic.locales"),
        ({"baselines": {"C": -1.0}}, "baselines.C"),
        ({"baselines": {"ngram_max": True}}, "baselines.ngram_max"),
        ({"synthetic": {"wide_train_tables": 0}}, "synthetic.wide_train_tables"),
        ({"phase4": {"wide_train_tables": -1}}, "phase4.wide_train_tables"),
        ({"phase4": {"step_cost": 5.0}}, "phase4.step_cost"),
        ({"phase1": {"label_smoothing": 1.0}}, "phase1.label_smoothing"),
        ({"phase3": {"label_smoothing": -0.1}}, "phase3.label_smoothing"),
        ({"primary": {"train_tables": -1}}, "primary.train_tables"),
        ({"specialists": {"x": {"domains": ["Nowhere"]}}}, "specialists.x.domains"),
        ({"specialists": {"x": {"extra_tables": -1}}}, "specialists.x.extra_tables"),
        ({"presets": {"cpu": {}}, "specialists": {"x": {"init": "media"}}}, "specialists.x.init"),
        ({"presets": {"cpu": {}, "small": {}}, "specialists": {"x": {"init": "primary", "preset": "small"}}},
         "specialists.x.init"),
        ({"presets": {"cpu": {}}, "primary": {"init": "primary"}}, "primary.init"),
        ({"specialists": {"primary": {}}}, "specialists.primary"),
        ({"synthetic": {"specialist_train_tables": -5}}, "synthetic.specialist_train_tables"),
        ({"synthetic": {"policy_train_tables": -1}}, "synthetic.policy_train_tables"),
        ({"phase4": {"route_weight": -0.5}}, "phase4.route_weight"),
        ({"phase3": {"distill_weight": 1000}}, "phase3.distill_weight"),
        ({"phase3": {"stream_gate_init": 1e6}}, "phase3.stream_gate_init"),
        ({"phase3": {"stream_seam": "yes"}}, "phase3.stream_seam"),
        ({"phase3": {"rl_weight": -1.0}}, "phase3.rl_weight"),
        ({"phase3": {"rl_weight": 0.0, "ce_weight": 0.0, "distill_weight": 0.0}}, "phase3.rl_weight"),
        ({"phase3": {"average_decay": 1.0}}, "phase3.average_decay"),
        ({"phase3": {"phase1_share": 1.0}}, "phase3.phase1_share"),
        ({"phase3": {"phase1_share": -0.1}}, "phase3.phase1_share"),
        ({"phase3": {"average_decay": -0.5}}, "phase3.average_decay"),
    ],
)
def test_bad_params_name_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        parse_params(raw)
    assert str(info.value).startswith(key), str(info.value)


def test_params_file_errors_name_the_file(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"baselines": {"C": "x"}}))
    with pytest.raises(ConfigError, match=r"params\.yaml: baselines\.C"):
        load_params(path)
    path.write_text("prepare: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(path)
    with pytest.raises(ConfigError, match="no such params file"):
        load_params(tmp_path / "missing.yaml")
