"""The study scripts under scripts/: what they compute, on hand-made inputs."""

from __future__ import annotations

import importlib.util
import subprocess

import pytest

from aegir.errors import AegirError
from conftest import ROOT


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scores(never: float, learned: float, always: float, share: float = 0.5) -> dict:
    """A Phase 4 scores.json with the same micro-F1 on every split and task of each policy."""
    study = load_script("phase4_study")

    def policy(f1: float) -> dict:
        out = {task: {split: {"micro_f1": f1} for split in study.SPLITS} for task in ("cta", "cpa")}
        out["mix"] = {"f1_per_critical_step": {"cta": f1 / 8, "cpa": f1 / 8}}
        out["spawn"] = {split: {"spawn_share": share} for split in study.SPLITS}
        return out

    return {"never": policy(never), "learned": policy(learned), "always": policy(always)}


def test_phase4_study_tables_give_means_and_ranges_per_price():
    study = load_script("phase4_study")
    runs = {(0, "0.03"): scores(90.0, 91.0, 89.0), (1, "0.03"): scores(90.0, 90.5, 89.5, share=0.3),
            (2, "0.03"): scores(90.0, 89.5, 90.0), (0, "0.06"): scores(90.0, 90.2, 89.0)}
    text = study.tables(runs)
    assert "### step_cost 0.03: seeds [0, 1, 2]" in text and "### step_cost 0.06: seeds [0]" in text
    assert text.index("step_cost 0.03") < text.index("step_cost 0.06")
    row = next(line for line in text.splitlines() if line.startswith("| CTA wide |"))
    # learned 91.0 / 90.5 / 89.5 against never 90: +1.0, +0.5, −0.5; against always 89.0 / 89.5 / 90.0
    # and always against never (Phase 3): −1.0, −0.5, 0.0
    assert row == ("| CTA wide | 90.00 | 90.33 (89.50–91.00) | 89.50 | +0.33 [-0.50, +1.00] | +0.83 [-0.50, +2.00] "
                   "| -0.50 [-1.00, +0.00] |")
    assert any(line.startswith("| CPA valid |") for line in text.splitlines())
    pooled = next(line for line in text.splitlines() if line.startswith("| CPA F1 per critical step"))
    assert "| 11.250 | 11.292 (11.188–11.375) |" in pooled
    assert "real 0.43" in text  # spawn share: mean of 0.5, 0.3, 0.5


def test_phase4_study_reads_only_experiments_named_by_seed_and_cost():
    study = load_script("phase4_study")
    assert study.NAME.match("p4-s2-c0.015").groups() == ("2", "0.015")
    for name in ("p4-s2", "exp-1234", "p4-sx-c0.03"):
        assert study.NAME.match(name) is None
    listing = "c7515f6:\n\t0ed3960 [p4-s2-c0.03]\n\t1d3fec7 [p3-seed2]\n1312c52:\n\t580015b [p4-s2-c0.03]\n"
    assert study.parse_experiments(listing, lambda baseline: True) == [("p4-s2-c0.03", "0ed3960"),
                                                                         ("p4-s2-c0.03", "580015b")]
    assert study.parse_experiments(listing, lambda baseline: baseline == "1312c52") == [("p4-s2-c0.03", "580015b")]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if head:  # a git checkout: a commit counts as run since itself; a listing without a baseline never does
        assert study.is_ancestor("HEAD", head) and not study.is_ancestor(head, None)
        with pytest.raises(SystemExit) as exit_info:  # an unknown --since is refused before dvc is asked
            study.main(["--since", "no-such-commit-xyz"])
        assert exit_info.value.code == 2


def test_lofo_names_each_real_tables_family_and_pairs_seeds():
    lofo = load_script("lofo")
    layouts = lofo.layout_families()
    assert lofo.family_of("Event_holidays-iso-AR-2026_real.json.gz", layouts) == "holidays"
    assert lofo.family_of("Place_us-states-admitted-US-2_real.json.gz", layouts) == "us_states"  # longest layout
    assert lofo.family_of("Movie_movies-de-1994_real.json.gz", layouts) == "movies"
    with pytest.raises(AegirError, match="names no layout"):
        lofo.family_of("Place_nowhere-1_real.json.gz", layouts)
    # --by domain: a table's group is the table class its id starts with
    assert lofo.group_of("Movie_films-fr-1996_real.json.gz", "domain", layouts) == "Movie"
    assert lofo.group_of("Movie_films-fr-1996_real.json.gz", "family", layouts) == "films"

    def run(a: float, b: float) -> dict:
        return {"airports": {"cta": {"f1": a, "n": 10}, "cpa": {"f1": b, "n": 0}},
                lofo.HELD_OUT: {"cta": {"f1": a, "n": 10}, "cpa": {"f1": b, "n": 0}}}

    table = lofo.summary([run(80, 50), run(82, 50)], [run(81, 50), run(86, 50)])
    cta = table[lofo.HELD_OUT]["cta"]
    assert (cta["before"], cta["after"], cta["change"], cta["min"], cta["max"]) == (81, 83.5, 2.5, 1, 4)
    text = lofo.markdown(table, {"airports"})
    assert "| airports (motivated) | 10 | 81.00 | 83.50 | +2.50 [+1.00, +4.00] | 0 | | | |" in text
    assert text.startswith("| family | CTA n |") and lofo.markdown(table, set(), by="domain").startswith("| domain |")


