"""One training step's forward and backward: on the whole batch, or on shards of it in parallel.

* `whole_batch_step`: one forward, the loss, one backward — the reference, and the path for
  several processes (DDP) and accelerators.
* `ShardedStep`: the fast path on one CPU process. The batch is cut into shards of about equal
  bytes, spread over worker threads with one intra-op thread each, so the cores work on
  independent shards instead of splitting each small op between them. (At d_model 96 the ops
  are small: on the shared 2-core machine the whole-batch step with two intra-op threads was
  slower than with one, every op waiting for both threads; docs/benchmarks.md, "Phase 1 training
  step: before and after".)

The loss of the whole batch is not a sum over shards (cross-entropy is a mean over the batch's
labels; the ratio loss is a function of batch-wide shares), but it is a function of sums over
shards (`aegir.model.network.LossSums`). So: every shard's forward gives its sums; the sums are
added; the loss's derivatives with respect to the added sums, c = ∂loss/∂sums, are taken once;
each shard then back-propagates c · sums_shard, whose gradient is that shard's exact share of
the whole batch's gradient (the chain rule through the sums). Shard gradients are added in a
fixed order (each worker's in shard order, then the workers' in worker order), so a run is
deterministic whatever order the threads finish in. The result equals the whole-batch step's
up to float rounding (tests/test_step.py).

The hashed n-gram tables (4.7 M of the `cpu` preset's 5.3 M parameters) are read by each shard
through the rows it uses (`aegir.model.ngram.compact_reads`): a shard's backward gives those rows'
gradient, each worker adds its shards' in shard order over the union of their rows, and the
step adds the workers' into one zeroed table gradient in worker order. The same sums in the same
order as adding whole-table gradients, without zeroing and adding the whole table once per shard
and once per worker (about 7 % of the step's CPU time before; 0–4.5 % of its wall time in
docs/benchmarks.md): the same bits (tests/test_step.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from aegir.data.batch import Batch
from aegir.model.chunking import ChunkStats
from aegir.model.network import AegirModel, LossSums
from aegir.model.ngram import CompactRead, HashedNgramEmbedding, compact_reads

Autocast = Callable[[], contextlib.AbstractContextManager]


@dataclass
class StepResult:
    """What the training loop logs of a step: the loss and its parts (detached) and the
    chunker's F, G and ratio over the batch."""

    loss: torch.Tensor
    parts: dict[str, torch.Tensor]
    chunk_stats: ChunkStats


def whole_batch_step(model: torch.nn.Module, batch: Batch,
                     backward: Callable[[torch.Tensor], None] = torch.Tensor.backward,
                     autocast: Autocast = contextlib.nullcontext, label_smoothing: float = 0.0) -> StepResult:
    """Forward the batch, take the loss (`AegirModel.loss`, with `label_smoothing`), back-propagate
    it with `backward` (e.g. accelerate's, which DDP needs). `model` may be wrapped (DDP); its
    `.module` or itself is the AegirModel."""
    aegir: AegirModel = getattr(model, "module", model)
    with autocast():
        output = model(batch)
        loss, parts = aegir.loss(batch, output, label_smoothing)
    backward(loss)
    return StepResult(loss.detach(), parts, output.chunk_stats)


def shard_rows(batch: Batch, shards: int) -> list[torch.Tensor]:
    """Batch rows in `shards` groups of about equal real bytes (longest table first, each to the
    lightest group so far; ties to the lower group): a deterministic function of the lengths.
    Empty groups are dropped. Each group is sorted."""
    lengths = batch.byte_mask.sum(dim=1).tolist()
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = [[] for _ in range(min(shards, len(lengths)))]
    load = [0] * len(groups)
    for i in order:
        g = min(range(len(groups)), key=lambda j: (load[j], j))
        groups[g].append(i)
        load[g] += lengths[i]
    return [torch.tensor(sorted(g), dtype=torch.long) for g in groups if g]


def trimmed(batch: Batch) -> Batch:
    """The batch without padding that no row uses: bytes past the longest row, columns past the
    widest table."""
    T = max(1, int(batch.byte_mask.sum(dim=1).max()))
    C = max(1, int(batch.column_mask.sum(dim=1).max()))
    return Batch(byte_ids=batch.byte_ids[:, :T], byte_mask=batch.byte_mask[:, :T],
                 column_spans=batch.column_spans[:, :C], column_mask=batch.column_mask[:, :C],
                 cta_labels=batch.cta_labels[:, :C], cpa_labels=batch.cpa_labels[:, :C])


def _one_intra_op_thread() -> None:
    """Give the calling thread one intra-op thread, for good.

    torch.set_num_threads sets the calling thread's OpenMP/MKL thread count and a process-wide
    default. A thread takes that default once, lazily, at its first parallel op or
    torch.get_num_threads() call, overwriting what it had set. So the worker first takes the
    default (get_num_threads), then sets its own count: the creator putting its default back
    later no longer reaches the worker. (Setting it without the first call left every worker
    on the creator's count, two threads each on a two-core machine.)"""
    torch.get_num_threads()
    torch.set_num_threads(1)


