"""Errors that name the file (and line) at fault, so a user can fix their input."""

from __future__ import annotations

from pathlib import Path


class AegirError(Exception):
    """Base class for every error Aegir raises on purpose (bad input, bad params)."""


class DataError(AegirError):
    """Malformed, truncated or inconsistent input data.

    `path` names the file, `line` (1-based) the line inside it where there is one.
    """

    def __init__(self, path: str | Path, problem: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # pickled whole, so it crosses from a worker process intact
        return type(self), (self.path, self.problem, self.line)


# Appended to "not found" errors about a path the pipeline writes (data/, models/, results/).
PIPELINE_HINT = "; it is a pipeline output: run the pipeline first (`dvc repro`, or `snakemake --cores all all`)"
PIPELINE_OUTPUTS = ("data", "models", "results")


def is_pipeline_output(path: str | Path) -> bool:
    """Is `path` (relative to the working directory) under one of the pipeline's output folders?"""
    parts = Path(path).parts
    return bool(parts) and not Path(path).is_absolute() and parts[0] in PIPELINE_OUTPUTS


class ConfigError(AegirError):
    """An unknown, mistyped or out-of-range key in params.yaml."""


def check_config(condition: bool, key: str, problem: str) -> None:
    """Raise `ConfigError("<key>: <problem>")` unless `condition` holds (params validation)."""
    if not condition:
        raise ConfigError(f"{key}: {problem}")
