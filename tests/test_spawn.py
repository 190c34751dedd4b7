"""Phase 4's parts by hand: the `wide` split, sub-tasks, batched vs one-at-a-time sub-agents, the
per-column merge, deep search, critical steps, the spawning policy and its update."""

from __future__ import annotations

import pytest
import torch

from aegir.config import SWARM_TRAIN_SPLIT, PrepareConfig, RewardConfig, SyntheticConfig
from aegir.data.synth import WIDE_SPLIT, generate_split, generate_wide
from aegir.data.table import Table
from aegir.errors import ConfigError
from aegir.labels import cta_vocab
from aegir.rl.rewards import combine
from aegir.rl.swarm_update import (
    StepCounter,
    SwarmSettings,
    collect,
    specialist_targets,
    update_loss,
)
from aegir.swarm.policy import SpawnPolicy, allowed_options, spawn_options
from aegir.swarm.spawn import (
    SubagentCache,
    SwarmMerge,
    column_groups,
    deep_columns,
    deep_subtasks,
    family_of_labels,
    read_subtasks,
    read_subtasks_one_at_a_time,
    sub_table,
    subtask_examples,
    swarm_steps,
    wide_subtasks,
)
from aegir.swarm.views import TableView, decision_keys, policy_inputs, swarm_logp
from test_swarm import tiny

WIDE = SyntheticConfig(wide_tables=6, wide_min_columns=12, wide_max_columns=20, min_rows=3, max_rows=6)
PREPARE = PrepareConfig(byte_budget=256, max_rows=6)


# ----------------------------------------------------------------------------- the wide split


def test_wide_split_is_deterministic_in_range_and_labelled_from_the_vocabulary():
    a, b = generate_wide(WIDE), generate_wide(WIDE)
    assert a == b
    assert [t.num_columns for t in a] != [a[0].num_columns] * len(a)  # widths vary
    assert all(12 <= t.num_columns <= 20 for t in a)
    labels = set(cta_vocab().labels)
    assert all(label in labels for t in a for label in t.cta if label)
    assert all(t.table_id.startswith(f"synth_{WIDE_SPLIT}_") for t in a)
    # other widths, other tables; the source splits do not depend on the wide params
    assert generate_wide(SyntheticConfig(wide_tables=6, wide_min_columns=21, wide_max_columns=25)) != a
    assert generate_split(WIDE, "test") == generate_split(SyntheticConfig(min_rows=3, max_rows=6), "test")


def test_wide_train_split_holds_other_tables_of_the_same_kind():
    """Phase 4's `wide_train`: drawn as `wide` is, deterministic, none of `wide`'s tables."""
    cfg = SyntheticConfig(wide_tables=6, wide_train_tables=5, wide_min_columns=12, wide_max_columns=20,
                          min_rows=3, max_rows=6)
    train, again, wide = generate_wide(cfg, SWARM_TRAIN_SPLIT), generate_wide(cfg, SWARM_TRAIN_SPLIT), generate_wide(cfg)
    assert train == again and len(train) == 5 and len(wide) == 6
    assert all(12 <= t.num_columns <= 20 for t in train)
    assert all(t.table_id.startswith(f"synth_{SWARM_TRAIN_SPLIT}_") for t in train)
    cells = {tuple(map(tuple, t.columns)) for t in wide}
    assert not any(tuple(map(tuple, t.columns)) in cells for t in train)  # other tables, not renamed copies
    with pytest.raises(ConfigError, match="no wide split 'test'"):
        generate_wide(cfg, "test")


