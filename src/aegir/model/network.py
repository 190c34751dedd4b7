"""The Aegir model: bytes → encoder → dynamic chunking → main RWKV network → dechunk → decoder →
column pooling → table context → CTA and CPA heads.

Only modules and the model config live here; data, optimiser and logging live elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from aegir.data.batch import IGNORE_INDEX, Batch
from aegir.data.serialize import BYTE_VOCAB_SIZE, COLUMN_SEP
from aegir.errors import ConfigError, check_config
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.chunking import (
    ChunkStats,
    RoutingModule,
    RoutingOutput,
    chunk,
    chunk_stats,
    dechunk,
    ema_parallel,
    ema_sequential,
    ratio_loss,
    ratio_loss_of,
    straight_through_ones,
)
from aegir.model.ngram import MAX_ORDER as NGRAM_MAX_ORDER
from aegir.model.ngram import HashedNgramEmbedding
from aegir.model.ops import wkv_cpu
from aegir.model.rwkv import LayerState, RWKVStack


@dataclass
class AegirConfig:
    """Model sizes and the model-side training knobs (the ratio loss)."""

    vocab_size: int = BYTE_VOCAB_SIZE  # embedding rows: 256 bytes + PAD + BOS
    d_model: int = 128  # width of every stage (encoder, main, decoder, columns)
    head_size: int = 32  # wkv head size K = V; heads = d_model / head_size
    ffn_mult: int = 4  # channel-mix hidden width = ffn_mult · d_model
    encoder_layers: int = 1  # RWKV blocks over bytes before chunking
    main_layers: int = 2  # RWKV blocks over chunks (the state-fusion seam)
    decoder_layers: int = 1  # RWKV blocks over bytes after dechunking
    context_layers: int = 1  # bidirectional self-attention blocks over the column vectors
    context_heads: int = 4  # attention heads in those blocks
    max_columns: int = 64  # learned column-position embeddings; later columns share the last
    target_compression: float = 4.0  # N of the ratio loss: target bytes per chunk
    ratio_loss_weight: float = 0.03  # weight of the ratio loss in the total loss (H-Net: 0.03)
    force_column_boundaries: bool = True  # every COLUMN_SEP byte starts a chunk
    wkv_chunk_size: int = 32  # chunk length of the chunked wkv form (≤ 64)
    wkv_kernel: bool = False  # the recurrences (wkv, dechunk EMA) on the CPU kernels (aegir.model.ops.wkv_cpu)
    #                          where they apply; False: the chunked wkv and the closed-form EMA (the
    #                          same model to rounding; the default of checkpoints from before the field)
    n_cta: int = field(default_factory=lambda: len(cta_vocab()))  # CTA classes (82)
    n_cpa: int = field(default_factory=lambda: len(cpa_vocab()))  # CPA classes (108)
    dropout: float = 0.0  # dropout on the embedding and the column vectors
    ngram_max: int = 1  # hashed byte n-gram embeddings of orders 2..ngram_max beside the byte
    #                     embedding (aegir.model.ngram); 1 = none (checkpoints from before them)
    ngram_buckets: int = 16384  # rows per n-gram order

    def __post_init__(self) -> None:
        def check(ok: bool, key: str, problem: str) -> None:
            check_config(ok, f"model.{key}", problem)

        check(self.vocab_size == BYTE_VOCAB_SIZE, "vocab_size",
              f"must be {BYTE_VOCAB_SIZE} (256 bytes + specials), got {self.vocab_size}")
        check(self.d_model > 0 and self.head_size > 0 and self.d_model % self.head_size == 0,
              "head_size", f"d_model {self.d_model} must be a positive multiple of {self.head_size}")
        check(self.d_model % self.context_heads == 0, "context_heads",
              f"d_model {self.d_model} must be a multiple of {self.context_heads}")
        for key in ("encoder_layers", "main_layers", "decoder_layers"):
            check(getattr(self, key) >= 1, key, f"must be ≥ 1, got {getattr(self, key)}")
        check(self.context_layers >= 0, "context_layers", f"must be ≥ 0, got {self.context_layers}")
        check(self.max_columns >= 1, "max_columns", f"must be ≥ 1, got {self.max_columns}")
        check(self.target_compression > 1, "target_compression",
              f"must be > 1, got {self.target_compression}")
        check(self.ratio_loss_weight >= 0, "ratio_loss_weight", f"must be ≥ 0, got {self.ratio_loss_weight}")
        check(1 <= self.wkv_chunk_size <= 64, "wkv_chunk_size", f"must be in [1, 64], got {self.wkv_chunk_size}")
        check(0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        check(1 <= self.ngram_max <= NGRAM_MAX_ORDER, "ngram_max",
              f"must be in [1, {NGRAM_MAX_ORDER}] (1: no n-gram embeddings), got {self.ngram_max}")
        check(1 <= self.ngram_buckets <= 1 << 22, "ngram_buckets",
              f"must be in [1, {1 << 22}], got {self.ngram_buckets}")
        check(self.n_cta >= 1 and self.n_cpa >= 1, "n_cta", "label counts must be ≥ 1")
        check(isinstance(self.wkv_kernel, bool), "wkv_kernel",  # "no" or 1 would be taken as on
              f"must be true or false, got {self.wkv_kernel!r}")


# Overrides of AegirConfig per size; mirrored in params.yaml.
PRESETS: dict[str, dict] = {
    # tests: a forward + backward in well under a second
    "tiny": dict(d_model=32, head_size=16, ffn_mult=2, encoder_layers=1, main_layers=1,
                 decoder_layers=1, context_layers=1, context_heads=2, wkv_chunk_size=16,
                 ngram_max=3, ngram_buckets=512, wkv_kernel=True),
    # default: trains on 2 CPU cores in minutes
    "cpu": dict(d_model=96, head_size=32, ffn_mult=2, encoder_layers=1, main_layers=2,
                decoder_layers=1, context_layers=1, context_heads=4, wkv_chunk_size=32,
                ngram_max=4, ngram_buckets=16384, wkv_kernel=True),
    # one GPU: 31.7 M parameters, 6.5 M of them outside the hashed n-gram rows
    "gpu": dict(d_model=256, head_size=64, ffn_mult=4, encoder_layers=1, main_layers=4,
                decoder_layers=1, context_layers=1, context_heads=4, wkv_chunk_size=64,
                ngram_max=4, ngram_buckets=32768, wkv_kernel=True),
}


def preset(name: str, **overrides) -> AegirConfig:
    """AegirConfig of a named preset, with field overrides."""
    if name not in PRESETS:
        raise ConfigError(f"model.preset: unknown preset {name!r}, expected one of {sorted(PRESETS)}")
    return AegirConfig(**{**PRESETS[name], **overrides})


@dataclass
class EncoderOutput:
    """hidden: (B, T, D) encoder output over bytes; routing: boundaries of the chunker."""

    hidden: torch.Tensor
    routing: RoutingOutput


@dataclass
class AegirOutput:
    """cta_logits (B, C, n_cta); cpa_logits (B, C, n_cpa) — column c's relation to column 0
    (column 0's own row is meaningless); column_vectors (B, C, D); ratio_loss: scalar;
    chunk_stats: detached F, G, ratio; main_final_state: the main network's state per layer;
    routing: the chunker's boundaries over the bytes (what `AegirModel.loss_sums` reads)."""

    cta_logits: torch.Tensor
    cpa_logits: torch.Tensor
    column_vectors: torch.Tensor
    ratio_loss: torch.Tensor
    chunk_stats: ChunkStats
    main_final_state: list[LayerState]
    routing: RoutingOutput | None = None


@dataclass
class LossSums:
    """A batch's training loss as sums and counts (0-dim tensors), so that the sums of a batch's
    shards add up to the whole batch's: `aegir.train.step` trains on shards in parallel.

    cta_nll, cpa_nll: cross-entropy summed over labelled columns / labelled (0, c) pairs;
    cta_count, cpa_count: how many there are; boundaries: boundary bytes among the real bytes
    (no gradient); boundary_prob: Σ p over the real bytes; real_bytes: how many real bytes.
    """

    cta_nll: torch.Tensor
    cta_count: torch.Tensor
    cpa_nll: torch.Tensor
    cpa_count: torch.Tensor
    boundaries: torch.Tensor
    boundary_prob: torch.Tensor
    real_bytes: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The fields in order (dataclasses.astuple would deep-copy them)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def __add__(self, other: LossSums) -> LossSums:
        return LossSums(*(x + y for x, y in zip(self.tensors(), other.tensors())))

    def like(self, tensors) -> LossSums:
        """Sums of this kind from `tensors`, in the order `tensors()` gives them."""
        return LossSums(*tensors)

    def chunk_stats(self) -> ChunkStats:
        """F, G and the achieved ratio of these bytes (detached), as `chunk_stats` gives them."""
        n = self.real_bytes.clamp(min=1)
        F_ = (self.boundaries / n).detach()
        return ChunkStats(F=F_, G=(self.boundary_prob / n).detach(), ratio=1.0 / F_.clamp(min=1e-9))


class ColumnAttention(nn.Module):
    """Pre-LN bidirectional self-attention block over column vectors, masked by column_mask."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, column_mask: torch.Tensor) -> torch.Tensor:
        """x: (B, C, D); column_mask: (B, C) bool. Returns (B, C, D)."""
        B, C, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, C, self.n_head, D // self.n_head).transpose(1, 2) for t in (q, k, v))
        # a column attends to every real column, and to itself (so padded rows never see an
        # all-masked row, which would give NaN)
        eye = torch.eye(C, dtype=torch.bool, device=x.device)
        allowed = (column_mask[:, None, :] | eye)[:, None]  # (B, 1, C, C)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, h, C, D/h)
        x = x + self.proj(y.transpose(1, 2).reshape(B, C, D))
        return x + self.mlp(self.ln2(x))


class AegirModel(nn.Module):
    """Byte-level hierarchical column annotator.

    embedding (vocab_size rows) [+ hashed byte n-gram embeddings] → encoder RWKVStack over bytes → RoutingModule → chunk → main
    RWKVStack over chunks (initial state in, final state out: the Phase 3 fusion seam) →
    dechunk · STE(confidence) + residual_proj(encoder output) → decoder RWKVStack over bytes →
    column pooling → column-position embedding + context attention → CTA head, CPA head.

    Pooling under causality: column c is pooled from the decoder output at its COLUMN_SEP byte
    (position `end` of its span, which has read the whole column) concatenated with the mean over
    [start, end]; never at the span start, which has read none of the column.

    Whole-table context: a causal reader sees no later columns, so after pooling `context_layers`
    blocks of bidirectional self-attention run over the table's column vectors (masked by
    column_mask, with a learned column-position embedding), giving every column every other
    column. In Phase 3 the fused specialist states, which have read the whole table, add more
    through `main_initial_state`.

    Chunk boundaries are forced at every COLUMN_SEP (config.force_column_boundaries), so each
    column's summary byte is a chunk start that the main network reads.

    Byte n-grams: with `ngram_max` ≥ 2, each byte's embedding is summed with embeddings of the
    hashed 2…ngram_max-grams ending at it (`aegir.model.ngram`, after BLT), so the encoder starts
    from the char n-grams a TF-IDF column classifier reads instead of having to learn them.

    Departures from H-Net: one width for all stages (H-Net widens the main network); the residual
    projection is zero-initialised as in H-Net, so at start the decoder reads the main network.
    """

    def __init__(self, config: AegirConfig):
        super().__init__()
        self.config = config
        self.reference = False  # see set_reference
        D, K, cs, fm = config.d_model, config.head_size, config.wkv_chunk_size, config.ffn_mult
        self.embed = nn.Embedding(config.vocab_size, D)
        nn.init.uniform_(self.embed.weight, -1e-4, 1e-4)  # RWKV's small embedding init + ln0
        self.ngram_embed = (HashedNgramEmbedding(config.ngram_max, config.ngram_buckets, D)
                            if config.ngram_max >= 2 else None)
        self.ln_embed = nn.LayerNorm(D)
        self.drop = nn.Dropout(config.dropout)
        self.encoder = RWKVStack(config.encoder_layers, D, K, cs, fm, config.wkv_kernel)
        self.routing = RoutingModule(D)
        self.main = RWKVStack(config.main_layers, D, K, cs, fm, config.wkv_kernel)
        self.residual_proj = nn.Linear(D, D)
        nn.init.zeros_(self.residual_proj.weight)
        nn.init.zeros_(self.residual_proj.bias)
        self.decoder = RWKVStack(config.decoder_layers, D, K, cs, fm, config.wkv_kernel)
        self.pool_proj = nn.Linear(2 * D, D)
        self.column_position = nn.Embedding(config.max_columns, D)
        nn.init.normal_(self.column_position.weight, std=0.02)
        self.context = nn.ModuleList(ColumnAttention(D, config.context_heads)
                                     for _ in range(config.context_layers))
        self.ln_columns = nn.LayerNorm(D)
        self.cta_head = nn.Linear(D, config.n_cta)
        self.cpa_head = nn.Sequential(nn.Linear(3 * D, D), nn.GELU(), nn.Linear(D, config.n_cpa))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def num_dense_parameters(self) -> int:
        """Parameters that take part in products: all but the hashed n-gram rows and the byte
        embedding, which are looked up (throughput bounds, the scale ladder)."""
        looked_up = {id(p) for p in (*self.ngram_embed.parameters(), *self.embed.parameters())}
        return sum(p.numel() for p in self.parameters() if id(p) not in looked_up)

    def set_naive_wkv(self, naive: bool) -> None:
        """Run every recurrence through the reference loop (tests) or the chunked form."""
        for stack in (self.encoder, self.main, self.decoder):
            stack.set_naive_wkv(naive)

    def set_wkv_kernel(self, kernel: bool) -> None:
        """Run every recurrence on the CPU kernel where it applies (True) or the chunked form;
        the config, which checkpoints save, says so too."""
        self.config = dataclasses.replace(self.config, wkv_kernel=kernel)
        for stack in (self.encoder, self.main, self.decoder):
            stack.set_wkv_kernel(kernel)

    def set_reference(self, reference: bool) -> None:
        """Run every op with a fast path through its literal reference instead (tests; slow): the
        wkv loop, RWKV-7's decay formula and nn.GroupNorm in every layer (`aegir.model.rwkv`)
        and the sequential dechunk EMA."""
        self.reference = reference
        for stack in (self.encoder, self.main, self.decoder):
            stack.set_reference(reference)

    def _ema(self, chunk_out: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The dechunk EMA: the reference loop, the CPU kernel's (with `wkv_kernel`, where it takes
        the input) or the closed form."""
        if self.reference:
            return ema_sequential
        if self.config.wkv_kernel and wkv_cpu.takes_ema(chunk_out):
            return wkv_cpu.ema_sequential_cpu
        return ema_parallel

    # --------------------------------------------------------------------------- stages

    def encode(self, batch: Batch) -> EncoderOutput:
        """Embedding → encoder → routing. hidden: (B, T, D)."""
        x = self.embed(batch.byte_ids)  # (B, T, D)
        if self.ngram_embed is not None:
            x = x + self.ngram_embed(batch.byte_ids)
        x = self.drop(self.ln_embed(x))
        hidden, _ = self.encoder(x, batch.byte_mask)
        forced = None
        if self.config.force_column_boundaries:
            forced = (batch.byte_ids == COLUMN_SEP) & batch.byte_mask
        return EncoderOutput(hidden, self.routing(hidden, batch.byte_mask, forced))

    def routing_hidden(self, batch: Batch, encoded: EncoderOutput | None = None) -> torch.Tensor:
        """Masked mean of the encoder output over real bytes: (B, D), the router's input."""
        encoded = self.encode(batch) if encoded is None else encoded
        m = batch.byte_mask[..., None].to(encoded.hidden.dtype)
        return (encoded.hidden * m).sum(1) / m.sum(1).clamp(min=1)

    def forward(self, batch: Batch, main_initial_state: list[LayerState] | None = None) -> AegirOutput:
        return self.forward_from_encoded(batch, self.encode(batch), main_initial_state)

    def byte_stream(self, batch: Batch, encoded: EncoderOutput,
                    main_initial_state: list[LayerState] | None = None) -> tuple[torch.Tensor, list[LayerState]]:
        """After `encode`: chunk → main network (from `main_initial_state`) → dechunk → decoder.
        Returns the decoder's output per byte, (B, T, D) — what column pooling reads, and what a
        Phase 3 specialist hands over beside its state (`aegir.orchestrator.fusion`) — and the
        main network's final state per layer."""
        routing, h_enc = encoded.routing, encoded.hidden
        chunk_h, chunk_mask = chunk(h_enc, routing.boundary_mask)  # (B, L, D), (B, L)
        chunk_out, main_final_state = self.main(chunk_h, chunk_mask, main_initial_state)
        h = dechunk(chunk_out, routing.boundary_mask, routing.boundary_prob, chunk_mask,
                    self._ema(chunk_out))  # (B, T, D)
        h = h * straight_through_ones(routing.selected_prob)[..., None] + self.residual_proj(h_enc)
        h, _ = self.decoder(h, batch.byte_mask)  # (B, T, D)
        return h, main_final_state

    def forward_from_encoded(self, batch: Batch, encoded: EncoderOutput,
                             main_initial_state: list[LayerState] | None = None,
                             stream_addend: torch.Tensor | None = None,
                             column_mix: Callable[[torch.Tensor], torch.Tensor] | None = None) -> AegirOutput:
        """The rest of the forward after `encode`, from a given main-network initial state;
        `stream_addend` (B, T, D), when given, is added to the decoder's output before the
        columns are pooled (Phase 3's stream seam); `column_mix`, when given, maps the column
        vectors (B, C, D) just before the heads (Phase 3's column seam)."""
        routing = encoded.routing
        h, main_final_state = self.byte_stream(batch, encoded, main_initial_state)
        if stream_addend is not None:
            h = h + stream_addend
        cta_logits, cpa_logits, columns = self.label_logits(batch, h, column_mix)
        return AegirOutput(
            cta_logits=cta_logits,
            cpa_logits=cpa_logits,
            column_vectors=columns,
            ratio_loss=ratio_loss(routing.boundary_mask, routing.boundary_prob,
                                  self.config.target_compression, batch.byte_mask),
            chunk_stats=chunk_stats(routing.boundary_mask, routing.boundary_prob, batch.byte_mask),
            main_final_state=main_final_state,
            routing=routing,
        )

    def label_logits(self, batch: Batch, h: torch.Tensor,
                     column_mix: Callable[[torch.Tensor], torch.Tensor] | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """From the decoder's output per byte h (B, T, D) (`byte_stream`): column pooling →
        column-position embedding + context attention → (`column_mix`, when given) → heads.
        Returns CTA logits (B, C, n_cta), CPA logits (B, C, n_cpa) and the column vectors (B, C, D)."""
        columns = self.pool_columns(h, batch.column_spans, batch.column_mask)  # (B, C, D)
        C = columns.shape[1]
        position = torch.arange(C, device=h.device).clamp(max=self.config.max_columns - 1)
        columns = columns + self.column_position(position)[None]
        for block in self.context:
            columns = block(columns, batch.column_mask)
        columns = self.ln_columns(columns)
        if column_mix is not None:
            columns = column_mix(columns)
        columns_in = self.drop(columns)

        subject = columns_in[:, :1].expand_as(columns_in)  # (B, C, D)
        pair = torch.cat([subject, columns_in, subject * columns_in], dim=-1)  # (B, C, 3D)
        return self.cta_head(columns_in), self.cpa_head(pair), columns

    def pool_columns(self, h: torch.Tensor, column_spans: torch.Tensor,
                     column_mask: torch.Tensor) -> torch.Tensor:
        """h: (B, T, D); column_spans: (B, C, 2) [start, end) with COLUMN_SEP at `end`.

        Returns (B, C, D): pool_proj([h at end, mean of h over start..end inclusive]); zero on
        padded columns.
        """
        B, T, D = h.shape
        start, end = column_spans[..., 0], column_spans[..., 1].clamp(0, T - 1)  # (B, C)
        at_end = torch.gather(h, 1, end[..., None].expand(-1, -1, D))  # (B, C, D)
        t = torch.arange(T, device=h.device)
        span = (t >= start[..., None]) & (t <= end[..., None]) & column_mask[..., None]  # (B, C, T)
        span = span.to(h.dtype)
        mean = (span @ h) / span.sum(-1, keepdim=True).clamp(min=1)  # (B, C, D)
        pooled = self.pool_proj(torch.cat([at_end, mean], dim=-1))
        return pooled * column_mask[..., None]

    # --------------------------------------------------------------------------- loss

    def loss(self, batch: Batch, output: AegirOutput,
             label_smoothing: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """CE over labelled columns (CTA) and labelled pairs (CPA) + ratio_loss_weight · ratio
        loss. A batch with no label of a kind contributes 0 for it (not NaN). Parts are detached.
        `label_smoothing` ε: each CE target is (1 − ε) on the gold class + ε spread over all."""
        return self.loss_of_sums(self.loss_sums(batch, output, label_smoothing))

    def loss_sums(self, batch: Batch, output: AegirOutput, label_smoothing: float = 0.0) -> LossSums:
        """The sums and counts the loss is made of (see `LossSums`); `label_smoothing` as in `loss`."""

        def nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            labels = labels.flatten()
            total = F.cross_entropy(logits.flatten(0, 1).float(), labels, ignore_index=IGNORE_INDEX,
                                    reduction="sum", label_smoothing=label_smoothing)
            return total, (labels != IGNORE_INDEX).sum()

        if output.routing is None:
            raise ValueError("AegirModel.loss: the output carries no routing (made by AegirModel.forward, it does)")
        cta_nll, cta_count = nll(output.cta_logits, batch.cta_labels)
        cpa_nll, cpa_count = nll(output.cpa_logits, batch.cpa_labels)
        routing, mask = output.routing, batch.byte_mask
        return LossSums(
            cta_nll=cta_nll, cta_count=cta_count, cpa_nll=cpa_nll, cpa_count=cpa_count,
            boundaries=(routing.boundary_mask & mask).sum(),
            boundary_prob=torch.where(mask, routing.boundary_prob, torch.zeros_like(routing.boundary_prob)).sum(),
            real_bytes=mask.sum(),
        )

    def loss_of_sums(self, sums: LossSums) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss and its detached parts from `LossSums` (of a batch, or added over shards)."""
        cta = sums.cta_nll / sums.cta_count.clamp(min=1)
        cpa = sums.cpa_nll / sums.cpa_count.clamp(min=1)
        n = sums.real_bytes.clamp(min=1)
        ratio = ratio_loss_of(sums.boundaries / n, sums.boundary_prob / n, self.config.target_compression)
        total = cta + cpa + self.config.ratio_loss_weight * ratio
        parts = {"cta": cta.detach(), "cpa": cpa.detach(), "ratio": ratio.detach(), "total": total.detach()}
        return total, parts

    def config_dict(self) -> dict:
        return asdict(self.config)
