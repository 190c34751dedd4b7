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
(`orchestrator_graph`).
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
    """A specialist's read of its state: its encoder, then its main network."""
    return encoder_layers + main_layers


def specialist_read_steps(config, stream: bool, columns: bool = False) -> tuple[int, int]:
    """(state steps, stream steps) of a specialist's read: its encoder and main network, then,
    with the stream seam, its decoder (0 without), and with the column seam its column
    attention too (counted as done before the primary's own column attention starts: an upper
    bound, since the mix joins only before the heads)."""
    stream_steps = (config.decoder_layers + (config.context_layers if columns else 0)) if stream else 0
    return model_read_steps(config.encoder_layers, config.main_layers), stream_steps


def labels_read_steps(config) -> int:
    """A model's whole read of a table up to its labels: encoder, main network, decoder, column
    attention (what the subject rule's reader runs before routing,
    `aegir.orchestrator.model.SwarmOrchestrator.subject_routing`)."""
    return config.encoder_layers + config.main_layers + config.decoder_layers + config.context_layers


def phase3_graph(primary_config, read_steps: Sequence[tuple[int, int]],
                 subject: int = 0) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Phase 3's dependency graph for one table, in sequential layer-steps:

        prefix (primary encoder) ─► each activated specialist's state read ─► primary main + decoder ─► columns
        (subject rule's reader) ─┘                  └─► its decoder (stream seam) ───────────────────────┘

    read_steps: (state steps, stream steps) of each activated specialist
    (`specialist_read_steps`). The primary's main network waits for the fused state; its column
    attention waits for its decoder and for the specialists' byte streams, which their decoders
    write while the primary's main network and decoder run. subject: the steps of the subject
    rule's read (`labels_read_steps` of its reader; 0 without the rule): it starts with the
    prefix, and the routing (so every read, and the primary's rest, which starts from the fused
    state) waits for it. Phase 4's graph grows from this one (`aegir.swarm.spawn.swarm_graph`)."""
    p = primary_config
    if subject < 0:
        raise ValueError(f"subject steps must be ≥ 0, got {subject}")
    steps = {"prefix": p.encoder_layers, "rest": p.main_layers + p.decoder_layers, "columns": p.context_layers}
    after: dict[str, list[str]] = {"rest": ["prefix"], "columns": ["rest"]}
    routed = ["prefix"]
    if subject:
        steps["subject"] = subject
        after["rest"].append("subject")
        routed = ["prefix", "subject"]
    for i, (read, stream_steps) in enumerate(read_steps):
        steps[f"read{i}"], after[f"read{i}"] = read, list(routed)
        after["rest"].append(f"read{i}")
        if stream_steps:
            steps[f"stream{i}"], after[f"stream{i}"] = stream_steps, [f"read{i}"]
            after["columns"].append(f"stream{i}")
    return steps, after


def orchestrator_graph(primary_config, specialist_configs: Sequence, active: Sequence[bool],
                       stream: bool = False, columns: bool = False,
                       subject: int = 0) -> tuple[dict[str, int], dict[str, list[str]]]:
    """`phase3_graph` of the specialists `active` marks, read with or without the stream (and
    column) seam, and with the subject rule's read of `subject` steps (0: no rule)."""
    return phase3_graph(primary_config, [specialist_read_steps(config, stream, columns)
                                         for config, on in zip(specialist_configs, active) if on], subject)


def orchestrator_steps(primary_config, specialist_configs: Sequence, active: Sequence[bool],
                       stream: bool = False, columns: bool = False, subject: int = 0) -> tuple[int, int]:
    """(critical steps, total steps) of `orchestrator_graph`."""
    steps, after = orchestrator_graph(primary_config, specialist_configs, active, stream, columns, subject)
    return longest_path(steps, after), sum(steps.values())
