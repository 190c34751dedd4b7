"""SwarmOrchestrator: a trainable primary, a router, and frozen specialists fused through the
primary's main-network state (PARL, Phase 3).

One forward, in the order the work depends on itself:

    primary prefix   embedding → encoder → chunk boundaries            (once; reused below)
    routing_hidden   masked mean of the encoder output, (B, D)          (the router's input)
    router           scores = σ(W·LN(h) + b), sampled (training) or thresholded (evaluation);
                     in evaluation, with the subject rule on, the owners of the domain the frozen
                     Phase 1 primary names for the subject column are switched on too
    specialists      each frozen specialist reads only the tables that chose it, in one batched
                     call, and hands back its main network's final states (and, with the stream
                     seam, its decoder's output per byte)
    fusion           aligned, gated per head, masked by the activation (`RWKVStateFusion`)
    primary rest     main network from the fused initial state → dechunk → decoder (+ the fused
                     specialist streams) → columns → heads
    vote             (`annotate`, with `vote` on) the mean softmax of those heads and each
                     activated specialist's own heads on its stream: the output seam; with
                     `vote_primary` on, the frozen Phase 1 primary's heads too on every table,
                     from the subject rule's read of it (no read more)

`forward(batch)` with `routing_hidden=None` runs the primary alone and is exactly the Phase 1
model's forward, so one object serves supervised and PARL training (and the no-specialist
control). The router's input goes through a LayerNorm first (not in the design's formula): the
encoder's pooled output has a scale set by Phase 1, and the router should not inherit it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn

from aegir.data.batch import Batch
from aegir.labels import cta_vocab, label_families
from aegir.model.chunking import RoutingOutput
from aegir.model.network import AegirModel, AegirOutput, EncoderOutput
from aegir.model.rwkv import LayerState
from aegir.orchestrator.critical import labels_read_steps
from aegir.orchestrator.ensemble import ensemble_output
from aegir.orchestrator.fusion import RWKVStateFusion
from aegir.orchestrator.router import RouterDecision, SpecialistRouter, cap_decision
from aegir.orchestrator.specialist import FrozenSpecialist, SpecialistRead, alignment_for


@dataclass
class OrchestratorOutput:
    """output:              the primary's `AegirOutput` (logits, column vectors, …)
    specialist_outputs:  name → the specialist's `SpecialistRead` (final states per layer, in its
                         own shape, and its byte stream with the stream seam), zero on rows that
                         did not activate it (only specialists that ran)
    activation_mask:     (B, S) bool, or None when the primary ran alone
    decision:            the router's `RouterDecision` (scores, log-probs, token mask), or None
    main_initial_state:  the fused state the primary's main network started from, or None
    seconds:             wall-clock per stage: prefix, each specialist, fusion, rest (, vote)
    seam_output:         after the vote (`SwarmOrchestrator.voted`), the primary's output before
                         it: what the state seam alone gives; None where no vote was taken
    subject_labels:      the frozen Phase 1 primary's (CTA, CPA) logits on every row, from the
                         subject rule's read (evaluation with the rule on), or None
    """

    output: AegirOutput
    specialist_outputs: dict[str, SpecialistRead] = field(default_factory=dict)
    activation_mask: torch.Tensor | None = None
    decision: RouterDecision | None = None
    main_initial_state: list[LayerState] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    seam_output: AegirOutput | None = None
    subject_labels: tuple[torch.Tensor, torch.Tensor] | None = None


def select_encoded(encoded: EncoderOutput, rows: torch.Tensor) -> EncoderOutput:
    """The prefix of the batch rows at `rows` (1-D long; rows may repeat: rollouts of one table
    share its encoder pass, and gradients flow back into it from every copy)."""
    r = encoded.routing
    return EncoderOutput(
        hidden=encoded.hidden[rows],
        routing=RoutingOutput(boundary_prob=r.boundary_prob[rows], boundary_mask=r.boundary_mask[rows],
                              selected_prob=r.selected_prob[rows]),
    )


SUBJECT_READER = "primary"  # the specialist whose reading of the subject column the subject rule follows


def subject_owner_matrix(specialist_names: Sequence[str], owners: Mapping[str, Sequence[str]]) -> torch.Tensor:
    """(CTA labels, S) bool: row l marks the specialists that own the domain label l names for
    a subject column (the X of `X/name`, `X/description`; `aegir.labels.label_families`); a
    label of no family marks none. owners: specialist name → its domains (`agents.<name>.domains`)."""
    ids, families = label_families(cta_vocab())
    return torch.tensor([[f >= 0 and families[f] in owners.get(name, ()) for name in specialist_names]
                         for f in ids], dtype=torch.bool).reshape(len(ids), len(specialist_names))


def repeat_batch(batch: Batch, times: int) -> Batch:
    """`batch` repeated `times` times along the batch: rows k·B … (k+1)·B − 1 are copy k."""
    return batch.select(torch.arange(batch.batch_size, device=batch.byte_ids.device).repeat(times))


class SwarmOrchestrator(nn.Module):
    """primary_model: the trainable `AegirModel`; specialists: name → frozen `AegirModel`;
    fusion: `RWKVStateFusion` over the primary's main heads, one agent per specialist;
    d_model: the primary's width (the router's input); activation_threshold: a gate opens in
    evaluation when its score exceeds it; vote: `annotate` ends with the output seam (`voted`);
    subject_route: specialist name → the domains it owns, to turn the subject rule on
    (`subject_routing`; it needs the frozen Phase 1 primary among the specialists, as
    `SUBJECT_READER`), or None (off); vote_primary: the subject rule's reader votes on every
    table (it needs `vote` and the subject rule). With no specialists it is the primary alone
    (the Phase 3 control)."""

    def __init__(self, primary_model: AegirModel, specialists: dict[str, AegirModel],
                 fusion: RWKVStateFusion, d_model: int, activation_threshold: float = 0.5,
                 router_init_rate: float | None = None, vote: bool = False,
                 subject_route: Mapping[str, Sequence[str]] | None = None, vote_primary: bool = False):
        super().__init__()
        if d_model != primary_model.config.d_model:
            raise ValueError(f"d_model {d_model} is not the primary's {primary_model.config.d_model}")
        if fusion.num_agents != len(specialists):
            raise ValueError(f"fusion is over {fusion.num_agents} agents, got {len(specialists)} specialists")
        if not 0.0 < activation_threshold < 1.0:
            raise ValueError(f"activation_threshold must be in (0, 1), got {activation_threshold}")
        self.primary = primary_model
        self.specialist_names = list(specialists)
        self.specialists = nn.ModuleList(FrozenSpecialist(model, name, fusion.stream, fusion.columns)
                                         for name, model in specialists.items())
        self.alignments = nn.ModuleList(alignment_for(model, primary_model, fusion.stream, fusion.columns)
                                        for model in specialists.values())
        self.fusion = fusion
        self.activation_threshold = activation_threshold
        self.vote = vote
        has_router = len(specialists) > 0
        self.router_norm = nn.LayerNorm(d_model) if has_router else None
        self.router = SpecialistRouter(d_model, len(specialists), init_rate=router_init_rate) if has_router else None
        self.subject_route: dict[str, tuple[str, ...]] | None = None
        self._subject_owners: torch.Tensor | None = None  # (CTA labels, S) bool; not a weight
        if subject_route is not None and has_router:
            if SUBJECT_READER not in specialists:
                raise ValueError(f"the subject rule reads the subject column with the frozen {SUBJECT_READER!r}, "
                                 f"which is not among the specialists {self.specialist_names}")
            unknown = sorted(set(subject_route) - set(specialists))
            if unknown:
                raise ValueError(f"subject_route names {unknown}, not among the specialists {self.specialist_names}")
            self.subject_route = {name: tuple(domains) for name, domains in subject_route.items()}
            self._subject_owners = subject_owner_matrix(self.specialist_names, self.subject_route)
        if vote_primary and has_router and (not vote or self.subject_route is None):
            raise ValueError("vote_primary needs the vote and the subject rule (it votes with the rule's read of "
                             f"the frozen {SUBJECT_READER!r})")
        self.vote_primary = vote_primary and has_router  # the control votes with no one

    @property
    def num_specialists(self) -> int:
        return len(self.specialists)

    def trainable_parameters(self) -> dict[str, nn.Parameter]:
        """Every parameter Phase 3 trains: primary, router (+ its norm), alignments, fusion —
        never a specialist's."""
        return {name: p for name, p in self.named_parameters() if not name.startswith("specialists.")}

    # ------------------------------------------------------------------------------- stages

    def encode(self, batch: Batch) -> EncoderOutput:
        """The primary's prefix: embedding, encoder, chunk boundaries."""
        return self.primary.encode(batch)

    def routing_hidden(self, batch: Batch, encoded: EncoderOutput) -> torch.Tensor:
        """(B, D): the pooled encoder output the router reads."""
        return self.primary.routing_hidden(batch, encoded)

    def route(self, routing_hidden: torch.Tensor, sample: bool = False,
              generator: torch.Generator | None = None, cap: int | None = None) -> RouterDecision:
        """Sampled (training) or thresholded (evaluation) routing, then the budget cap."""
        h = self.router_norm(routing_hidden)
        decision = (self.router.sample(h, generator=generator) if sample
                    else self.router.decide(h, self.activation_threshold))
        return cap_decision(decision, cap)

    @property
    def subject_steps(self) -> int:
        """Sequential layer-steps of the subject rule's read (0 with the rule off): the frozen
        primary's whole read to its labels, which the routing waits for
        (`aegir.orchestrator.critical.phase3_graph`)."""
        if self.subject_route is None:
            return 0
        return labels_read_steps(self.specialists[self.specialist_names.index(SUBJECT_READER)].config)

    @property
    def shares_subject_read(self) -> bool:
        """Whether the subject rule's read of a table also serves as its reader's read as a
        specialist: with the rule on and the column seam, whose reads keep the labels the rule
        needs (`subject_routing`)."""
        if self.subject_route is None:
            return False
        return self.specialists[self.specialist_names.index(SUBJECT_READER)].columns

    def separate_reads(self, active) -> list[bool]:
        """Which of the specialists `active` marks (one flag per specialist) run a read of their
        own in evaluation: all of them but the subject rule's reader where its read is shared
        (`shares_subject_read`; `subject_steps` counts it). What the critical and total steps
        count."""
        flags = [bool(on) for on in active]
        if self.shares_subject_read:
            flags[self.specialist_names.index(SUBJECT_READER)] = False
        return flags

    @torch.no_grad()
    def subject_routing(self, batch: Batch) -> tuple[torch.Tensor, SpecialistRead | None,
                                                     tuple[torch.Tensor, torch.Tensor]]:
        """The subject rule: (B, S) bool, the specialists that own the domain the frozen Phase 1
        primary names for each table's subject column (its top CTA label of column 0, e.g.
        `Movie/name` → the owner of `Movie`); the reader's `SpecialistRead` of the whole
        batch where it is shared (`shares_subject_read`: the orchestrator hands it on as that
        specialist's read of the rows that activate it, so the frozen primary reads once), else
        None; and the reader's (CTA, CPA) logits on the batch (what `vote_primary` votes with). On real tables the router, trained on synthetic ones, misses the owner of many
        tables' domain (docs/experiments.md, "What routing costs on real tables"); the
        primary's reading of the subject column names it more often."""
        reader = self.specialists[self.specialist_names.index(SUBJECT_READER)]
        if self.shares_subject_read:
            read = reader(batch)
            labels = read.labels
        else:
            whole = reader.model(batch)
            read, labels = None, (whole.cta_logits, whole.cpa_logits)
        top = labels[0][:, 0].argmax(-1)  # (B,)
        return self._subject_owners.to(top.device)[top], read, labels

    def decide(self, batch: Batch, routing_hidden: torch.Tensor, sample: bool = False,
               generator: torch.Generator | None = None, cap: int | None = None,
               seconds: dict[str, float] | None = None
               ) -> tuple[RouterDecision, dict[str, SpecialistRead], tuple[torch.Tensor, torch.Tensor] | None]:
        """The routing `forward` makes when given none: the router samples or thresholds (`route`),
        then, with the subject rule on and not sampling, the owners it names join
        (`subject_routing`), then `cap` applies. Also the reads made on the way (the subject
        rule's shared read, by specialist name), for `read_specialists`' `known`, and the subject
        rule's reader's labels (None with the rule off or sampling); `seconds`
        receives the subject rule's wall-clock. On its own: which specialists a table activates
        without reading them (`aegir.swarm.model.table_views`)."""
        known: dict[str, SpecialistRead] = {}
        labels = None
        decision = self.route(routing_hidden, sample=sample, generator=generator)
        if self.subject_route is not None and not sample:
            start = time.perf_counter()
            owners, read, labels = self.subject_routing(batch)
            if read is not None:
                known[SUBJECT_READER] = read
            decision = replace(decision, activation_mask=decision.activation_mask | owners)
            if seconds is not None:
                seconds["subject"] = time.perf_counter() - start
        return cap_decision(decision, cap), known, labels

    def routing_log_prob(self, routing_hidden: torch.Tensor, activation_mask: torch.Tensor) -> torch.Tensor:
        """log π(activation_mask) under the current parameters, (B, S)."""
        return self.router.log_prob(self.router_norm(routing_hidden), activation_mask)

    def read_specialists(self, batch: Batch, activation_mask: torch.Tensor,
                         seconds: dict[str, float] | None = None,
                         known: dict[str, SpecialistRead] | None = None) -> list[SpecialistRead | None]:
        """Each specialist reads the rows that activated it, in one batched call: per specialist
        its `SpecialistRead` scattered back to the batch (zeros elsewhere), or None if no row
        chose it. `known`: reads of the whole batch made already (the subject rule's), by
        specialist name: those rows of it are taken instead of a second read. `seconds`
        collects the wall-clock of each read."""
        reads: list[SpecialistRead | None] = []
        for s, specialist in enumerate(self.specialists):
            rows = activation_mask[:, s].nonzero().flatten()
            start = time.perf_counter()
            whole = (known or {}).get(specialist.name)
            if not len(rows):
                reads.append(None)
            elif whole is not None:
                reads.append(whole.select(rows).scatter(rows, batch.batch_size))
            else:
                reads.append(specialist.read(batch, rows))
            if seconds is not None:
                seconds[f"specialist/{specialist.name}"] = time.perf_counter() - start
        return reads

    @property
    def stream_seam(self) -> bool:
        """Whether the specialists' byte streams are fused too (`RWKVStateFusion`)."""
        return self.fusion.stream

    def fuse(self, reads: list[SpecialistRead | None], activation_mask: torch.Tensor,
             rows: torch.Tensor | None = None) -> list[LayerState]:
        """Align every read into the primary's shape and fuse it under the activation mask.

        reads: per specialist, its read of R rows (or None); activation_mask: (B, S);
        rows: (B,) long, the read row each output row takes (rollouts of one batch share one
        read per table), or None when B = R and row b is read row b.
        """
        aligned = []
        for s, (read, alignment) in enumerate(zip(reads, self.alignments)):
            if read is None:  # nobody chose it: a zero stand-in, masked away by the fusion anyway
                size = activation_mask.shape[0] if rows is None else int(rows.max()) + 1
                states = alignment(self.specialists[s].model.main.zero_state(size, activation_mask.device))
            else:
                states = alignment(read.states)
            aligned.append(states if rows is None else [state.select(rows) for state in states])
        return self.fusion(aligned, activation_mask)

    def _aligned_reads(self, reads: list[SpecialistRead | None], field: str,
                       rows: torch.Tensor | None) -> list[torch.Tensor]:
        """Each specialist's per-position tensor `field` of its read (`stream` (R, T, D_s) or
        `columns` (R, C, D_s)), aligned into the primary's width by its alignment's
        `align_<field>`, zeros for a specialist no row read, then indexed by `rows` as in `fuse`.
        At least one read must be present."""
        template = next(getattr(read, field) for read in reads if read is not None)
        out = []
        for read, alignment in zip(reads, self.alignments):
            x = (getattr(alignment, f"align_{field}")(getattr(read, field)) if read is not None
                 else template.new_zeros(*template.shape[:2], self.primary.config.d_model))
            out.append(x if rows is None else x[rows])
        return out

    def fuse_stream(self, reads: list[SpecialistRead | None], activation_mask: torch.Tensor,
                    rows: torch.Tensor | None = None) -> torch.Tensor | None:
        """The stream seam's addend to the primary's decoder output, (B, T, D), with `reads`,
        `activation_mask` and `rows` as in `fuse`; None when the seam is off or no specialist
        read anything."""
        if not self.stream_seam or all(read is None for read in reads):
            return None
        return self.fusion.fuse_stream(self._aligned_reads(reads, "stream", rows), activation_mask)

    @property
    def column_seam(self) -> bool:
        """Whether the specialists' column vectors are mixed into the primary's (`RWKVStateFusion`)."""
        return self.fusion.columns

    def column_mix(self, reads: list[SpecialistRead | None], activation_mask: torch.Tensor,
                   rows: torch.Tensor | None = None) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The column seam as a map of the primary's column vectors (B, C, D) → (B, C, D), with
        `reads`, `activation_mask` and `rows` as in `fuse`; None when the seam is off or no
        specialist read anything."""
        if not self.column_seam or all(read is None for read in reads):
            return None
        aligned = self._aligned_reads(reads, "columns", rows)
        return lambda columns: self.fusion.fuse_columns(columns, aligned, activation_mask)

    # ------------------------------------------------------------------------------- forward

    def forward(self, batch: Batch, routing_hidden: torch.Tensor | None = None, *,
                encoded: EncoderOutput | None = None, decision: RouterDecision | None = None,
                sample: bool = False, generator: torch.Generator | None = None,
                cap: int | None = None) -> OrchestratorOutput:
        """Route, read, fuse, and complete the primary's forward.

        routing_hidden: the router's input (`routing_hidden(batch, encoded)`), or None to run
        the primary alone (exactly Phase 1's forward). encoded: the batch's prefix when the
        caller has it (it is computed otherwise). decision: a routing made earlier (e.g. the
        rollout being re-scored); otherwise the router samples (`sample=True`, with
        `generator`) or thresholds — and then, with the subject rule on, the owners it names
        join (`subject_routing`; never in training, whose routing is the policy's own) —, then
        `cap` applies.
        """
        seconds: dict[str, float] = {}
        start = time.perf_counter()
        encoded = self.encode(batch) if encoded is None else encoded
        seconds["prefix"] = time.perf_counter() - start
        if routing_hidden is None or self.num_specialists == 0:
            start = time.perf_counter()
            output = self.primary.forward_from_encoded(batch, encoded)
            seconds["rest"] = time.perf_counter() - start
            return OrchestratorOutput(output=output, seconds=seconds)

        known: dict[str, SpecialistRead] = {}
        subject_labels = None
        if decision is None:
            decision, known, subject_labels = self.decide(batch, routing_hidden, sample=sample, generator=generator, cap=cap,
                                          seconds=seconds)
        mask = decision.activation_mask
        reads = self.read_specialists(batch, mask, seconds, known)
        start = time.perf_counter()
        state = self.fuse(reads, mask)
        stream = self.fuse_stream(reads, mask)
        column_mix = self.column_mix(reads, mask)
        seconds["fusion"] = time.perf_counter() - start
        start = time.perf_counter()
        output = self.primary.forward_from_encoded(batch, encoded, state, stream, column_mix)
        seconds["rest"] = time.perf_counter() - start
        return OrchestratorOutput(
            output=output,
            specialist_outputs={name: read for name, read in zip(self.specialist_names, reads) if read is not None},
            activation_mask=mask, decision=decision, main_initial_state=state, seconds=seconds,
            subject_labels=subject_labels)

    def annotate(self, batch: Batch) -> OrchestratorOutput:
        """Evaluation: the whole routed forward with thresholded routing, then the vote."""
        encoded = self.encode(batch)
        hidden = self.routing_hidden(batch, encoded) if self.num_specialists else None
        return self.voted(batch, self(batch, hidden, encoded=encoded))

    def voted(self, batch: Batch, out: OrchestratorOutput) -> OrchestratorOutput:
        """The output seam: with `vote` on, `out` (a forward of `batch`) with its label logits
        replaced by the log of the mean softmax of its own heads and the heads of every
        specialist its row activated, as they read the batch for the fusion (`specialist_logits`
        with the labels the column seam kept); the output before, in `seam_output`. A row that
        activated none keeps its distribution. With `vote_primary` on and the subject rule's read
        in `out` (`subject_labels`), the frozen primary votes on every row, activated or not, with
        the labels of that read. Unchanged with `vote` off or no routing. Training never votes:
        PARL's policy is the seam's."""
        if not self.vote or out.activation_mask is None:
            return out
        start = time.perf_counter()
        reads = [out.specialist_outputs.get(name) for name in self.specialist_names]
        voters, labels = out.activation_mask, self.specialist_logits(batch, reads, kept=True)
        if self.vote_primary and out.subject_labels is not None:
            reader = self.specialist_names.index(SUBJECT_READER)
            voters = voters.clone()
            voters[:, reader] = True
            labels[reader] = out.subject_labels
        output = ensemble_output(out.output, labels, voters)
        seconds = {**out.seconds, "vote": time.perf_counter() - start}
        return replace(out, output=output, seam_output=out.output, seconds=seconds)

    @torch.no_grad()
    def specialist_logits(self, batch: Batch, reads: list[SpecialistRead | None] | None = None, kept: bool = False
                          ) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
        """Each frozen specialist's (CTA, CPA) logits on the B tables of `batch`. With the stream
        seam its read already holds its decoder output, so only its pooling, column attention and
        heads run, on the rows it read (the others, which no row activated, hold its labels of a
        zero stream and are masked away by the activation); `kept`: where the read kept the labels
        its heads gave for the column seam (`SpecialistRead.labels`), those, run on nothing more.
        Otherwise its whole forward runs. Given `reads`, a specialist without one (no row activated
        it) gets None: the activation masks it on every row, so its labels would be computed only
        to be dropped (each such whole forward cost about a tenth of a second per PARL update)."""
        out: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        for s, specialist in enumerate(self.specialists):
            read = reads[s] if reads is not None else None
            if reads is not None and read is None:
                out.append(None)
            elif kept and read is not None and read.labels is not None:
                out.append(read.labels)
            elif read is not None and read.stream is not None:
                out.append(specialist.model.label_logits(batch, read.stream)[:2])
            else:
                whole = specialist.model(batch)
                out.append((whole.cta_logits, whole.cpa_logits))
        return out


@torch.no_grad()
def fused_state_one_at_a_time(orch: SwarmOrchestrator, batch: Batch, activation_mask: torch.Tensor) -> list[LayerState]:
    """The reference for `read_specialists` + `fuse`: every (table, specialist) pair that is
    activated is read on its own, a batch of one table with no padding, aligned and fused for
    that table alone; the rows are then stacked. Slow; for tests and the benchmark."""
    rows = []
    for b in range(batch.batch_size):
        table = batch.select(torch.tensor([b]))
        mask = activation_mask[b:b + 1]
        length = int(table.byte_mask.sum())
        table = table.select(torch.tensor([0]))
        table.byte_ids, table.byte_mask = table.byte_ids[:, :length], table.byte_mask[:, :length]
        reads = [specialist(table) if bool(mask[0, s]) else None for s, specialist in enumerate(orch.specialists)]
        rows.append(orch.fuse(reads, mask))
    return [LayerState(*(torch.cat([getattr(r[layer], f) for r in rows])
                         for f in ("wkv", "shift_time", "shift_channel")))
            for layer in range(len(rows[0]))]


def open_seam_gates(orch: SwarmOrchestrator, gates: dict[str, dict]) -> None:
    """Start the fusion gates of the specialists trained through the seam where that training
    left them (`gates[name]`: config.json's `seam_gates`, `aegir.train.seam`): the primary reading
    such a specialist's state through them is what the specialist was trained to help. Every
    other specialist's gates stay closed (zero)."""
    with torch.no_grad():
        for s, name in enumerate(orch.specialist_names):
            if name in gates:
                orch.fusion.wkv_gate[s].copy_(torch.tensor(gates[name]["wkv"]))
                orch.fusion.shift_gate[s].copy_(torch.tensor(gates[name]["shift"]))


def build_orchestrator(primary: AegirModel, specialists: dict[str, AegirModel],
                       activation_threshold: float = 0.5,
                       router_init_rate: float | None = None, stream_seam: bool = False,
                       column_seam: bool = False, vote: bool = False,
                       subject_route: Mapping[str, Sequence[str]] | None = None,
                       vote_primary: bool = False) -> SwarmOrchestrator:
    """A `SwarmOrchestrator` over `primary` with a fresh fusion (zero gates) over `specialists`;
    `stream_seam` adds the specialists' byte streams to the fused state, `column_seam` mixes
    their column vectors into the primary's (`RWKVStateFusion`; it needs the stream seam),
    `vote` ends `annotate` with the output seam (`SwarmOrchestrator.voted`), `subject_route`
    (specialist → its domains) turns the subject rule on (`SwarmOrchestrator.subject_routing`),
    `vote_primary` lets that rule's frozen reader vote on every table."""
    cfg = primary.config
    if column_seam and not stream_seam:
        raise ValueError("the column seam needs the stream seam (it reads the specialists' streams)")
    fusion = RWKVStateFusion(cfg.d_model // cfg.head_size, cfg.head_size, len(specialists), cfg.main_layers,
                             stream=stream_seam and len(specialists) > 0,
                             columns=column_seam and len(specialists) > 0)
    return SwarmOrchestrator(primary, specialists, fusion, cfg.d_model, activation_threshold, router_init_rate, vote,
                             subject_route, vote_primary)
