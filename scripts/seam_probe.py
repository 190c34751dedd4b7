"""What a specialist's final main-network state holds about each column: linear probes (issue 34).

    python scripts/seam_probe.py --specialist media [--models models/phase1 --data data/prepared]

Phase 3 hands the primary each activated specialist's main-network *final* state (the state
after the whole table; docs/method.md, "Phase 3"). The primary can only read it the way RWKV
reads any state, r·S at each of its chunks. This script asks whether the label knowledge is
there to be read. Over the specialist's own domains it fits one multinomial logistic
regression per feature set on `policy_train`, `valid` and `test` tables (none of them read in
training by either model) and scores CTA accuracy on the in-domain tables of `corner_cases`
(and `real` where it has them):

* `specialist columns`, `primary columns`: the vectors each model's own CTA head reads (the
  upper references: what the specialist knows, what the primary knows);
* `final-state read, own r`: per main layer, the specialist's receptance at the chunk that
  starts at the column's separator (which has read the column) applied to its FINAL state,
  r_c·S_final — the best any reader of the handed-over state could do with the specialist's own
  queries;
* `state read at the column`: the same r_c applied to the state right there, r_c·S_c (what the
  specialist itself reads at the column): the gap to the line above is what decay and the
  delta rule's removals wash out between the column and the end of the table;
* `primary columns + final-state read`: does the handed-over read add to what the primary has?

Beside the probes, `seam, single read`: the CTA accuracy of the primary reading each table from
the specialist's final states as its initial state (every gate at 1), against each alone.
"""

from __future__ import annotations

import argparse
import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

import aegir.model.rwkv as rwkv
from aegir.data.batch import IGNORE_INDEX
from aegir.data.dataset import collate, eval_batches, load_examples
from aegir.model.checkpoint import load_checkpoint
from aegir.model.chunking import chunk

TRAIN_SPLITS = ("policy_train", "valid", "test")
TEST_SPLITS = ("corner_cases", "real")


@contextmanager
def captured_wkv(outputs: list):
    """Within the block, every `wkv_auto` call of the RWKV layers appends (r, y) to `outputs`."""
    original = rwkv.wkv_auto

    def capture(r, w, k, v, a, b, initial_state=None, **kwargs):
        y, state = original(r, w, k, v, a, b, initial_state, **kwargs)
        outputs.append((r.detach(), y.detach()))
        return y, state
    rwkv.wkv_auto = capture
    try:
        yield
    finally:
        rwkv.wkv_auto = original