def test_wide_split_is_never_trained_on():
    """`wide` is evaluation-only: not a source split, in EVAL_SPLITS, and prepare's train split
    holds none of its tables."""
    from aegir.config import (
        EVAL_ONLY_SPLITS,
        EVAL_SPLITS,
        PREPARED_SPLITS,
        SOURCE_SPLITS,
        SPLITS,
        TRAIN_SPLIT,
        parse_params,
    )
    from aegir.data.prepare import prepare_splits

    assert WIDE_SPLIT in EVAL_ONLY_SPLITS and WIDE_SPLIT in EVAL_SPLITS and WIDE_SPLIT not in SOURCE_SPLITS
    params = parse_params({"synthetic": {"train_tables": 4, "valid_tables": 1, "test_tables": 1, "corner_cases_tables": 1,
                                         "missing_values_tables": 1, "format_heterogeneity_tables": 1,
                                         "wide_tables": 3, "wide_min_columns": 12, "wide_max_columns": 14}})
    tables, _ = prepare_splits(params, on_skip=lambda *_: None)
    assert len(tables[WIDE_SPLIT]) == 3
    assert not any(t.table_id.startswith("synth_wide") for t in tables[TRAIN_SPLIT])
    # Phase 4's many-column training tables: prepared, never scored, not a split of Phases 1–3
    assert list(tables) == list(PREPARED_SPLITS) and len(tables[SWARM_TRAIN_SPLIT]) == 64
    assert SWARM_TRAIN_SPLIT not in SPLITS and SWARM_TRAIN_SPLIT not in EVAL_SPLITS


def test_policy_train_split_holds_ordinary_tables_nobody_else_reads():
    """Phase 4's `policy_train`: ordinary tables (the `train` kind), deterministic, none of
    them a table of `train` or `specialist_train`; empty unless asked for."""
    from aegir.config import (
        POLICY_TRAIN_SPLIT,
        SPECIALIST_TRAIN_SPLIT,
        SPLITS,
        TRAIN_SPLIT,
        parse_params,
    )
    from aegir.data.prepare import prepare_splits

    assert POLICY_TRAIN_SPLIT not in SPLITS
    small = {"train_tables": 6, "valid_tables": 1, "test_tables": 1, "corner_cases_tables": 1,
             "missing_values_tables": 1, "format_heterogeneity_tables": 1, "wide_tables": 1, "wide_train_tables": 1,
             "wide_min_columns": 4, "wide_max_columns": 5, "specialist_train_tables": 6}
    tables, arrow = prepare_splits(parse_params({"synthetic": small}), on_skip=lambda *_: None)
    assert tables[POLICY_TRAIN_SPLIT] == [] and arrow[POLICY_TRAIN_SPLIT].num_rows == 0
    params = parse_params({"synthetic": {**small, "policy_train_tables": 5}})
    tables, arrow = prepare_splits(params, on_skip=lambda *_: None)
    again, _ = prepare_splits(params, on_skip=lambda *_: None)
    policy = tables[POLICY_TRAIN_SPLIT]
    assert len(policy) == 5 and policy == again[POLICY_TRAIN_SPLIT] and arrow[POLICY_TRAIN_SPLIT].num_rows == 5
    assert all(t.table_id.startswith(f"synth_{POLICY_TRAIN_SPLIT}_") for t in policy)
    assert all(3 <= t.num_columns <= 9 for t in policy)  # the ordinary kind, not the wide one
    seen = {tuple(map(tuple, t.columns)) for split in (TRAIN_SPLIT, SPECIALIST_TRAIN_SPLIT) for t in tables[split]}
    assert not any(tuple(map(tuple, t.columns)) in seen for t in policy)  # other tables, not renamed copies


# ----------------------------------------------------------------------------- sub-tasks


def test_wide_search_covers_every_column_exactly_once():
    for columns in range(1, 30):
        for g in range(0, 20):
            groups = column_groups(columns, g)
            assert len(groups) == min(g, columns - 1)  # never more sub-agents than columns to read
            flat = [c for group in groups for c in group]
            assert sorted(flat) == list(range(1, columns)) if g else flat == []  # each non-subject column once
            if groups:
                sizes = [len(group) for group in groups]
                assert max(sizes) - min(sizes) <= 1  # balanced
            assert all(cols[0] == 0 for cols in wide_subtasks(columns, g))  # the subject in every sub-task


def test_sub_table_gets_the_full_budget():
    table = generate_wide(WIDE)[0]
    full = subtask_examples([table], [(0, tuple(range(table.num_columns)))], PREPARE, "t")[0]
    sub = subtask_examples([table], [(0, (0, 1, 2))], PREPARE, "t")[0]
    sub_table_ = sub_table(table, (0, 1, 2))
    assert sub_table_.columns == table.columns[:3] and sub_table_.cta == table.cta[:3]

    def column_bytes(example, c):
        start, end = example.column_spans[c]
        return end - start

    # a column of the sub-task has at least the bytes it had in the shared stream, here more
    assert all(column_bytes(sub, c) >= column_bytes(full, c) for c in range(3))
    assert sum(column_bytes(sub, c) for c in (1, 2)) > sum(column_bytes(full, c) for c in (1, 2))


