"""The sharded training step against the whole-batch step; the loss as sums over shards.

Tolerances: relative errors (‖sharded − whole‖ / ‖whole‖) of 1e-5 on the loss and 1e-4 on each
parameter's gradient in float32 (shards change only the order of float sums).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aegir.config import SyntheticConfig
from aegir.data.batch import Batch
from aegir.data.dataset import collate, examples_from_tables
from aegir.data.synth import generate_table
from aegir.eval.predict import predict
from aegir.model.network import AegirModel, preset
from aegir.train.step import (
    OneThreadWorkers,
    ShardedStep,
    shard_rows,
    trimmed,
    whole_batch_step,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def synthetic_batch(n: int, budget: int = 256) -> Batch:
    """n embedded-benchmark training tables with their labels, as `prepare` serializes them."""
    tables = [generate_table(SyntheticConfig(), "train", i) for i in range(n)]
    return collate(examples_from_tables(tables, budget, 8, 0, Path("synthetic")))


def tiny_trained_model(seed: int = 0) -> AegirModel:
    torch.manual_seed(seed)
    model = AegirModel(preset("tiny"))
    for p in model.parameters():  # zero-initialised projections would hide whole paths
        if (p == 0).all():
            torch.nn.init.normal_(p, std=0.1)
    return model


def rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x - y).norm() / y.norm().clamp(min=1e-30)).item()


def grads_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("workers,shard_bytes", [(2, 4096), (3, 4096), (2, 300)])
def test_sharded_step_equals_whole_batch_step(workers, shard_bytes):
    """One shard per worker, and (300 bytes) three shards per worker taken in turn."""
    model, batch = tiny_trained_model(), synthetic_batch(7)
    whole = whole_batch_step(model, batch)
    whole_grads = grads_of(model)
    with OneThreadWorkers(workers) as threads:
        sharded = ShardedStep(model, threads, shard_bytes=shard_bytes)(batch)
    sharded_grads = grads_of(model)
    assert rel_err(sharded.loss, whole.loss) < 1e-5
    for name in whole.parts:
        assert rel_err(sharded.parts[name], whole.parts[name]) < 1e-5, name
    for name in ("F", "G", "ratio"):
        assert rel_err(getattr(sharded.chunk_stats, name), getattr(whole.chunk_stats, name)) < 1e-5, name
    for name, g in whole_grads.items():
        assert g.abs().sum() > 0, name
        assert rel_err(sharded_grads[name], g) < 1e-4, name


def test_sharded_step_is_deterministic_and_accumulates_like_backward():
    model, batch = tiny_trained_model(), synthetic_batch(6)
    with OneThreadWorkers(2) as threads:
        step = ShardedStep(model, threads, shard_bytes=400)
        step(batch)
        first = grads_of(model)
        step(batch)
        second = {n: p.grad.clone() for n, p in model.named_parameters()}
        step(batch)  # onto the existing gradients, as loss.backward() adds
    for name, g in first.items():
        assert torch.equal(second[name], g), name
        assert torch.allclose(dict(model.named_parameters())[name].grad, 2 * g, rtol=1e-5, atol=1e-9), name


@pytest.mark.parametrize("workers,shard_bytes", [(1, 4096), (2, 4096), (2, 300), (3, 400)])
def test_ngram_rows_give_the_bits_of_whole_table_gradients(workers, shard_bytes):
    """The n-gram table read by the rows each shard uses (`compact_ngrams`, the default) gives
    every gradient, the table's included, bit for bit as whole-table gradients per shard do;
    after three steps of AdamW the weights are the same bits too."""
    runs = {}
    for compact in (True, False):
        model, batch = tiny_trained_model(), synthetic_batch(7)
        table = model.ngram_embed.table.weight
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        with OneThreadWorkers(workers) as threads:
            step = ShardedStep(model, threads, shard_bytes=shard_bytes, compact_ngrams=compact)
            assert len(step.tables) == int(compact)
            step(batch)
            runs[compact] = {"grads": {n: p.grad.clone() for n, p in model.named_parameters()}}
            assert (table.grad != 0).any(dim=1).sum() > 10  # rows read, and not every row
            assert (table.grad == 0).all(dim=1).sum() > 10
            for _ in range(3):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step(batch)
        runs[compact]["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    for kind in ("grads", "weights"):
        for name, x in runs[False][kind].items():
            assert torch.equal(runs[True][kind][name], x), (kind, name)


def test_ngram_rows_of_a_frozen_table_are_left_alone():
    model = tiny_trained_model()
    model.ngram_embed.table.weight.requires_grad_(False)
    with OneThreadWorkers(2) as threads:
        step = ShardedStep(model, threads, shard_bytes=400)
        step(synthetic_batch(4))
    assert step.tables == [] and model.ngram_embed.table.weight.grad is None
    assert model.embed.weight.grad is not None


def test_shards_cover_every_row_once_with_balanced_bytes():
    batch = synthetic_batch(9)
    lengths = batch.byte_mask.sum(1)
    shards = shard_rows(batch, 2)
    assert sorted(torch.cat(shards).tolist()) == list(range(9))
    loads = [int(lengths[rows].sum()) for rows in shards]
    assert max(loads) - min(loads) <= int(lengths.max())
    assert len(shard_rows(batch, 20)) == 9  # never an empty shard


def test_trimmed_drops_only_padding():
    batch = synthetic_batch(5, budget=2048)  # whole tables: lengths differ
    short = batch.select(torch.tensor([int(batch.byte_mask.sum(1).argmin())]))
    cut = trimmed(short)
    assert cut.byte_ids.shape[1] == int(short.byte_mask.sum()) < short.byte_ids.shape[1]
    assert cut.byte_mask.all() and cut.column_mask.all()
    assert torch.equal(cut.cta_labels, short.cta_labels[:, :cut.cta_labels.shape[1]])


def test_sharded_step_refuses_dropout():
    torch.manual_seed(0)
    model = AegirModel(preset("tiny", dropout=0.1))
    with OneThreadWorkers(2) as threads, pytest.raises(RuntimeError, match="dropout"):
        ShardedStep(model, threads)(synthetic_batch(4))


def test_loss_is_the_sum_formula_and_shard_sums_add_up():
    model, batch = tiny_trained_model(), synthetic_batch(6)
    output = model(batch)
    loss, parts = model.loss(batch, output)
    sums = model.loss_sums(batch, output)
    # the documented loss: mean CE per task + weight · the ratio loss of the whole batch
    assert torch.equal(parts["ratio"], output.ratio_loss.detach())
    assert loss.item() == (parts["cta"] + parts["cpa"] + model.config.ratio_loss_weight * parts["ratio"]).item()
    halves = [batch.select(torch.arange(0, 3)), batch.select(torch.arange(3, 6))]
    added = model.loss_sums(halves[0], model(halves[0])) + model.loss_sums(halves[1], model(halves[1]))
    for a, b in zip(added.tensors(), sums.tensors()):
        assert rel_err(a.detach().double(), b.detach().double()) < 1e-6
    assert added.cta_count == sums.cta_count > 0 and added.real_bytes == batch.byte_mask.sum()


def test_workers_keep_the_callers_thread_count_and_predict_in_order():
    model = tiny_trained_model()
    tables = [generate_table(SyntheticConfig(), "valid", i) for i in range(7)]
    examples = examples_from_tables(tables, 256, 8, 0, Path("synthetic"))
    alone = predict(model, examples, batch_size=3)

    def after_a_parallel_op(_) -> int:  # a thread's first parallel op takes the process default
        torch.randn(256, 256).sum()
        return torch.get_num_threads()

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the tests run with one thread (conftest); the creator here has two
    try:
        with OneThreadWorkers(3) as threads:
            assert torch.get_num_threads() == 2
            assert threads.map(after_a_parallel_op, range(3)) == [1, 1, 1]
            shared = predict(model, examples, batch_size=3, workers=threads)
            assert threads.map(after_a_parallel_op, range(3)) == [1, 1, 1]
    finally:
        torch.set_num_threads(before)
    assert [p.table_id for p in shared] == [e.table_id for e in examples]
    for a, b in zip(shared, alone):
        assert (a.cta_ids == b.cta_ids).all() and (a.cpa_ids == b.cpa_ids).all()
        assert abs(a.cta_probs - b.cta_probs).max() < 1e-5
    assert model.training


def test_each_item_runs_in_the_worker_of_its_index():
    import threading

    with OneThreadWorkers(3) as threads:
        names = threads.map(lambda _: threading.current_thread().name, range(8))
        again = threads.map(lambda _: threading.current_thread().name, range(8))
    assert names == again
    assert [name.split("_")[0] for name in names] == [f"aegir-worker-{i % 3}" for i in range(8)]
    assert len(set(names)) == 3


_MALLINFO = """
import ctypes, sys, threading, resource, torch
from aegir.train.memory import retain_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "retain":
    assert retain_freed_memory() and retain_freed_memory()
