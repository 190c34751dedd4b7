"""Atomic writes: a reader (or DVC) never sees a half-written file or directory.

Everything is written beside its destination under a temporary name and moved into place
with `os.replace`, which is atomic on one filesystem. A failure leaves the old content (or
nothing) and removes the temporary. Temporaries are created private (mkstemp/mkdtemp: 0600,
0700); what is moved into place gets the usual permissions of a new file or directory under
the process umask, as if written directly.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    """Deterministic JSON (sorted keys, fixed indent, trailing newline)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


@contextmanager
def staged_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces `path` when the block succeeds.

    On an exception the temporary directory is removed and `path` is left as it was. An
    existing `path` is first moved aside (under a fresh name) and removed after the swap, so a
    reader sees the old directory, the new one, or, if the process dies between the two
    renames, none: never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if path.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, aside / path.name)
            os.replace(tmp, path)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