def test_batched_subagents_equal_one_at_a_time():
    tables = generate_wide(WIDE)[:3]
    keys = [(t, cols) for t in range(3) for cols in wide_subtasks(tables[t].num_columns, 4)]
    examples = subtask_examples(tables, keys, PREPARE, "t")
    model = tiny(0)
    batched = read_subtasks(model, examples, batch_size=len(examples))  # one call
    alone = read_subtasks_one_at_a_time(model, examples)
    assert len(batched) == len(keys)
    for a, b in zip(batched, alone):
        torch.testing.assert_close(a.cta_logp, b.cta_logp, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a.cpa_logp, b.cpa_logp, rtol=1e-4, atol=1e-5)


def test_cache_reads_each_subtask_once_and_is_order_independent():
    tables = generate_wide(WIDE)[:2]
    models = {"a": tiny(0), "b": tiny(1)}
    keys = [(t, cols, name) for t in range(2) for cols in wide_subtasks(tables[t].num_columns, 2) for name in "ab"]
    one = SubagentCache(tables, models, PREPARE, "t")
    one.fill(keys)
    one.fill(keys[:3])
    assert one.reads == len(keys)
    other = SubagentCache(tables, models, PREPARE, "t")
    other.fill(reversed(keys))
    for key in keys:
        assert torch.equal(one.get(key).cta_logp, other.get(key).cta_logp)


# ----------------------------------------------------------------------------- merge and deep search


def view_of(table: Table, seed: int = 0) -> TableView:
    g = torch.Generator().manual_seed(seed)
    C = table.num_columns
    cta = torch.randn(C, 82, generator=g).log_softmax(-1)
    vocab = cta_vocab()
    return TableView(num_columns=C, cta_logp=cta, cpa_logp=torch.randn(C, 108, generator=g).log_softmax(-1),
                     hidden=torch.randn(32, generator=g), phase3_reads=(), deep_columns=(0,),
                     cta_gold=torch.tensor([vocab.index[x] if x else -100 for x in table.cta]),
                     cpa_gold=torch.full((C,), -100), stream_bytes=200)


def test_merge_of_no_subagents_keeps_the_primary_labels_and_subagents_change_them():
    table = generate_wide(WIDE)[0]
    cache = SubagentCache([table], {"a": tiny(0)}, PREPARE, "t")
    view = view_of(table)
    merge = SwarmMerge(1, family_of_labels(cta_vocab())[0], init_sub_weight=5.0)
    cta, cpa = swarm_logp(0, view, 0, 0, False, cache, merge, ["a"])
    assert torch.equal(cta.argmax(-1), view.cta_logp.argmax(-1))
    cache.fill(decision_keys(0, view, 3, "a", True))
    spawned, _ = swarm_logp(0, view, 3, 0, False, cache, merge, ["a"])
    assert not torch.equal(spawned.argmax(-1), cta.argmax(-1))
    deep, _ = swarm_logp(0, view, 3, 0, True, cache, merge, ["a"])
    assert torch.allclose(deep.exp().sum(-1), torch.ones(table.num_columns))
    assert not torch.allclose(deep, spawned)  # the fine stage changed the family column


def test_deep_search_pushes_off_family_labels_down():
    vocab = cta_vocab()
    family, names = family_of_labels(vocab)
    assert "Hotel" in names and int(family[vocab.index["Hotel/name"]]) == int(family[vocab.index["Hotel/description"]])
    assert int(family[vocab.index["telephone"]]) == -1
    merge = SwarmMerge(1, family, init_margin=3.0)
    logp = torch.full((2, len(vocab)), -10.0)
    logp[0, vocab.index["Hotel/name"]] = 0.0
    logp[1, vocab.index["Restaurant/name"]] = -0.1
    logp[1, vocab.index["Hotel/name"]] = -0.5
    logp = logp.log_softmax(-1)
    hotel = merge.coarse_family(logp)
    assert names[hotel] == "Hotel"  # column 0's Hotel/name outweighs column 1's Restaurant/name
    fine = merge.deep_merge(logp, torch.zeros_like(logp), torch.tensor([False, True]), 0, 0, hotel)
    assert int(fine[1].argmax()) == vocab.index["Hotel/name"]  # conditioned on the coarse decision
    assert deep_columns([vocab.index["Hotel/name"], vocab.index["telephone"]], family) == (0,)
    assert deep_subtasks((0, 3)) == [(0,), (0, 3)]


