"""Progress bars that read well in a terminal and in a log file.

In a terminal, tqdm redraws one line with carriage returns. Written to a file or a pipe (the
logs of `dvc repro`, Snakemake's `logs/`, CI) those redraws pile up into one line of tens of
kilobytes. `progress` keeps tqdm for terminals; elsewhere it writes one complete line per
update, at most every `LOG_INTERVAL_S` seconds (and the final state when the bar closes).
"""

from __future__ import annotations

import sys
from typing import IO, Any

from tqdm import tqdm

LOG_INTERVAL_S = 30.0  # seconds between progress lines when the output is not a terminal


class _LineWriter:
    """A file for tqdm that turns each carriage-return redraw into one line of its own."""

    def __init__(self, stream: IO[str]):
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress(iterable: Any = None, *, stream: IO[str] | None = None, **kwargs: Any) -> tqdm:
    """`tqdm(iterable, **kwargs)` on stderr (or `stream`), one line per update off a terminal.

    Off a terminal the bar is drawn without the animated part (`ncols` 0 would hide it: a
    fixed, plain format is used instead) and `mininterval` is at least `LOG_INTERVAL_S`.
    """
    stream = stream or sys.stderr
    if _is_terminal(stream):
        return tqdm(iterable, file=stream, **kwargs)
    kwargs["mininterval"] = max(float(kwargs.get("mininterval", 0.0)), LOG_INTERVAL_S)
    kwargs.setdefault("bar_format", "{desc}: {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}, {rate_fmt}]{postfix}")
    kwargs["leave"] = True  # a log keeps the final line of every bar
    return tqdm(iterable, file=_LineWriter(stream), dynamic_ncols=False, **kwargs)