mapped = libc.mallinfo2().hblkhd
buffer = torch.empty(5 << 20)  # 20 MiB
mapped = libc.mallinfo2().hblkhd - mapped  # how much of it glibc mapped on its own
del buffer
torch.set_num_threads(1)
def step():  # a shard's step, roughly: activations, then the n-gram table's gradient
    buffers = [torch.ones(400_000) for _ in range(20)] + [torch.zeros(49152 * 96)]
    return sum(float(b[-1]) for b in buffers)
# the process's faults from when both threads are warm until both are done, counted once (each
# thread's own window of process-wide faults would count the other's faults twice)
start = {}
warm = threading.Barrier(2, action=lambda: start.setdefault("faults", resource.getrusage(resource.RUSAGE_SELF).ru_minflt))
def work():
    for _ in range(3):
        step()
    warm.wait()
    for _ in range(10):
        step()
threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print(mapped, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start["faults"])
"""


def test_retained_freed_memory_is_not_mapped_afresh():
    """aegir.train.memory: glibc maps a 20 MiB buffer on its own (and unmaps it when freed) by
    default, not after `retain_freed_memory`; and then two threads stepping through a shard's
    allocations, ~51 MB a step, ten times, fault in fewer pages than one step holds (with the
    defaults they often refault most of every step, though not in every process)."""
    import platform
    import subprocess
    import sys

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    runs = {mode: [int(n) for n in subprocess.run([sys.executable, "-c", _MALLINFO, mode], capture_output=True,
                                                  text=True, check=True).stdout.split()]
            for mode in ("default", "retain")}
    assert runs["default"][0] >= 20 << 20, runs
    assert runs["retain"][0] == 0, runs
    step_pages = (20 * 400_000 + 49152 * 96) * 4 // 4096
    assert runs["retain"][1] < step_pages, runs