def test_deep_search_takes_more_critical_steps_than_wide_search():
    """Hand-made case: a 4-column table, cpu-like primary (1 encoder + 2 main + 1 decoder + 1
    context), sub-agents of 5 steps. Wide search's sub-agents run beside the primary's rest;
    deep search's round waits for the merge."""
    from aegir.model.network import preset

    primary = preset("cpu")
    serial, serial_total = swarm_steps(primary, (), 5, wide=0, deep=0)
    wide, wide_total = swarm_steps(primary, (), 5, wide=3, deep=0)
    deep, deep_total = swarm_steps(primary, (), 5, wide=3, deep=2)
    assert serial == 5 and wide == 6 and deep == 11
    assert deep > wide and wide_total == serial_total + 15 and deep_total == wide_total + 10
    # parallel sub-agents add no critical steps beyond the slowest one, however many
    assert swarm_steps(primary, (), 5, wide=16, deep=0)[0] == wide


def test_step_counter_charges_the_critical_steps_a_decision_adds():
    """Over never spawning: wide search adds a step only where no Phase 3 specialist's read
    already holds the primary back; deep search adds its round after the merge."""
    from aegir.model.network import preset

    primary = preset("cpu")
    counter = StepCounter(primary, (5, 7))
    table = generate_wide(WIDE)[0]
    alone, routed = view_of(table), view_of(table)
    routed.phase3_reads = ((3, 0),)  # a Phase 3 specialist of 3 read steps: the rest waits for it
    assert counter.extra(alone, 0, 0, False) == 0 and counter.extra(routed, 0, 1, False) == 0
    assert counter.extra(alone, 4, 0, False) == 1  # sub-agents of 5 steps beside a rest of 4
    assert counter.extra(routed, 4, 0, False) == 0  # beside prefix → specialist → rest: no later
    assert counter.extra(alone, 4, 1, False) == 3  # a slower specialist (7 steps)
    assert counter.extra(alone, 4, 0, True) == 6 and counter.extra(alone, 0, 0, True) == 5  # the deep round


def test_step_cost_lowers_the_reward_by_the_added_critical_steps():
    from aegir.model.network import preset

    tables = generate_wide(WIDE)[:4]
    names = ["a", "b"]
    cache = SubagentCache(tables, {"a": tiny(0), "b": tiny(1)}, PREPARE, "t")
    views = [view_of(t, i) for i, t in enumerate(tables)]
    counter = StepCounter(preset("cpu"), (5, 5))
    with pytest.raises(ValueError, match="needs a StepCounter"):
        SwarmSettings(rollouts=3, ce_weight=1.0, kl_coef=0.0, rewards=RewardConfig(), step_cost=0.1)
    torch.manual_seed(0)
    policy = SpawnPolicy(32, spawn_options(8), len(names))
    merge = SwarmMerge(len(names), family_of_labels(cta_vocab())[0])
    settings = SwarmSettings(rollouts=4, ce_weight=1.0, kl_coef=0.0, rewards=RewardConfig(), step_cost=0.1,
                             steps=counter)
    r = collect(policy, merge, views, [0, 1, 2, 3], cache, names, settings, 0.3, 0.1,
                torch.Generator().manual_seed(0), max_count=None, max_subagents=8)
    extra = r.rewards["extra_critical_steps"]
    assert extra.shape == (4, 4) and extra.max() > 0  # some rollout spawned (untrained policy: near uniform)
    expected = combine(r.rewards["r_perf"], r.rewards["r_parallel"], r.rewards["r_finish"], 0.3, 0.1) - 0.1 * extra
    assert torch.allclose(r.rewards["reward"], expected)
    for i, t in enumerate(r.tables):  # each rollout charged its own decision's steps
        k, b = divmod(i, 4)
        option = policy.options[int(r.count[i])]
        assert extra[k, b] == counter.extra(views[t], option, int(r.specialist[i]), bool(r.deep[i]))
        assert (extra[k, b] == 0) == (option == 0 and not bool(r.deep[i]))