def test_ladder_rule_passes_through_both_tuned_schedules_and_grows_monotonically():
    from aegir.train.ladder import schedule

    assert schedule(96).overrides() == {"phase1.lr": 0.003, "phase1.warmup_steps": 30, "primary.epochs": 1}
    assert schedule(256).overrides() == {"phase1.lr": 0.0015, "phase1.warmup_steps": 100, "primary.epochs": 2}
    widths = [32, 64, 96, 128, 256, 512]
    rules = [schedule(d) for d in widths]
    assert all(a.lr > b.lr and a.warmup_steps <= b.warmup_steps and a.epochs <= b.epochs
               for a, b in zip(rules, rules[1:]))
    for bad in (0, -4, 96.5, "96"):
        with pytest.raises(ValueError, match="d_model"):
            schedule(bad)


def test_ladder_params_put_every_agent_on_the_preset_and_the_rule(tmp_path):
    import yaml

    ladder = load_script("ladder")
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    params = ladder.preset_params(base, "mid")
    assert params["primary"] == {**base["primary"], "preset": "mid", "epochs": 2}
    assert {agent["preset"] for agent in params["specialists"].values()} == {"mid"}
    assert (params["phase1"]["lr"], params["phase1"]["warmup_steps"], params["phase1"]["checkpoint_every"]) == (0.00245, 43, 0)
    assert base["primary"]["preset"] == "cpu"  # the base is left alone
    # the `cpu` rung is params.yaml's own Phase 1 (less the resume states): the pipeline's primary
    cpu = ladder.preset_params(base, "cpu")
    assert {k: v for k, v in cpu["phase1"].items() if k != "checkpoint_every"} == \
        {k: v for k, v in base["phase1"].items() if k != "checkpoint_every"}
    proc = subprocess.run(["python", str(ROOT / "scripts" / "ladder.py"), "--presets", "tiny", "huge",
                           "--root", str(tmp_path), "--data", str(ROOT / "data" / "prepared")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and ("huge not in" in proc.stderr or "no prepared data" in proc.stderr)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.parquet").write_bytes(b"")  # past the data check, to the params'
    for text, says in (("x: 1\n", "not a params.yaml (no `presets` section)"), ("a: [\n", "cannot read the params")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        proc = subprocess.run(["python", str(ROOT / "scripts" / "ladder.py"), "--params", str(bad), "--root",
                               str(tmp_path / "runs"), "--data", str(tmp_path / "data")],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode != 0 and f"{bad}: {says}" in proc.stderr
        assert not (tmp_path / "runs").exists()  # nothing written


def test_ladder_names_every_place_a_larger_preset_scores_below_the_one_under_it():
    ladder = load_script("ladder")

    def rung(name: str, f1: float, real: float) -> dict:
        micro = {task: dict.fromkeys(ladder.SPLITS, f1) for task in ("cta", "cpa")}
        micro["cta"]["real"] = real
        return {"preset": name, "micro_f1": micro,
                "mean": {task: round(sum(micro[task].values()) / len(ladder.SPLITS), 2) for task in ("cta", "cpa")}}

    rows = [rung("tiny", 80.0, 70.0), rung("small", 90.0, 75.0), rung("cpu", 91.0, 74.0)]
    assert ladder.inversions(rows) == ["cpu < small: CTA real 74.00 < 75.00"]
    assert ladder.inversions(rows[:2]) == []


def test_phase4_variants_change_one_decision_of_the_stages_policies_at_a_time():
    learned = [(4, 1, True, False), (0, 2, False, True)]

    class Swarm:  # aegir.swarm.evaluate.decisions asks the swarm only for the learned policy's choices
        def decide(self, views, n):
            assert n == 16
            return learned

    class Data:
        views = [object()] * 2

    out = load_script("phase4_variants").variants(Swarm(), Data(), 16)
    assert out["never"] == [(0, 0, False, False)] * 2
    assert out["always"] == [(16, 0, False, True)] * 2  # as aegir.swarm.evaluate's control
    assert out["learned"] == learned
    assert out["consult_only"] == [(0, 0, False, True)] * 2
    assert out["wide_only"] == [(16, 0, False, False)] * 2
    assert out["learned+consult"] == [(4, 1, True, True), (0, 2, False, True)]
    assert out["learned-no-wide"] == [(0, 1, True, False), (0, 2, False, True)]


def test_phase4_variants_always_is_the_stages_control():
    from aegir.swarm.evaluate import decisions

    class Data:
        views = [object()] * 3

    class Swarm:
        def decide(self, views, n):
            return [(0, 0, False, False)] * len(views)

    out = load_script("phase4_variants").variants(Swarm(), Data(), 8)
    assert out["always"] == decisions(None, Data(), "always", 8)
    assert out["never"] == decisions(None, Data(), "never", 8)


def test_calibration_lofo_never_maps_a_family_by_its_own_targets():
    """Every calibrator the script compares: a family's out-of-family confidences do not move when
    its own targets' outcomes change (what makes the script's ECE an out-of-sample figure),
    while another family's do."""
    import numpy as np

    from aegir.eval.calibration import Scored

    script = load_script("calibration_lofo")
    rng = np.random.default_rng(0)
    n, labels = 300, 4
    probs = rng.dirichlet(np.ones(labels), n)
    chosen = probs.argmax(axis=1)
    gold = np.where(rng.uniform(size=n) < 0.6, chosen, (chosen + 1) % labels)
    groups = np.repeat(np.array(["a", "b", "c"]), n // 3)
    before = script.held_out(Scored(probs, chosen, gold), groups)
    flipped = gold.copy()
    flipped[groups == "a"] = chosen[groups == "a"]  # family a: every target now right
    after = script.held_out(Scored(probs, chosen, flipped), groups)
    assert set(before) == {"T lofo", "platt lofo", "beta lofo", "hist lofo"}
    for name in before:
        assert np.array_equal(before[name][groups == "a"], after[name][groups == "a"]), name
        assert not np.array_equal(before[name][groups == "b"], after[name][groups == "b"]), name
    with pytest.raises(ValueError, match="only one group"):
        script.held_out(Scored(probs, chosen, gold), np.full(n, "a"))


def test_phase4_headroom_oracle_takes_always_only_where_it_gets_more_right():
    import numpy as np

    from aegir.eval.predict import TablePrediction

    script = load_script("phase4_variants")

    from aegir.data.batch import IGNORE_INDEX

    class Example:
        def __init__(self, cta, cpa):
            self.cta_labels = np.array([IGNORE_INDEX if x == -1 else x for x in cta])
            self.cpa_labels = np.array([IGNORE_INDEX if x == -1 else x for x in cpa])
            self.num_columns = len(cta)

    def prediction(cta, cpa):
        column = lambda ids: np.array(ids)[:, None]  # noqa: E731
        return TablePrediction("t", column(cta), np.ones((len(cta), 1)), column(cpa), np.ones((len(cpa), 1)), None)

    examples = [Example([1, 2, -1], [-1, 5, 6]), Example([3, 4], [-1, 7])]
    never = [prediction([1, 0, 9], [5, 5, 0]), prediction([3, 4], [0, 7])]
    always = [prediction([1, 2, 0], [0, 0, 6]), prediction([3, 0], [0, 7])]
    right_never, right_always = script.table_correct(examples, never), script.table_correct(examples, always)
    # column 0's CPA never counts (table 0's never guessed 5 at row 0: no hit); -1 stands for unlabelled
    assert right_never.tolist() == [[1, 1], [2, 1]]
    assert right_always.tolist() == [[2, 1], [1, 1]]
    chosen = script.oracle(never, always, right_never, right_always)
    assert chosen[0] is always[0] and chosen[1] is never[1]
    tie = script.oracle(never, always, right_never, right_never)  # ties keep never
    assert tie[0] is never[0] and tie[1] is never[1]


def test_phase4_headroom_split_out_finds_a_signal_the_inputs_hold_and_none_where_they_do_not():
    import numpy as np

    script = load_script("phase4_variants")
    rng = np.random.default_rng(0)
    features, gains, consulted = {}, {}, {}
    for split in ("a", "b", "c"):
        x = rng.normal(size=(200, 5))
        features[split] = x
        gains[split] = np.where(x[:, 0] > 0, 1, -1) * rng.integers(1, 3, 200)  # always gains where x0 > 0
        consulted[split] = np.zeros(200, dtype=bool)
    out = script.split_out(features, gains, consulted)
    for held, r in out.items():
        assert r["auc"] > 0.95, held
        gained = r["gained"]
        assert gained["oracle"] >= gained["classifier"] > 0.8 * gained["oracle"] > gained["always"]
        assert r["gained"]["learned_consult"] == 0
    noise = {s: rng.normal(size=(200, 5)) for s in features}  # inputs that know nothing of the gain
    out = script.split_out(noise, gains, consulted)
    assert all(abs(r["auc"] - 0.5) < 0.15 for r in out.values())
    with pytest.raises(ValueError, match="two splits"):
        script.split_out({"a": features["a"]}, {"a": gains["a"]}, consulted)


def test_phase4_headroom_opinion_features_read_the_disagreement():
    import torch

    script = load_script("phase4_variants")

    class View:
        def __init__(self, consult):
            self.cta_logp = torch.tensor([[0.9, 0.1], [0.2, 0.8]]).log()
            self.cpa_logp = torch.tensor([[0.5, 0.5], [0.7, 0.3]]).log()  # row 0: the subject, never read
            self.consult = consult

    agree = (torch.tensor([[0.8, 0.2], [0.1, 0.9]]).log(), torch.tensor([[0.0, 1.0], [0.6, 0.4]]).log())
    differ = (torch.tensor([[0.3, 0.7], [0.1, 0.9]]).log(), torch.tensor([[1.0, 0.0], [0.2, 0.8]]).log())
    f = script.opinion_features(View((agree, differ)))
    assert len(f) == 10
    # CTA: the mean opinion [[.55, .45], [.1, .9]] agrees on both columns; CPA (row 1 only): [.4, .6] vs 0.7 on label 0
    assert f[0] == 0.0 and abs(f[1] - 0.725) < 1e-6 and abs(f[2] - 0.85) < 1e-6
    assert f[5] == 1.0 and abs(f[6] - 0.6) < 1e-6 and abs(f[8] - 0.3) < 1e-6 and abs(f[9] - 0.4) < 1e-6
    assert script.opinion_features(View(())) == [0.0] * 10


def test_routing_probe_names_a_domain_only_for_an_entitys_name_type():
    import torch

    from aegir.labels import Vocabulary

    probe = load_script("routing_probe")
    vocab = Vocabulary("cta", ("Number", "Movie/name", "Hotel/description"))
    logits = torch.tensor([[0.0, 5.0, 1.0], [5.0, 0.0, 1.0], [0.0, 1.0, 5.0]])
    assert probe.subject_domains(logits, vocab) == ["Movie", None, "Hotel"]
    own = [(), ("Hotel",), ("Movie", "Book")]
    assert probe.owners(["Movie", None, "Hotel"], own).tolist() == [
        [False, False, True], [False, False, False], [False, True, False]]


def test_routing_probe_adds_the_owners_and_scores_the_learned_routing_as_the_orchestrator_reads():
    from dataclasses import replace

    import numpy as np
    import torch

    from aegir.data.dataset import collate
    from aegir.labels import Vocabulary
    from test_swarm import MORE_TABLES
    from test_vote import examples_of, voting_orchestrator

    probe = load_script("routing_probe")
    orch = voting_orchestrator()
    rng = np.random.default_rng(0)
    examples = [replace(e, domain="A" if i % 2 == 0 else "B",  # gold labels on every column, domains A and B in turn
                        cta_labels=rng.integers(0, 82, e.num_columns).astype(np.int64),
                        cpa_labels=np.concatenate([[-100], rng.integers(0, 108, e.num_columns - 1)]).astype(np.int64))
                for i, e in enumerate(examples_of(MORE_TABLES))]
    own = [("A",), (), ()]
    vocab = Vocabulary("cta", tuple(f"L{i}" for i in range(82)))
    result = probe.probe(orch, examples, own, orch.specialists[1].model, vocab, batch_size=len(examples))
    # learned: exactly the orchestrator's own read of the batch
    batch = collate(examples)
    with torch.no_grad():
        out = orch.annotate(batch)
    right = int((out.output.cta_logits.argmax(-1) == batch.cta_labels).sum())
    assert result["learned"]["cta"]["all"] == [right, sum(e.num_columns for e in examples)]
    assert result["learned"]["activation"]["A"] == pytest.approx(
        out.activation_mask[0::2].float().mean(0).tolist())
    # the owner of domain A is on for every table of A, and nothing changes for B
    assert result["learned"]["activation"]["A"][0] < 1.0 == result["learned+owner"]["activation"]["A"][0]
    assert result["learned+owner"]["activation"]["B"] == result["learned"]["activation"]["B"]
    assert result["learned+owner"]["cta"]["B"] == result["learned"]["cta"]["B"]
    # no label names an entity here: the subject rule adds nothing
    assert result["learned+subject"] == result["learned"]
