"""What a supervised run is built from: the model config of a preset and the optimizer.

Phase 1 (`aegir.eval.phase1`) builds every agent with them; the command line (`aegir.cli`) and
the benchmarks build the same models and optimizers.
"""

from __future__ import annotations

import torch

from aegir.config import Params, Phase1Config, build
from aegir.errors import ConfigError
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.network import AegirConfig


def model_config(params: Params, preset: str) -> AegirConfig:
    """The `AegirConfig` of a preset, label-set sizes from the fixed vocabularies."""
    if preset not in params.presets:
        raise ConfigError(f"presets.{preset}: no such preset (known: {', '.join(params.presets)})")
    fields = {**params.presets[preset], "n_cta": len(cta_vocab()), "n_cpa": len(cpa_vocab())}
    return build(AegirConfig, fields, f"presets.{preset}")


def make_optimizer(model: torch.nn.Module, cfg: Phase1Config) -> torch.optim.AdamW:
    """AdamW; matrices decay, vectors (norms, biases) and embeddings do not."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (decay if param.dim() >= 2 and "embed" not in name else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8,
                             fused=True)