# ----------------------------------------------------------------------------- policy


def test_spawn_options_and_the_cap():
    assert spawn_options(16) == (0, 1, 2, 4, 8, 16)
    assert spawn_options(6) == (0, 1, 2, 4, 6)
    options = spawn_options(16)
    allowed = allowed_options(options, torch.tensor([1, 4, 30, 30]), None)
    assert allowed[0].tolist() == [True, False, False, False, False, False]  # no column to give
    assert allowed[1].tolist() == [True, True, True, True, False, False]  # 4 would read 3 columns; 8 the same
    assert allowed[2].all()
    capped = allowed_options(options, torch.tensor([30]), 2)
    assert capped[0].tolist() == [True, True, True, False, False, False]


def test_spawning_respects_budget_and_cap_and_the_update_moves_the_policy():
    tables = generate_wide(WIDE)[:4]
    names = ["a", "b"]
    cache = SubagentCache(tables, {"a": tiny(0), "b": tiny(1)}, PREPARE, "t")
    views = [view_of(t, i) for i, t in enumerate(tables)]
    torch.manual_seed(0)
    options = spawn_options(8)
    policy = SpawnPolicy(32, options, len(names))
    merge = SwarmMerge(len(names), family_of_labels(cta_vocab())[0])
    settings = SwarmSettings(rollouts=3, ce_weight=1.0, kl_coef=0.0, rewards=RewardConfig())
    rollouts = collect(policy, merge, views, [0, 1, 2, 3], cache, names, settings, 0.3, 0.1,
                       torch.Generator().manual_seed(0), max_count=2, max_subagents=8)
    assert rollouts.spawned.max() <= 2  # the cap
    assert all(options[int(c)] <= 2 for c in rollouts.count)
    assert set(rollouts.rewards) == {"r_perf", "r_parallel", "r_finish", "reward"}
    before = [p.detach().clone() for p in policy.parameters()] + [p.detach().clone() for p in merge.parameters()]
    optimizer = torch.optim.AdamW([*policy.parameters(), *merge.parameters()], lr=0.05)
    loss, parts, stats = update_loss(policy, merge, views, rollouts, cache, names, settings, 0.2, 2)
    loss.backward()
    optimizer.step()
    after = [*policy.parameters(), *merge.parameters()]
    assert stats.tokens > 0 and torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
    # the sub-agents are frozen checkpoints: nothing of theirs has a gradient
    assert all(p.grad is None for m in cache.specialists.values() for p in m.parameters())


def test_specialist_targets_name_each_domains_owner_else_the_generalist():
    names = ["primary", "places", "media"]
    owners = {"primary": (), "places": ("Hotel", "Restaurant"), "media": ("Movie",)}
    got = specialist_targets(["Hotel", "Movie", "Product", None, "Restaurant"], names, owners)
    assert got.tolist() == [1, 2, 0, 0, 1]
    # without a generalist among the sub-agents, a table no specialist owns has no target
    assert specialist_targets(["Product", "Movie"], ["places", "media"], owners).tolist() == [-1, 1]


