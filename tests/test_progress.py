"""Progress bars write whole lines off a terminal (DVC's and Snakemake's logs), tqdm on one."""

from __future__ import annotations

import io

from aegir import progress as progress_module
from aegir.progress import progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_every_update_is_its_own_line(monkeypatch):
    monkeypatch.setattr(progress_module, "LOG_INTERVAL_S", 0.0)
    log = io.StringIO()
    bar = progress(total=500, stream=log, desc="phase1 primary", unit="step", mininterval=0.0)
    for _ in range(500):
        bar.update(1)
    bar.set_postfix(loss="0.123")
    bar.close()
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) > 10 and all(line.startswith("phase1 primary: ") for line in lines)
    assert max(len(line) for line in lines) < 200
    assert lines[-1].startswith("phase1 primary: 500/500 step") and "loss=0.123" in lines[-1]


def test_off_a_terminal_updates_are_rate_limited():
    log = io.StringIO()
    for _ in progress(range(10_000), stream=log, desc="serialize", unit="table"):
        pass
    assert len(log.getvalue().splitlines()) <= 3  # start, end (and its final copy): not one per item


def test_on_a_terminal_it_is_tqdm_redrawing_one_line():
    term = FakeTerminal()
    for _ in progress(range(50), stream=term, desc="x", mininterval=0.0):
        pass
    assert "\r" in term.getvalue()