@torch.no_grad()
def features(model, examples, batch_size: int = 32) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per labelled column: {feature set: (N, dims)}, CTA labels (N,)."""
    out: dict[str, list] = {"columns": [], "final_read": [], "read_at_column": []}
    labels = []
    for index in eval_batches(examples, batch_size):
        batch = collate([examples[i] for i in index])
        encoded = model.encode(batch)
        chunk_h, chunk_mask = chunk(encoded.hidden, encoded.routing.boundary_mask)
        calls: list = []
        with captured_wkv(calls):
            _, final = model.main(chunk_h, chunk_mask)
        # chunk index of each column's separator byte (a forced boundary: a chunk starts there)
        position = torch.cumsum(encoded.routing.boundary_mask.long(), dim=1) - 1  # (B, T)
        ends = batch.column_spans[..., 1].clamp(max=position.shape[1] - 1)
        column_chunk = torch.gather(position, 1, ends)  # (B, C)
        final_reads, column_reads = [], []
        for (r, y), state in zip(calls, final):  # per main layer; r, y: (B, L, H, K)
            at = column_chunk[:, :, None, None].expand(-1, -1, r.shape[2], r.shape[3])
            r_c = torch.gather(r.float(), 1, at)  # (B, C, H, K)
            final_reads.append(torch.einsum("bchk,bhkv->bchv", r_c, state.wkv.float()).flatten(2))
            column_reads.append(torch.gather(y.float(), 1, at).flatten(2))
        vectors = model(batch).column_vectors
        keep = batch.cta_labels != IGNORE_INDEX  # (B, C)
        out["columns"].append(vectors[keep].numpy())
        out["final_read"].append(torch.cat(final_reads, -1)[keep].numpy())
        out["read_at_column"].append(torch.cat(column_reads, -1)[keep].numpy())
        labels.append(batch.cta_labels[keep].numpy())
    return {k: np.concatenate(v) for k, v in out.items()}, np.concatenate(labels)


def gated(states, gates: dict | None):
    """The states scaled per layer and head by `gates` (config.json's `seam_gates` of a
    specialist trained through the seam, `aegir.train.seam`); unchanged (every gate 1) without."""
    if gates is None:
        return states
    out = []
    for layer, state in enumerate(states):
        B, H, K, _ = state.wkv.shape
        g = torch.tensor(gates["wkv"][layer])
        q = torch.tensor(gates["shift"][layer])[:, None]
        out.append(type(state)(g[:, None, None] * state.wkv, (q * state.shift_time.view(B, H, K)).view(B, -1),
                               (q * state.shift_channel.view(B, H, K)).view(B, -1)))
    return out


@torch.no_grad()
def heard(specialist, primary, examples, gates: dict | None = None, batch_size: int = 32) -> dict[str, float]:
    """CTA accuracy (single read, argmax) of the primary alone, of the specialist alone, and of
    the primary reading each table from the specialist's final main-network states (the seam
    with the specialist's learned gates, else every gate at 1; identity alignment: the two
    share a shape)."""
    right = {"primary alone": 0, "specialist alone": 0, "primary from the specialist's state": 0}
    total = 0
    for index in eval_batches(examples, batch_size):
        batch = collate([examples[i] for i in index])
        keep = batch.cta_labels != IGNORE_INDEX
        gold = batch.cta_labels[keep]
        own = specialist(batch)
        for name, logits in (("primary alone", primary(batch).cta_logits), ("specialist alone", own.cta_logits),
                             ("primary from the specialist's state",
                              primary(batch, main_initial_state=gated(own.main_final_state, gates)).cta_logits)):
            right[name] += int((logits.argmax(-1)[keep] == gold).sum())
        total += int(keep.sum())
    return {name: 100 * n / max(1, total) for name, n in right.items()}


def probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray) -> float:
    scaler = StandardScaler().fit(train_x)
    clf = LogisticRegression(max_iter=400, C=1.0).fit(scaler.transform(train_x), train_y)
    return 100 * float((clf.predict(scaler.transform(test_x)) == test_y).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specialist", required=True)
    parser.add_argument("--primary", default="primary")
    parser.add_argument("--models", default="models/phase1", type=Path)
    parser.add_argument("--data", default="data/prepared", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    specialist, spec_config = load_checkpoint(args.models / args.specialist)
    primary, _ = load_checkpoint(args.models / args.primary)
    specialist.eval()
    primary.eval()
    domains = spec_config["agent_config"]["domains"]

    def gather(splits):
        examples = [e for s in splits for e in load_examples(args.data, s) if e.domain in domains]
        spec, y = features(specialist, examples)
        prim, y2 = features(primary, examples)
        assert (y == y2).all()
        heard_scores[tuple(splits)] = heard(specialist, primary, examples, spec_config.get("seam_gates"))
        return {"specialist columns": spec["columns"], "primary columns": prim["columns"],
                "final-state read, own r": spec["final_read"], "state read at the column": spec["read_at_column"],
                "primary columns + final-state read": np.concatenate([prim["columns"], spec["final_read"]], 1),
                "primary's own final-state read": prim["final_read"]}, y, len(examples)

    heard_scores: dict = {}
    train, train_y, n_train = gather(TRAIN_SPLITS)
    result = {"specialist": args.specialist, "domains": domains, "train_tables": n_train, "splits": {}}
    for split in TEST_SPLITS:
        test, test_y, n_test = gather((split,))
        if n_test == 0:
            continue
        result["splits"][split] = {"tables": n_test, "columns": int(len(test_y)),
                                   "accuracy": {name: probe(train[name], train_y, test[name], test_y) for name in train},
                                   "seam, single read": heard_scores[(split,)]}
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