class OneThreadWorkers:
    """`count` threads that each run torch with one intra-op thread; the creating thread keeps
    its own setting. `map` runs a function over items in them and returns the results in order.

    Item i of a `map` always runs in worker i mod `count`, after the items before it there: the
    work each thread does, and so all of its thread-local state, is a function of the calls, not
    of which thread happened to be free. (A shared pool let whichever thread was idle take the
    next item. Autograd numbers the nodes it records with a per-thread counter and runs ready
    nodes of a backward pass in the order of those numbers; a shard's backward mixes nodes its
    forward recorded in one thread with nodes recorded in another, so their order, and the order
    in which gradients were summed, came to depend on thread timing: two runs of the default
    primary drifted apart in the low bits after a few hundred steps, sooner on a loaded machine.)

    Each worker sets its own count once, at start (`_one_intra_op_thread`), then the creator's
    default is put back.
    """

    def __init__(self, count: int):
        if count < 1:
            raise ValueError(f"OneThreadWorkers: count must be ≥ 1, got {count}")
        self.count = count
        threads = torch.get_num_threads()
        self._pools = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"aegir-worker-{w}",
                                          initializer=_one_intra_op_thread) for w in range(count)]
        for pool in self._pools:  # every worker exists, its initializer run, before the default goes back
            pool.submit(lambda: None).result()
        torch.set_num_threads(threads)

    def map(self, fn: Callable, items) -> list:
        futures = [self._pools[i % self.count].submit(fn, item) for i, item in enumerate(items)]
        return [future.result() for future in futures]

    def map_shares(self, fn: Callable[[Sequence], Any], items: Sequence) -> list:
        """fn of each worker's interleaved share of `items` (worker w: items[w::count]), one
        result per worker, in worker order; `interleave` puts per-item share lists back in order."""
        return self.map(lambda w: fn(items[w::self.count]), range(self.count))

    @staticmethod
    def interleave(shares: Sequence[Sequence]) -> list:
        """The inverse of cutting a list into interleaved shares (share w: items[w::len(shares)])."""
        out: list = [None] * sum(len(share) for share in shares)
        for w, share in enumerate(shares):
            out[w::len(shares)] = share
        return out

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=True)

    def __enter__(self) -> OneThreadWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def worker_threads(accelerator) -> int:
    """How many `OneThreadWorkers` a stage runs: one per intra-op thread torch was given, in a
    single CPU process; 1 (no workers) with several processes or on an accelerator. The count
    changes float rounding, so a training stage records it with its run."""
    if accelerator.num_processes == 1 and accelerator.device.type == "cpu":
        return torch.get_num_threads()
    return 1


