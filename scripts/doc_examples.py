"""Run the `aegir` commands shown in the docs and put their output under them, so that an example
shows what the checkpoints of the current `dvc.lock` print, never a typed or stale copy.

    python scripts/doc_examples.py            # rerun every example, rewrite README.md and docs/annotate.md
    python scripts/doc_examples.py --check    # exit 1 (naming each) when an example's output differs
    python scripts/doc_examples.py FILE …     # only these markdown files

An example is a fenced block whose first line is `$ aegir …`: the command, run from the
repository root (`--cwd`) with the `aegir` beside this Python, then what it printed: stderr's
lines first (the checkpoint chosen), then stdout's. Where a block leaves out the header of the
output (its lines before the first empty one: the checkpoint chosen, its fingerprint, the
confidences' map), so does its new output. The prose around an example is not touched: what it
says about the labels must be read against the new output by whoever reruns it. A command that
fails stops the script, naming the file and line, before any file is written; each file is
written atomically.
docs/history.md keeps earlier runs' outputs and is not rerun.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = (ROOT / "README.md", ROOT / "docs/annotate.md")
FENCE = "```"


def examples(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line indices of each example block's body: lines[first] is `$ aegir …`,
    lines[end] the closing fence."""
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith(FENCE) and i + 1 < len(lines) and lines[i + 1].startswith("$ aegir "):
            end = i + 2
            while end < len(lines) and not lines[end].startswith(FENCE):
                end += 1
            found.append((i + 1, end))
            i = end
        i += 1
    return found


def has_header(body: list[str]) -> bool:
    """Whether a block's output keeps the lines before the first empty one (the checkpoint's)."""
    return any(line.startswith(("aegir: using", "checkpoint: ")) for line in body)


def run_example(command: str, cwd: Path, where: str) -> list[str]:
    """The lines `command` prints: stderr's, then stdout's."""
    argv = shlex.split(command)
    argv[0] = str(Path(sys.executable).parent / "aegir")
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{where}: `{command}` failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return proc.stderr.splitlines() + proc.stdout.splitlines()


def without_header(output: list[str]) -> list[str]:
    """`output` from its first line after the first empty one (all of it if none is empty)."""
    return output[output.index("") + 1:] if "" in output else output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="markdown files (default: README.md, docs/annotate.md)")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when an output differs")
    parser.add_argument("--cwd", type=Path, default=ROOT, help="where the commands run (default: the repository)")
    args = parser.parse_args(argv)
    rewritten, stale = {}, []
    for path in args.files or FILES:
        if not path.is_file():
            raise SystemExit(f"{path}: not found")
        lines = path.read_text(encoding="utf-8").splitlines()
        out, last = [], 0
        for first, end in examples(lines):
            where = f"{path}:{first + 1}"
            body = lines[first + 1:end]
            output = run_example(lines[first][2:], args.cwd, where)
            new = output if has_header(body) else without_header(output)
            if new != body:
                stale.append(where)
            out += lines[last:first + 1] + new
            last = end
            print(f"{where}: {lines[first]} ({'changed' if new != body else 'the same'})")
        rewritten[path] = out + lines[last:]
    if args.check:
        for where in stale:
            print(f"{where}: the example's output differs from what the command prints now", file=sys.stderr)
        return 1 if stale else 0
    for path, lines in rewritten.items():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for path in rewritten:
        path.with_suffix(path.suffix + ".tmp").replace(path)
    print(f"{len(stale)} example(s) rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