def test_route_weight_adds_the_specialist_heads_cross_entropy():
    """The update's loss with `route_weight` is the loss without it plus route_weight · CE of
    the specialist head toward each rollout's table target (rows without a target left out),
    and a step on it raises the targets' probability."""
    import torch.nn.functional as F

    tables = generate_wide(WIDE)[:4]
    names = ["a", "b"]
    cache = SubagentCache(tables, {"a": tiny(0), "b": tiny(1)}, PREPARE, "t")
    views = [view_of(t, i) for i, t in enumerate(tables)]
    torch.manual_seed(0)
    policy = SpawnPolicy(32, spawn_options(8), len(names))
    merge = SwarmMerge(len(names), family_of_labels(cta_vocab())[0])
    plain = SwarmSettings(rollouts=2, ce_weight=1.0, kl_coef=0.0, rewards=RewardConfig())
    routed = SwarmSettings(rollouts=2, ce_weight=1.0, kl_coef=0.0, rewards=RewardConfig(), route_weight=2.0)
    rollouts = collect(policy, merge, views, [0, 1, 2, 3], cache, names, plain, 0.3, 0.1,
                       torch.Generator().manual_seed(0), max_count=None, max_subagents=8)
    targets = torch.tensor([1, 1, -1, 0])
    base, _, _ = update_loss(policy, merge, views, rollouts, cache, names, plain, 0.2, None, targets)
    loss, parts, _ = update_loss(policy, merge, views, rollouts, cache, names, routed, 0.2, None, targets)
    rows = rollouts.tables
    hidden, width, allowed, _, _ = policy_inputs(views, rows, policy.options, None)
    _, logits, _, _ = policy.logits(hidden, width, allowed)
    want = targets[torch.tensor(rows)]
    hand = F.cross_entropy(logits[want >= 0], want[want >= 0])
    assert parts["route"] == pytest.approx(float(hand.detach()), rel=1e-6)
    assert float(loss.detach()) == pytest.approx(float(base.detach()) + 2.0 * float(hand.detach()), rel=1e-5)
    # with the weight off, or no targets, the term is absent
    _, parts_off, _ = update_loss(policy, merge, views, rollouts, cache, names, plain, 0.2, None, targets)
    assert "route" not in parts_off
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    for _ in range(20):
        loss, _, _ = update_loss(policy, merge, views, rollouts, cache, names, routed, 0.2, None, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    _, after, _, _ = policy.logits(hidden, width, allowed)
    assert float(F.cross_entropy(after[want >= 0], want[want >= 0]).detach()) < float(hand.detach())


# ----------------------------------------------------------------------------- second opinions, wide eligibility


def with_opinions(view: TableView, kinds: int, seed: int = 1) -> TableView:
    """`view` with `kinds` random second opinions of its table."""
    g = torch.Generator().manual_seed(seed)
    C = view.num_columns
    view.consult = tuple((torch.randn(C, 82, generator=g).log_softmax(-1), torch.randn(C, 108, generator=g).log_softmax(-1))
                         for _ in range(kinds))
    return view


def test_second_opinions_merge_as_weighted_experts_and_only_when_asked():
    table = generate_wide(WIDE)[0]
    cache = SubagentCache([table], {"a": tiny(0), "b": tiny(1)}, PREPARE, "t")
    view = with_opinions(view_of(table), 2)
    for mode, cta_total, cpa_total in (("product", 1.0, 1.0), ("geometric", 1.5 + 2 * 0.25, 0.5 + 2 * 2.0)):
        merge = SwarmMerge(2, family_of_labels(cta_vocab())[0], mode=mode)
        with torch.no_grad():
            merge.primary.copy_(torch.tensor([1.5, 0.5]))
            merge.consult.copy_(torch.tensor([0.25, 2.0]))
        cta, cpa = swarm_logp(0, view, 0, 0, False, cache, merge, ["a", "b"], consult=True)
        by_hand_cta = ((1.5 * view.cta_logp + 0.25 * view.consult[0][0] + 0.25 * view.consult[1][0])
                       / cta_total).log_softmax(-1)
        by_hand_cpa = ((0.5 * view.cpa_logp + 2.0 * view.consult[0][1] + 2.0 * view.consult[1][1])
                       / cpa_total).log_softmax(-1)
        assert torch.allclose(cta, by_hand_cta, atol=1e-6) and torch.allclose(cpa, by_hand_cpa, atol=1e-6)
    # not asked: the orchestrator's reading, untouched (the very tensors)
    alone = swarm_logp(0, view, 0, 0, False, cache, merge, ["a", "b"], consult=False)
    assert alone[0] is view.cta_logp and alone[1] is view.cpa_logp
    # asked on a table whose opinions were not read: nothing to merge, the reading stands
    bare = view_of(table)
    assert swarm_logp(0, bare, 0, 0, False, cache, merge, ["a", "b"], consult=True)[0] is bare.cta_logp
    # with wide search too, both terms join the same product
    cache.fill(decision_keys(0, view, 2, "b", False))
    both, _ = swarm_logp(0, view, 2, 1, False, cache, merge, ["a", "b"], consult=True)
    wide_only, _ = swarm_logp(0, view, 2, 1, False, cache, merge, ["a", "b"], consult=False)
    assert not torch.allclose(both, wide_only)
    # gradients reach the consult weights
    merge.zero_grad()
    swarm_logp(0, view, 0, 0, False, cache, merge, ["a", "b"], consult=True)[0][:, 0].sum().backward()
    assert merge.consult.grad is not None and float(merge.consult.grad[0]) != 0 and float(merge.consult.grad[1]) == 0


def test_the_geometric_merge_does_not_sharpen_with_the_number_of_experts():
    """Experts that all say the same: the product of them is sharper than each, their weighted
    geometric mean is each (so a column read by more experts is not more confident for it); a
    sub-agent only where it covers a column, and the fine stage's weight joins the total. Each
    column's best label is the product's."""
    g = torch.Generator().manual_seed(3)
    logp = torch.randn(4, 9, generator=g).log_softmax(-1)
    covered = torch.tensor([True, False, True, True])
    product = SwarmMerge(1, torch.full((9,), -1))
    geometric = SwarmMerge(1, torch.full((9,), -1), mode="geometric")
    assert product.mode == "product"  # how the merge trains; phase4 reads it as phase4.merge_reading says
    with torch.no_grad():
        for merge in (product, geometric):
            merge.primary.fill_(1.2)
            merge.consult.fill_(0.4)
            merge.wide.fill_(0.7)
            merge.deep.fill_(0.5)
    same = torch.stack([logp, logp, logp])
    sharp = product.wide_merge(logp, logp, covered, 0, 0, same)
    mean = geometric.wide_merge(logp, logp, covered, 0, 0, same)
    assert torch.allclose(mean, logp, atol=1e-6)
    other = torch.randn(4, 9, generator=g).log_softmax(-1)
    assert torch.equal(geometric.wide_merge(logp, other, covered, 0, 0, same).argmax(-1),
                       product.wide_merge(logp, other, covered, 0, 0, same).argmax(-1))
    assert (sharp.exp().max(-1).values > logp.exp().max(-1).values).all()
    # different experts: each column divided by its own total (column 1 has no sub-agent)
    total = 1.2 + 0.7 * covered.double()
    by_hand = ((1.2 * logp + 0.7 * other * covered[:, None]) / total[:, None]).log_softmax(-1)
    assert torch.allclose(geometric.wide_merge(logp, other, covered, 0, 0), by_hand.float(), atol=1e-6)
    fine = geometric.deep_merge(mean, other, covered, 0, 0, None)
    by_hand = ((mean + 0.5 * other * covered[:, None]) / (1 + 0.5 * covered.double())[:, None]).log_softmax(-1)
    assert torch.allclose(fine, by_hand.float(), atol=1e-6)
    with pytest.raises(ValueError, match="mode"):
        SwarmMerge(1, torch.full((9,), -1), mode="sum")


def test_the_policy_reads_how_unsure_the_orchestrator_is():
    table = generate_wide(WIDE)[0]
    sure, unsure = view_of(table), view_of(table)
    sure.cta_logp = torch.full((table.num_columns, 82), -30.0).index_fill(1, torch.tensor([5]), 0.0)
    unsure.cta_logp = torch.full((table.num_columns, 82), 82.0).reciprocal().log()  # uniform
    assert sure.doubt()[0] == pytest.approx(0.0, abs=1e-6)
    assert unsure.doubt()[0] == pytest.approx(1 - 1 / 82, abs=1e-6)
    assert float(unsure.doubt()[1]) == pytest.approx(float(1 - unsure.cpa_logp[1:].exp().max(-1).values.mean()))
    policy = SpawnPolicy(32, spawn_options(8), 1)
    _, width, _, _, _ = policy_inputs([sure, unsure], [0, 1], policy.options, None)
    assert width.shape == (2, 4) and torch.equal(width[:, 2:], torch.stack([sure.doubt(), unsure.doubt()]))
    assert torch.equal(width[0, :2], width[1, :2])  # the same table's width


def test_wide_search_runs_only_on_tables_wider_than_one_column_group():
    from aegir.swarm.spawn import wide_eligible

    assert not wide_eligible(9, 9) and wide_eligible(10, 9)
    assert wide_eligible(2, 0) and not wide_eligible(1, 0)  # no grouping: any table with a non-subject column
    table = generate_wide(WIDE)[0]  # 12–20 columns
    wide, narrow = view_of(table), view_of(table)
    wide.group_columns, narrow.group_columns = 9, 40
    assert wide.wide_groups(4) == wide_subtasks(table.num_columns, 4) and narrow.wide_groups(4) == []
    assert decision_keys(0, narrow, 4, "a", False) == []
    policy = SpawnPolicy(32, spawn_options(8), 1)
    _, _, allowed, _, has_consult = policy_inputs([wide, narrow], [0, 1], policy.options, None)
    assert bool(allowed[0].all()) and allowed[1].tolist() == [True] + [False] * (len(policy.options) - 1)
    assert has_consult.tolist() == [False, False]
    with_opinions(narrow, 1)
    assert policy_inputs([wide, narrow], [0, 1], policy.options, None)[4].tolist() == [False, True]
    # the narrow table asked for 4 wide sub-agents gets none: its reading stands
    cache = SubagentCache([table], {"a": tiny(0)}, PREPARE, "t")
    merge = SwarmMerge(1, family_of_labels(cta_vocab())[0], init_sub_weight=5.0)
    assert swarm_logp(0, narrow, 4, 0, False, cache, merge, ["a"])[0] is narrow.cta_logp


def test_second_opinions_run_beside_the_orchestrator_in_critical_steps():
    """cpu-like primary: 5 steps alone. A second opinion reads the table from the start, so one
    of ≤ 5 steps adds no critical step, a slower one (7) sets the path; all add their total."""
    from aegir.model.network import preset

    primary = preset("cpu")
    alone, alone_total = swarm_steps(primary, (), 5, wide=0, deep=0)
    consulted, consulted_total = swarm_steps(primary, (), 5, wide=0, deep=0, consult=(5, 4, 5))
    assert (alone, consulted) == (5, 5) and consulted_total == alone_total + 14
    assert swarm_steps(primary, (), 5, wide=0, deep=0, consult=(7,))[0] == 7
    assert swarm_steps(primary, (), 5, wide=0, deep=2, consult=(5,))[0] == 10  # the deep round still waits
    counter = StepCounter(primary, (5, 7))
    view = with_opinions(view_of(generate_wide(WIDE)[0]), 2)
    assert counter.extra(view, 0, 0, False, consult=True) == 2  # the 7-step opinion
    assert counter.extra(view_of(generate_wide(WIDE)[0]), 0, 0, False, consult=True) == 0  # none to read


def test_consult_is_a_token_only_where_opinions_exist_and_rescoring_matches():
    torch.manual_seed(0)
    policy = SpawnPolicy(32, spawn_options(4), 2)
    hidden, width = torch.randn(6, 32), torch.randn(6, 4)
    allowed = torch.ones(6, len(policy.options), dtype=torch.bool)
    has_deep = torch.zeros(6, dtype=torch.bool)
    has_consult = torch.tensor([True, True, True, False, False, True])
    with torch.no_grad():
        policy.consult_head.bias.fill_(3.0)  # σ(3) ≈ 0.95: most rows consult when they may
    d = policy.decide(hidden, width, allowed, has_deep, has_consult, sample=True, generator=torch.Generator().manual_seed(0))
    assert not bool(d.consult[~has_consult].any()) and bool(d.consult[has_consult].any())
    assert d.token_consult.tolist() == has_consult.tolist()
    again = policy.decide(hidden, width, allowed, has_deep, has_consult, count=d.count, specialist=d.specialist,
                          deep=d.deep, consult=d.consult)
    logp, tokens = d.tokens()
    assert torch.allclose(again.tokens()[0], logp) and tokens.shape == (6, 4)
    argmax = policy.decide(hidden, width, allowed, has_deep, has_consult)
    assert argmax.consult.tolist() == has_consult.tolist()  # p > ½ where it may
    assert not bool(policy.decide(hidden, width, allowed, has_deep).consult.any())  # no opinions: never
