"""The saved training state: round trip, the curves snapshot, and states that must be ignored
(another run's silently, a torn one with a warning naming the file)."""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch

from aegir.train.resume import (
    STATE_JSON,
    STATE_TENSORS,
    TrainingProgress,
    load_state,
    restore_snapshot,
    save_state,
)


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


def test_a_state_saved_by_other_code_is_ignored(tmp_path, monkeypatch):
    """A changed training loop must train, not resume the old loop's run: the state records the
    code's digest and resumes only under the same one."""
    import aegir.train.resume as resume

    model, optimizer = model_and_optimizer(0)
    save_state(tmp_path / "state", model, optimizer, TrainingProgress(2, 0, 2), "run-a")
    assert json.loads((tmp_path / "state" / STATE_JSON).read_text())["code"] == resume.code_digest()
    monkeypatch.setattr(resume, "_CODE_DIGEST", ["the digest of other code"])
    assert load_state(tmp_path / "state", model, optimizer, "run-a") is None
    monkeypatch.undo()
    assert load_state(tmp_path / "state", model, optimizer, "run-a") == TrainingProgress(2, 0, 2)
    meta = json.loads((tmp_path / "state" / STATE_JSON).read_text())
    meta.pop("code")  # a state saved before the digest existed
    (tmp_path / "state" / STATE_JSON).write_text(json.dumps(meta))
    assert load_state(tmp_path / "state", model, optimizer, "run-a") is None


def test_the_code_digest_moves_with_code_not_with_docs_or_layout(tmp_path):
    from pathlib import Path

    import aegir.train.resume as resume
    from aegir.train.resume import source_digest

    def digest_of(text: str) -> str:
        (tmp_path / "m.py").write_text(text)
        return source_digest([tmp_path / "m.py"], tmp_path)

    base = digest_of('"""A module."""\n\ndef f(x):\n    """Twice x."""\n    return 2 * x\n')
    # other docstrings, a comment, blank lines, other spacing: the same code
    assert digest_of('"""Another text."""\n# a comment\n\n\ndef f(x):\n    """Else."""\n    return 2*x\n') == base
    assert digest_of("def f(x):\n    return 2 * x\n") == base  # no docstrings at all
    assert digest_of('def f(x):\n    """Only a docstring."""\n    return 2 * x\n') == base
    assert digest_of("def f(x):\n    return 3 * x\n") != base  # what it does changed
    assert digest_of("def f(y):\n    return 2 * y\n") != base
    # a file's name counts (a module moved is other code); the package's digest is its files'
    (tmp_path / "n.py").write_text("def f(x):\n    return 2 * x\n")
    assert source_digest([tmp_path / "n.py"], tmp_path) != base
    package = Path(resume.__file__).resolve().parents[1]
    assert resume.code_digest() == source_digest(list(package.rglob("*.py")), package)


def without_key(key: str):
    def edit(data: bytes) -> bytes:
        meta = json.loads(data)
        meta.pop(key)
        return json.dumps(meta).encode()
    return edit


