"""Hashed byte n-gram embeddings: what the bytes ending at each position spell, looked up at once.

A byte-level model has to learn from scratch that `"@"` then `".com"` means an email, or that
`"°C"` means a temperature, by building n-gram detectors out of its first recurrent layers. A
single-column TF-IDF classifier gets the same char 1–4-grams for free, which is why it beat
the Phase 1 model on the labels one column's cells decide (docs/experiments.md, "Byte n-gram
embeddings and the primary's epochs"). So, as the Byte Latent Transformer does (Pagnoni et al.
2024, "hash n-gram embeddings"), each byte position t also looks up one embedding per order
n ∈ {2, …, `ngram_max`} of the n bytes ending at t (hashed into `buckets` rows per order), and
the model adds their sum to the byte embedding.
The stream and its 258-row byte embedding are unchanged; this is a second table beside it.

Departures from BLT: orders 2…4 rather than 3…8 (columns are short: most cells are under 20
bytes) and one table per order of `buckets` rows with a fixed multiplicative hash, not a
rolling polynomial hash modulo a prime; n-grams cross separators, so the grams at a cell's
start carry the separator (the "word boundary" a char n-gram vectoriser also sees).

Positions before the start of the stream read as the id `BYTE_VOCAB_SIZE` (no byte, no special),
so the first n − 1 positions have n-grams of their own.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn

from aegir.data.serialize import BYTE_VOCAB_SIZE

BASE = BYTE_VOCAB_SIZE + 1  # a position before the stream reads as id BYTE_VOCAB_SIZE
MAX_ORDER = 4  # BASE**4 < 2**33, so key · multiplier (< 2**29) stays below 2**62: no overflow
# odd multipliers below 2**29, one per order (Knuth's multiplicative hashing: the middle bits
# of key · multiplier mix every byte of the key)
_MULTIPLIERS = {2: 0x1E3779B1, 3: 0x19E3779B, 4: 0x1B873593}
_SHIFT = 29


@dataclass
class CompactRead:
    """The rows of an n-gram table one forward read, as a leaf of their own (`compact_reads`)."""

    rows: torch.Tensor  # (U,) int64: the distinct rows read, ascending
    leaf: torch.Tensor  # (U, D): a detached copy of those rows that requires grad


_COMPACT = threading.local()  # .reads: {id(table module): [CompactRead, …]} inside `compact_reads`


@contextlib.contextmanager
def compact_reads(embeddings: Iterable[HashedNgramEmbedding]) -> Iterator[dict[int, list[CompactRead]]]:
    """Within the block, in this thread, each forward of one of `embeddings` (with gradients on)
    reads its table through a `CompactRead`: the distinct rows it needs, gathered into a leaf, so
    that its backward fills a (U, D) gradient of those rows instead of a zeroed (rows, D) one of the
    whole table (4.7 M numbers at the `cpu` preset, 4 per step at Phase 1's shards). The values
    are the same bits: each bag sums the same rows in the same order, and the backward
    accumulates each row's contributions in the same order (the ids are renumbered by a map that
    keeps their order). The caller puts the rows' gradients back (`aegir.train.step.ShardedStep`).
    Yields {id(embedding): the reads of its forwards, in order}."""
    store: dict[int, list[CompactRead]] = {id(e): [] for e in embeddings}
    previous = getattr(_COMPACT, "reads", None)
    _COMPACT.reads = store
    try:
        yield store
    finally:
        _COMPACT.reads = previous


def ngram_keys(byte_ids: torch.Tensor, order: int) -> torch.Tensor:
    """byte_ids: (B, T) int64 → (B, T) int64: Σ_i byte_ids[t − i] · BASE^i over i < order, with
    the ids before position 0 read as BASE − 1. Distinct n-grams have distinct keys."""
    if not 2 <= order <= MAX_ORDER:
        raise ValueError(f"ngram order must be in [2, {MAX_ORDER}], got {order}")
    ids = byte_ids.long()
    key = ids
    for i in range(1, order):
        shifted = torch.full_like(ids, BASE - 1)  # (B, T): the id i positions back
        if i < ids.shape[1]:
            shifted[:, i:] = ids[:, :-i]
        key = key + shifted * BASE ** i
    return key


def ngram_buckets(byte_ids: torch.Tensor, order: int, buckets: int) -> torch.Tensor:
    """(B, T) int64 in [0, buckets): the hashed bucket of the `order`-gram ending at each t."""
    mixed = ngram_keys(byte_ids, order) * _MULTIPLIERS[order]  # < 2**62
    return torch.remainder(mixed >> _SHIFT, buckets)


def ngram_buckets_reference(byte_ids: list[int], order: int, buckets: int) -> list[int]:
    """The same buckets for one stream, in plain Python integers (the reference in tests)."""
    out = []
    for t in range(len(byte_ids)):
        key = sum((byte_ids[t - i] if t - i >= 0 else BASE - 1) * BASE ** i for i in range(order))
        out.append(((key * _MULTIPLIERS[order]) >> _SHIFT) % buckets)
    return out


class HashedNgramEmbedding(nn.Module):
    """Sum over orders 2…max_order of an embedding of the hashed n-gram ending at each byte.

    forward(byte_ids (B, T)) → (B, T, D). One `nn.Embedding` holds all orders, order n's rows
    at offset (n − 2) · buckets. Initialised as small as the byte embedding (RWKV's ±1e-4), so
    at start neither dominates the LayerNorm that follows their sum.
    """

    def __init__(self, max_order: int, buckets: int, d_model: int):
        super().__init__()
        if not 2 <= max_order <= MAX_ORDER:
            raise ValueError(f"ngram max_order must be in [2, {MAX_ORDER}], got {max_order}")
        self.orders = tuple(range(2, max_order + 1))
        self.buckets = buckets
        self.table = nn.Embedding(len(self.orders) * buckets, d_model)
        nn.init.uniform_(self.table.weight, -1e-4, 1e-4)

    def bucket_ids(self, byte_ids: torch.Tensor) -> torch.Tensor:
        """(B, T, orders): rows of `table` read at each position."""
        return torch.stack([ngram_buckets(byte_ids, n, self.buckets) + i * self.buckets
                            for i, n in enumerate(self.orders)], dim=-1)

    def forward(self, byte_ids: torch.Tensor) -> torch.Tensor:
        B, T = byte_ids.shape
        rows = self.bucket_ids(byte_ids).view(B * T, len(self.orders))
        reads = getattr(_COMPACT, "reads", None)
        log = reads.get(id(self)) if reads is not None and torch.is_grad_enabled() else None
        if log is None or not self.table.weight.requires_grad:
            summed = nn.functional.embedding_bag(rows, self.table.weight, mode="sum")  # (B·T, D)
        else:  # the rows read, as a leaf of their own (`compact_reads`)
            used, local = torch.unique(rows, sorted=True, return_inverse=True)
            leaf = self.table.weight.detach().index_select(0, used).requires_grad_()
            log.append(CompactRead(used, leaf))
            summed = nn.functional.embedding_bag(local, leaf, mode="sum")
        return summed.view(B, T, -1)
