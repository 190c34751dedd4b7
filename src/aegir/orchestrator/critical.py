"""Critical steps: the cost of a parallel computation as its longest chain of dependent work.

Kimi K2.5 measures an agent swarm not by total work but by critical steps: for each stage of
the orchestration, the main agent's steps plus the slowest of the sub-agents it waits for,

    critical_steps = Σ_stages ( S_main + max_i S_sub,i )        total_steps = Σ_stages ( S_main + Σ_i S_sub,i )

Here a step is one **sequential layer-step**: one layer applied to a whole sequence (a
recurrent layer over all its positions in the chunked form, or an attention block over all
columns) — the unit that cannot be parallelised away. Embeddings, pooling and heads are not
counted. The general form is the longest path through a dependency graph of nodes, each with
its own step count (`longest_path`); `stage_graph` builds that graph from stages, and the
Phase 3 orchestrator's graph is primary prefix → parallel specialists → primary rest
(`orchestrator_stages`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One stage: the main agent's own steps, then sub-agents running in parallel that the next
    stage waits for. main: S_main ≥ 0; subs: S_sub,i ≥ 0 of each sub-agent (may be empty)."""

    main: int
    subs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.main < 0 or any(s < 0 for s in self.subs):
            raise ValueError(f"step counts must be ≥ 0, got main={self.main}, subs={self.subs}")


def critical_steps(stages: Sequence[Stage]) -> int:
    """Σ over stages of (S_main + max_i S_sub,i)."""
    return sum(stage.main + max(stage.subs, default=0) for stage in stages)


def total_steps(stages: Sequence[Stage]) -> int:
    """Σ over stages of (S_main + Σ_i S_sub,i): all the work, as if done one after another."""
    return sum(stage.main + sum(stage.subs) for stage in stages)


def longest_path(steps: Mapping[str, int], after: Mapping[str, Sequence[str]]) -> int:
    """Steps on the longest dependency chain of a DAG.

    steps: node → its step count; after: node → the nodes it waits for (missing = none).
    A cycle or an unknown node is a ValueError.
    """
    finish: dict[str, int] = {}
    visiting: set[str] = set()

    def done_at(node: str) -> int:
        if node in finish:
            return finish[node]
        if node not in steps:
            raise ValueError(f"unknown node {node!r}")
        if node in visiting:
            raise ValueError(f"dependency cycle through {node!r}")
        visiting.add(node)
        start = max((done_at(dep) for dep in after.get(node, ())), default=0)
        visiting.discard(node)
        finish[node] = start + steps[node]
        return finish[node]

    return max((done_at(node) for node in steps), default=0)


def stage_graph(stages: Sequence[Stage]) -> tuple[dict[str, int], dict[str, list[str]]]:
    """The DAG of a stage list: stage k's main node waits for stage k−1's main node and all of
    its sub-agents; stage k's sub-agents wait for stage k's main node."""
    steps: dict[str, int] = {}
    after: dict[str, list[str]] = {}
    previous: list[str] = []
    for k, stage in enumerate(stages):
        main = f"{k}/main"
        steps[main], after[main] = stage.main, previous
        subs = [f"{k}/sub{i}" for i in range(len(stage.subs))]
        for name, count in zip(subs, stage.subs):
            steps[name], after[name] = count, [main]
        previous = [main, *subs]
    return steps, after


def model_read_steps(encoder_layers: int, main_layers: int) -> int:
    """A specialist's read: its encoder, then its main network (no decoder, no heads)."""
    return encoder_layers + main_layers


def orchestrator_stages(primary_config, specialist_configs: Sequence, active: Sequence[bool]) -> list[Stage]:
    """Phase 3's graph for one table: the primary's prefix (encoder), the activated specialists'
    reads in parallel, then the primary's rest (main network, decoder, column attention)."""
    p = primary_config
    subs = tuple(model_read_steps(s.encoder_layers, s.main_layers)
                 for s, on in zip(specialist_configs, active) if on)
    return [Stage(main=p.encoder_layers, subs=subs),
            Stage(main=p.main_layers + p.decoder_layers + p.context_layers)]