# file damaged → how (None: deleted) → what the warning says of it
TORN = {
    "json truncated": (STATE_JSON, lambda data: data[: len(data) // 2], "is unreadable"),
    "json empty": (STATE_JSON, lambda data: b"", "is unreadable"),
    "json not an object": (STATE_JSON, lambda data: b"[2, 0, 2]", "is not a JSON object"),
    "json without its step": (STATE_JSON, without_key("step"), "lacks a count of step"),
    "json without its optimizer groups": (STATE_JSON, without_key("param_groups"), "optimizer parameter groups"),
    "json missing": (STATE_JSON, None, "is missing"),
    "tensors truncated": (STATE_TENSORS, lambda data: data[: len(data) - 7], "is unreadable"),
    "tensors cut to the header": (STATE_TENSORS, lambda data: data[:20], "is unreadable"),
    "tensors missing": (STATE_TENSORS, None, "is missing"),
}


@pytest.mark.parametrize("case", sorted(TORN))
def test_a_torn_state_is_ignored_with_a_warning_naming_the_file(tmp_path, case):
    """A state the atomic writes never leave, damaged from outside: load_state warns, naming the
    file and the problem, returns None (the run starts from step 0) and leaves the model and
    optimizer as they were; the run's next save replaces the torn state and resumes."""
    name, damage, problem = TORN[case]
    saved, saved_optimizer = model_and_optimizer(0)
    save_state(tmp_path / "state", saved, saved_optimizer, TrainingProgress(2, 0, 2), "run-a")
    path = tmp_path / "state" / name
    if damage is None:
        path.unlink()
    else:
        path.write_bytes(damage(path.read_bytes()))

    model, optimizer = model_and_optimizer(1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer_before = json.dumps(optimizer.state_dict()["param_groups"]), {
        k: v.clone() for k, v in optimizer.state_dict()["state"][0].items()}
    with pytest.warns(RuntimeWarning, match=re.escape(str(path)) + ".*" + problem + ".*starts from step 0"):
        assert load_state(tmp_path / "state", model, optimizer, "run-a") is None
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert json.dumps(optimizer.state_dict()["param_groups"]) == optimizer_before[0]
    assert all(torch.equal(v, optimizer_before[1][k]) for k, v in optimizer.state_dict()["state"][0].items())

    save_state(tmp_path / "state", model, optimizer, TrainingProgress(1, 0, 1), "run-a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_state(tmp_path / "state", *model_and_optimizer(2), "run-a") == TrainingProgress(1, 0, 1)


def test_tensors_that_do_not_fit_the_model_are_a_torn_state(tmp_path):
    """Weights of other names or shapes under the run's own fingerprint: a warning naming the
    tensors file, and the model untouched (loading them would fail halfway through)."""
    torch.manual_seed(0)
    wider = torch.nn.Linear(4, 2)
    wider_optimizer = torch.optim.AdamW(wider.parameters(), lr=0.1)
    wider(torch.randn(4, 4)).sum().backward()
    wider_optimizer.step()
    save_state(tmp_path / "state", wider, wider_optimizer, TrainingProgress(2, 0, 2), "run-a")
    model, optimizer = model_and_optimizer(1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    path = re.escape(str(tmp_path / "state" / STATE_TENSORS))
    with pytest.warns(RuntimeWarning, match=path + ": its model weights are not the model's"):
        assert load_state(tmp_path / "state", model, optimizer, "run-a") is None
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_no_state_and_another_runs_state_are_ignored_silently(tmp_path):
    model, optimizer = model_and_optimizer(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_state(tmp_path / "nothing", model, optimizer, "run-a") is None
        save_state(tmp_path / "state", model, optimizer, TrainingProgress(2, 0, 2), "run-a")
        (tmp_path / "state" / STATE_TENSORS).write_bytes(b"")  # not even read: the state is another run's
        assert load_state(tmp_path / "state", model, optimizer, "run-b") is None


def test_phase3_weight_average_is_the_decayed_mean_and_resumes_with_the_state(tmp_path):
    """`phase3.average_decay`: the moving average of a run's weights lives in the optimizer's
    state, so a run saved after 3 updates and resumed for 2 more ends with the average of the
    run that did all 5 at once."""
    from aegir.rl.parl_training import AVERAGE, pending_average, update_average, use_average

    def run(model, optimizer, steps, first):
        history = []
        for step in range(steps):
            torch.manual_seed(100 + first + step)
            before = pending_average(optimizer)
            model(torch.randn(4, 3)).pow(2).sum().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            update_average(optimizer, 0.9, before)
            history.append(model.weight.detach().clone())
        return history

    torch.manual_seed(0)
    whole = torch.nn.Linear(3, 2)
    start = whole.weight.detach().clone()
    whole_opt = torch.optim.AdamW(whole.parameters(), lr=0.1)
    history = run(whole, whole_opt, 5, 0)
    expected = start
    for value in history:
        expected = 0.9 * expected + 0.1 * value
    torch.testing.assert_close(whole_opt.state[whole.weight][AVERAGE], expected)
    assert not torch.equal(expected, history[-1])  # the average is not the last weights

    torch.manual_seed(0)
    part = torch.nn.Linear(3, 2)
    part_opt = torch.optim.AdamW(part.parameters(), lr=0.1)
    run(part, part_opt, 3, 0)
    save_state(tmp_path / "state", part, part_opt, TrainingProgress(3, 0, 3), "run")
    torch.manual_seed(5)
    resumed = torch.nn.Linear(3, 2)
    resumed_opt = torch.optim.AdamW(resumed.parameters(), lr=0.1)
    assert load_state(tmp_path / "state", resumed, resumed_opt, "run") == TrainingProgress(3, 0, 3)
    run(resumed, resumed_opt, 2, 3)
    for p, q in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(whole_opt.state[p][AVERAGE], resumed_opt.state[q][AVERAGE])
    use_average(resumed_opt)
    assert torch.equal(resumed.weight, whole_opt.state[whole.weight][AVERAGE])


def test_phase3_weight_average_of_a_parameter_the_first_updates_miss():
    """A parameter without a gradient at the first updates (a specialist's gate no table chose)
    gets no optimizer state there; its average starts with the first update that reaches it, and
    the optimizer's own trajectory is that of a run without averages."""
    from aegir.rl.parl_training import AVERAGE, pending_average, update_average, use_average

    def train(average: bool):
        torch.manual_seed(0)
        a, b = torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)
        optimizer = torch.optim.AdamW([*a.parameters(), *b.parameters()], lr=0.1, fused=True)
        start_b = b.weight.detach().clone()
        for step in range(4):
            torch.manual_seed(10 + step)
            before = pending_average(optimizer)
            out = a(torch.randn(4, 3))
            (b(out).sum() if step >= 2 else out.pow(2).sum()).backward()  # b untouched at updates 0 and 1
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if average:
                update_average(optimizer, 0.5, before)
                if step < 2:
                    assert AVERAGE not in optimizer.state[b.weight] and not optimizer.state[b.weight]
                    assert torch.equal(b.weight, start_b)
        return a, b, optimizer, start_b

    a, b, optimizer, start_b = train(True)
    plain_a, plain_b, _, _ = train(False)
    for p, q in zip([*a.parameters(), *b.parameters()], [*plain_a.parameters(), *plain_b.parameters()]):
        assert torch.equal(p, q)  # the averages leave AdamW's own updates alone
    # b's average: its value before update 2 (its start), then updates 2 and 3
    assert not torch.equal(optimizer.state[b.weight][AVERAGE], b.weight)
    use_average(optimizer)
    assert torch.equal(b.weight, optimizer.state[b.weight][AVERAGE])


def test_blend_toward_the_start_is_the_weighted_mean_of_the_two():
    from aegir.rl.parl_training import blend_toward

    trained, _ = model_and_optimizer(0)
    start, _ = model_and_optimizer(1)
    before = {k: v.clone() for k, v in trained.state_dict().items()}
    blend_toward(trained, start, 0.25)
    for name, p in trained.named_parameters():
        assert torch.equal(p, 0.75 * before[name] + 0.25 * dict(start.named_parameters())[name])
    blend_toward(trained, start, 0.0)  # share 0: unchanged
    assert torch.equal(trained.weight, 0.75 * before["weight"] + 0.25 * start.weight)
    with pytest.raises(ValueError, match="share"):
        blend_toward(trained, start, 1.5)
    with pytest.raises(ValueError, match="counterpart"):
        blend_toward(trained, torch.nn.Linear(3, 4), 0.5)


def test_phase3_weight_average_needs_its_start_and_an_update():
    from aegir.rl.parl_training import update_average, use_average

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="no parameter has a moving average"):
        use_average(optimizer)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    with pytest.raises(ValueError, match="needs its value from before it"):
        update_average(optimizer, 0.9, {})
