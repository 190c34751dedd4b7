"""The saved training state: round trip, the curves snapshot, and states that must be ignored."""

from __future__ import annotations

import json

import torch

from aegir.train.resume import STATE_JSON, TrainingProgress, load_state, restore_snapshot, save_state


def model_and_optimizer(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_state_round_trip_with_curves_snapshot(tmp_path):
    curves = tmp_path / "live"
    (curves / "plots").mkdir(parents=True)
    (curves / "plots" / "loss.tsv").write_text("step\tloss\n2\t1.5\n")
    model, optimizer = model_and_optimizer(0)
    save_state(tmp_path / "state", model, optimizer, TrainingProgress(2, 0, 2), "run-a", snapshot=curves)
    (curves / "plots" / "loss.tsv").write_text("step\tloss\n2\t1.5\n4\t1.2\n")  # logged after the save

    other, other_optimizer = model_and_optimizer(1)
    assert load_state(tmp_path / "state", other, other_optimizer, "run-a") == TrainingProgress(2, 0, 2)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))
    assert restore_snapshot(tmp_path / "state", curves)
    assert (curves / "plots" / "loss.tsv").read_text() == "step\tloss\n2\t1.5\n"  # as at the save


def test_a_state_of_another_run_or_version_is_ignored(tmp_path):
    model, optimizer = model_and_optimizer(0)
    save_state(tmp_path / "state", model, optimizer, TrainingProgress(2, 0, 2), "run-a")
    assert load_state(tmp_path / "state", model, optimizer, "run-b") is None
    meta = json.loads((tmp_path / "state" / STATE_JSON).read_text())
    meta.pop("version")  # a state written before the snapshot existed
    (tmp_path / "state" / STATE_JSON).write_text(json.dumps(meta))
    assert load_state(tmp_path / "state", model, optimizer, "run-a") is None
    assert not restore_snapshot(tmp_path / "state", tmp_path / "live")  # no snapshot saved
