"""The torch side of prepared data: examples, deterministic batching, collation into `Batch`.

A prepared row's stream gets BOS_ID prepended (so its spans shift by one); labels become class
ids of the fixed vocabularies. A label outside them is a `DataError` naming the split file and
the table, never a silently dropped column.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from aegir.data.batch import IGNORE_INDEX, Batch
from aegir.data.prepared import read_split, split_path
from aegir.data.serialize import BOS_ID, PAD_ID, serialize_table
from aegir.data.table import Table
from aegir.errors import DataError
from aegir.labels import Vocabulary, cpa_vocab, cta_vocab


@dataclass(frozen=True)
class Example:
    """One table ready for the model.

    byte_ids: (T,) int16 stream ids, BOS first
    column_spans: (C, 2) int32, [start, end) in `byte_ids` coordinates
    cta_labels, cpa_labels: (C,) int64 class ids or IGNORE_INDEX
    """

    table_id: str
    domain: str | None
    byte_ids: np.ndarray
    column_spans: np.ndarray
    cta_labels: np.ndarray
    cpa_labels: np.ndarray

    @property
    def num_columns(self) -> int:
        return len(self.column_spans)


def _label_ids(labels: Sequence[str | None], vocab: Vocabulary, where: Path, table_id: str) -> np.ndarray:
    ids = np.full(len(labels), IGNORE_INDEX, dtype=np.int64)
    for i, label in enumerate(labels):
        if label is None:
            continue
        if label not in vocab:
            raise DataError(where, f"table {table_id!r} column {i}: {vocab.name.upper()} label {label!r} "
                                   f"is not in the SOTAB V2 vocabulary")
        ids[i] = vocab.index[label]
    return ids


def make_example(table_id: str, domain: str | None, stream: bytes, spans: Sequence[tuple[int, int]],
                 cta_labels: Sequence[str | None], cpa_labels: Sequence[str | None], where: Path) -> Example:
    """One example from a serialized stream (`aegir.data.serialize` layout) and its labels."""
    ids = np.empty(len(stream) + 1, dtype=np.int16)
    ids[0] = BOS_ID
    ids[1:] = np.frombuffer(stream, dtype=np.uint8)
    return Example(
        table_id=table_id,
        domain=domain,
        byte_ids=ids,
        column_spans=(np.asarray(spans, dtype=np.int32).reshape(-1, 2) + 1),
        cta_labels=_label_ids(cta_labels, cta_vocab(), where, table_id),
        cpa_labels=_label_ids(cpa_labels, cpa_vocab(), where, table_id),
    )


def examples_from_arrow(arrow: pa.Table, where: Path, domains: Sequence[str] = ()) -> list[Example]:
    """Examples of every prepared row (or only those whose domain is in `domains`, when given)."""
    keep = set(domains)
    columns = [arrow.column(c).to_pylist() for c in ("table_id", "domain", "stream", "span_start", "span_end", "cta", "cpa")]
    return [
        make_example(table_id, domain, stream, list(zip(starts, ends)), cta, cpa, where)
        for table_id, domain, stream, starts, ends, cta, cpa in zip(*columns)
        if not keep or domain in keep
    ]


def examples_from_tables(tables: Sequence[Table], byte_budget: int, max_rows: int, seed: int,
                         where: Path, compact: bool = False, compact_cell_bytes: int = 0) -> list[Example]:
    """Serialize tables the way `prepare` does and make examples of them (evaluate, annotate)."""
    out = []
    for table in tables:
        serialized = serialize_table(table, byte_budget, max_rows, seed, compact, compact_cell_bytes)
        out.append(make_example(table.table_id, table.domain, serialized.data, serialized.column_spans,
                                table.cta, table.cpa, where))
    return out


def load_examples(data_dir: str | Path, split: str, domains: Sequence[str] = ()) -> list[Example]:
    return examples_from_arrow(read_split(data_dir, split), split_path(data_dir, split), domains)


def collate(examples: Sequence[Example]) -> Batch:
    """Right-pad streams with PAD_ID and columns with empty spans into one `Batch`."""
    B = len(examples)
    T = max(len(e.byte_ids) for e in examples)
    C = max(e.num_columns for e in examples)
    byte_ids = torch.full((B, T), PAD_ID, dtype=torch.long)
    byte_mask = torch.zeros((B, T), dtype=torch.bool)
    spans = torch.zeros((B, C, 2), dtype=torch.long)
    column_mask = torch.zeros((B, C), dtype=torch.bool)
    cta = torch.full((B, C), IGNORE_INDEX, dtype=torch.long)
    cpa = torch.full((B, C), IGNORE_INDEX, dtype=torch.long)
    for b, e in enumerate(examples):
        t, c = len(e.byte_ids), e.num_columns
        byte_ids[b, :t] = torch.from_numpy(e.byte_ids.astype(np.int64))
        byte_mask[b, :t] = True
        spans[b, :c] = torch.from_numpy(e.column_spans.astype(np.int64))
        column_mask[b, :c] = True
        cta[b, :c] = torch.from_numpy(e.cta_labels)
        cpa[b, :c] = torch.from_numpy(e.cpa_labels)
    return Batch(byte_ids=byte_ids, byte_mask=byte_mask, column_spans=spans, column_mask=column_mask,
                 cta_labels=cta, cpa_labels=cpa)


def epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    """A permutation that depends only on (seed, epoch): resuming mid-epoch replays it exactly."""
    return np.random.default_rng([seed, epoch]).permutation(num_examples)


def length_grouped_batches(examples: Sequence[Example], batch_size: int, seed: int, epoch: int,
                           group: int = 32) -> list[list[int]]:
    """Shuffled batches of indices whose streams have similar lengths (less padding).

    Shuffle, cut into windows of `group` batches, sort each window by length, batch it, then
    shuffle the batches: random order, little padding, and a pure function of (seed, epoch).
    """
    order = epoch_order(len(examples), seed, epoch)
    window = batch_size * group
    batches: list[list[int]] = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window].tolist(), key=lambda i: len(examples[i].byte_ids))
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    shuffle = np.random.default_rng([seed, epoch, 1]).permutation(len(batches))
    return [batches[i] for i in shuffle]


def eval_batches(examples: Sequence[Example], batch_size: int) -> Iterator[list[int]]:
    """Fixed-order batches sorted by length, for evaluation."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].byte_ids))
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]
