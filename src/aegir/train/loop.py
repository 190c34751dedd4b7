"""The log / validate / checkpoint steps that every training loop takes after an optimizer step.

A loop keeps its own order visible: it builds its figures, then asks a `TrainingLoop` to log
them, to validate and to save its resume state when those are due. Phase 1
(`aegir.train.supervised.fit`) and Phase 3 (`aegir.rl.parl_training.train_run`) use it; a loop
in one process with no validation (Phase 4's) passes `accelerator=None` and `eval_every=0`:

    loop = TrainingLoop(accelerator, live, total_steps, cfg.log_every, cfg.eval_every,
                        cfg.checkpoint_every, save=lambda progress: save_state(...), validate=...)
    for step in range(start, total_steps):
        ...  # forward, backward, optimizer step
        done = step + 1
        window.add(figures)                       # means over the log window …
        if loop.log_means(done, window):          # … logged every `log_every` steps
            bar.set_postfix(...)
        loop.after_step(done, TrainingProgress(done, 0, 0))  # validation, then the resume state
    if start < total_steps:
        loop.log_valid(total_steps, loop.validate())  # the curve's last point
    loop.wait()
    if loop.is_main_process:
        loop.save_final(TrainingProgress(total_steps, 0, 0))
        live.end()

(Phase 1 logs the figures of the log step itself, not window means: `if loop.logs_at(step):`,
its reduction over processes, `loop.log(step, figures)`.)

Collectives: `validate` runs on every process (it may gather predictions), and
`after_step`'s checkpoint waits for every process before the main one saves; every process
must therefore call `after_step` at every step. DVCLive (`live`) exists on the main process
only, None elsewhere: logging there is a no-op. With `accelerator` None (one process, as
Phase 4 runs) there is nothing to wait for and the process is the main one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accelerate import Accelerator

from aegir.train.resume import TrainingProgress

if TYPE_CHECKING:
    from dvclive import Live


class WindowMeans:
    """Means of logged values over a window of steps (one curve point per window)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.sums[key] += value
            self.counts[key] += 1

    def pop(self) -> dict[str, float]:
        out = {key: self.sums[key] / self.counts[key] for key in self.sums}
        self.sums.clear()
        self.counts.clear()
        return out


@dataclass
class TrainingLoop:
    """When a training loop logs, validates and saves its state, and how (module docstring)."""

    accelerator: Accelerator | None  # None: one process, nothing to wait for
    live: Live | None  # the curves, on the main process; None on the others
    total_steps: int  # the run's last step: no mid-run validation or checkpoint there
    log_every: int  # a curve point every this many steps
    eval_every: int  # validation every this many steps (0: only the final point)
    checkpoint_every: int  # resume state every this many steps (0: only the final one)
    save: Callable[[TrainingProgress], None]  # writes the resume state with the curves' snapshot
    validate: Callable[[], dict[str, dict]] | None = None  # F1 per task ("cta", "cpa"), on every process

    @property
    def is_main_process(self) -> bool:
        return self.accelerator is None or self.accelerator.is_main_process

    def wait(self) -> None:
        """Wait for every process (a collective; nothing with one process and no accelerator)."""
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()

    def logs_at(self, step: int) -> bool:
        """Whether `step` (optimizer steps done) is a log step."""
        return step % self.log_every == 0

    def log(self, step: int, figures: dict[str, float]) -> None:
        """One curve point of each figure at `step`, in the dict's order (main process only)."""
        if self.live is not None:
            self.live.step = step
            for name, value in figures.items():
                self.live.log_metric(name, value)

    def log_means(self, step: int, window: WindowMeans) -> bool:
        """At a log step, on the main process: the window's means as one curve point each, and
        the window emptied; True when it logged."""
        if self.live is None or not self.logs_at(step):
            return False
        self.log(step, window.pop())
        return True

    def log_valid(self, step: int, scores: dict[str, dict]) -> None:
        """The validation curves' point at `step`: micro and macro F1 per task."""
        if self.live is not None:
            self.live.step = step
            for task in ("cta", "cpa"):
                self.live.log_metric(f"valid/{task}_micro_f1", scores[task]["micro_f1"])
                self.live.log_metric(f"valid/{task}_macro_f1", scores[task]["macro_f1"])

    def after_step(self, step: int, progress: TrainingProgress) -> None:
        """After optimizer step `step` (counted from 1), on every process: validate when due,
        then save the resume state `progress` when due (neither at the run's last step, which
        the caller closes with its final point and `save_final`)."""
        if self.eval_every and step % self.eval_every == 0 and step < self.total_steps:
            self.log_valid(step, self.validate())
        if self.checkpoint_every and step % self.checkpoint_every == 0 and step < self.total_steps:
            self.wait()
            if self.is_main_process:
                self.live.make_summary()  # the snapshot holds the curves and their summary
                self.save(progress)

    def save_final(self, progress: TrainingProgress) -> None:
        """On the main process, after the run's last curve point: the summary, then the final
        state, so that "state saved" implies "logged"."""
        self.live.make_summary()
        self.save(progress)