class ShardedStep:
    """Forward and backward of a batch as shards, spread over worker threads (module docstring).

    The batch is cut into shards of at most about `shard_bytes` real bytes each (at least one
    per worker, a multiple of the worker count); worker w takes shards w, w + workers, … one after
    the other. The default gives one shard of 8 tables per worker at Phase 1's batch of 16 × 1 KiB
    and bounds the shards' tensors for larger batches (elementwise ops at d_model 96 are bound by
    memory bandwidth: in one thread, 4 micro-batches of 4 tables took ~20 % less CPU time than 16
    tables at once; with two workers on the shared machine, shards of 4 tables measured the same
    as shards of 8). Calling it on a batch sets (or adds to) every parameter's `.grad`, like
    `loss.backward()`. Only for one process on CPU: the gradients do not pass through DDP's hooks.
    Refuses a model with active dropout, whose random draws would depend on the threads' timing.
    """

    def __init__(self, model: AegirModel, workers: OneThreadWorkers, autocast: Autocast = contextlib.nullcontext,
                 shard_bytes: int = 8192, label_smoothing: float = 0.0, compact_ngrams: bool = True):
        if shard_bytes < 1:
            raise ValueError(f"ShardedStep: shard_bytes must be ≥ 1, got {shard_bytes}")
        self.model, self.workers, self.autocast, self.shard_bytes = model, workers, autocast, shard_bytes
        self.label_smoothing = label_smoothing
        self.params = [p for p in model.parameters() if p.requires_grad]
        # n-gram tables read by rows (module docstring; `compact_ngrams` False: as every other
        # parameter, a whole gradient per shard, the reference in tests and benchmarks)
        self.tables = [m for m in model.modules() if compact_ngrams
                       and isinstance(m, HashedNgramEmbedding) and m.table.weight.requires_grad]
        table_weights = {id(m.table.weight) for m in self.tables}
        self.dense = [i for i, p in enumerate(self.params) if id(p) not in table_weights]
        self.table_index = [next(i for i, p in enumerate(self.params) if p is m.table.weight) for m in self.tables]
        self._has_dropout = any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())

    def _forward(self, shard: Batch) -> tuple[LossSums, list[list[CompactRead]]]:
        """The shard's loss sums, and per n-gram table the rows its forward read."""
        with self.autocast(), compact_reads(self.tables) as reads:
            sums = self.model.loss_sums(shard, self.model(shard), self.label_smoothing)
        return sums, [reads[id(m)] for m in self.tables]

    def _gradients(self, shards: list[tuple[LossSums, list[list[CompactRead]]]], weights: LossSums
                   ) -> tuple[list[torch.Tensor | None], list[tuple[torch.Tensor, torch.Tensor] | None]]:
        """Σ over these shards (in order) of the gradient of Σ weight · sum of their sums: the
        dense parameters' (`self.dense` order), and per n-gram table (rows, their gradient) over
        the union of the rows the shards read (None: no row read)."""
        total: list[torch.Tensor | None] = [None] * len(self.dense)
        table_parts: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.tables]
        for sums, reads in shards:
            surrogate = sum(w * x for w, x in zip(weights.tensors(), sums.tensors()) if x.requires_grad)
            leaves = [read.leaf for table_reads in reads for read in table_reads]
            grads = torch.autograd.grad(surrogate, [self.params[i] for i in self.dense] + leaves, allow_unused=True)
            total = [g if t is None else t if g is None else t + g for t, g in zip(total, grads)]
            leaf_grads = iter(grads[len(self.dense):])
            for parts, table_reads in zip(table_parts, reads):
                for read in table_reads:
                    g = next(leaf_grads)
                    if g is not None:
                        parts.append((read.rows, g))
        return total, [_rows_sum(parts) for parts in table_parts]

    def __call__(self, batch: Batch) -> StepResult:
        if self.model.training and self._has_dropout:
            raise RuntimeError("ShardedStep: dropout > 0 would draw random numbers in racing threads; "
                               "train with the whole-batch step")
        workers = self.workers.count
        rounds = max(1, -(-int(batch.byte_mask.sum()) // (self.shard_bytes * workers)))
        shards = [trimmed(batch.select(rows)) for rows in shard_rows(batch, workers * rounds)]
        queues = [list(range(w, len(shards), workers)) for w in range(min(workers, len(shards)))]
        shard_out: list[tuple[LossSums, list[list[CompactRead]]]] = [None] * len(shards)  # type: ignore[list-item]
        for queue, outs in zip(queues, self.workers.map(lambda q: [self._forward(shards[i]) for i in q], queues)):
            for i, out in zip(queue, outs):
                shard_out[i] = out
        total = shard_out[0][0]
        for sums, _ in shard_out[1:]:
            total = total + sums
        # ∂loss/∂sums at the whole batch's sums: a tiny graph over the seven scalars
        leaves = total.like(x.detach().requires_grad_(x.is_floating_point()) for x in total.tensors())
        loss, parts = self.model.loss_of_sums(leaves)
        floating = [x for x in leaves.tensors() if x.requires_grad]
        slopes = iter(torch.autograd.grad(loss, floating, allow_unused=True))  # None: a sum the loss does not use
        weights = total.like((next(slopes) if x.requires_grad else None) for x in leaves.tensors())
        weights = weights.like(torch.zeros(()) if w is None else w for w in weights.tensors())
        worker_grads = self.workers.map(lambda q: self._gradients([shard_out[i] for i in q], weights), queues)
        for k, i in enumerate(self.dense):
            g = None
            for grads, _ in worker_grads:  # in worker order
                if grads[k] is not None:
                    g = grads[k] if g is None else g + grads[k]
            self._accumulate(self.params[i], g)
        for k, i in enumerate(self.table_index):
            g = None
            for _, rows in worker_grads:  # in worker order, into one zeroed table gradient
                if rows[k] is not None:
                    if g is None:
                        g = torch.zeros_like(self.params[i])
                    g.index_add_(0, *rows[k])
            self._accumulate(self.params[i], g)
        return StepResult(loss.detach(), parts, total.chunk_stats())

    @staticmethod
    def _accumulate(p: torch.Tensor, g: torch.Tensor | None) -> None:
        if g is not None:
            p.grad = g if p.grad is None else p.grad + g


def _rows_sum(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(rows, gradient) of table rows summed in order over `parts` ((ascending distinct rows,
    their gradient) each), over the union of their rows: row r's value is the in-order sum of
    the parts that hold r, as adding the parts' whole-table gradients would give it."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    rows = torch.unique(torch.cat([r for r, _ in parts]))  # ascending
    out = parts[0][1].new_zeros((len(rows), parts[0][1].shape[1]))
    for r, g in parts:
        out.index_add_(0, torch.searchsorted(rows, r), g)
    return rows, out


def process_shard(indices: list[int], accelerator) -> list[int]:
    """This process's share of a global batch of table indices, under accelerate (every
    process gets at least one table; one process gets them all)."""
    world, rank = accelerator.num_processes, accelerator.process_index
    if len(indices) < world:
        indices = (indices * world)[:world]
    return indices[rank::world]
