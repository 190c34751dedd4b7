"""The reading a checkpoint records: how the stage that scored it read each table.

A checkpoint's config.json keeps the `reading` settings it was scored with (column groups, row
views, joint decoding weights) and, for the joint decoding, the label repeat counts of its
training tables (`aegir.eval.joint`). `aegir annotate` / `aegir evaluate` (`aegir.inference`)
and Phase 4 (`aegir.swarm.model`, which starts from Phase 3's reading) read a table the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aegir.config import ReadingConfig, build
from aegir.errors import DataError
from aegir.eval.joint import repeats_of, table_decoder


def recorded_reading(config: dict, checkpoint: Path) -> tuple[ReadingConfig, Callable | None]:
    """(the `reading` settings, the joint decoding or None) a checkpoint's config.json records;
    one whole read per table and each column's argmax when it predates them."""
    reading = build(ReadingConfig, config.get("params", {}).get("reading", {}), f"{checkpoint}/config.json: reading")
    try:
        decode = table_decoder(repeats_of(config, f"{checkpoint}/config.json"), reading.joint_weights, "reading")
    except ValueError as exc:
        raise DataError(Path(checkpoint) / "config.json", str(exc)) from None
    return reading, decode
