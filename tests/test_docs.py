"""The README and docs/: a short README that starts with the two set-up commands, and links that
lead somewhere (every relative link names an existing file, and a `#anchor` an existing heading)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def without_code_blocks(text: str) -> str:
    return re.sub(r"(?ms)^\s*```.*?^\s*```[^\n]*$", "", text)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file: lower case, punctuation dropped,
    spaces to hyphens, a repeated one suffixed -1, -2, …"""
    seen: dict[str, int] = {}
    out = set()
    for line in without_code_blocks(path.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    links = LINK.findall(without_code_blocks(path.read_text()))
    return [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:", link)]


def test_readme_is_short_and_starts_with_the_two_set_up_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    first_block = re.search(r"(?s)```bash\n(.*?)```", text)
    assert first_block and text.index("```") == first_block.start()
    before = text[: first_block.start()]
    assert [line for line in before.splitlines() if line.startswith("#")] == ["# Aegir"]
    commands = first_block.group(1).splitlines()
    setup = "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.lock -e . && "
    assert commands == [setup + "dvc repro", setup + "pytest -q"]
    assert "pytest -q" in (ROOT / ".ci" / "run").read_text().splitlines()  # what CI runs


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file_and_heading(path):
    assert PAGES, "docs/ holds no pages"
    broken = []
    for link in relative_links(path):
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link}: no {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{link}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}:\n" + "\n".join(broken)


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_line_is_longer_than_300_characters(path):
    long = [n for n, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 300]
    assert not long, f"{path.relative_to(ROOT)}: lines {long} are over 300 characters"


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / link.partition("#")[0]).resolve() for link in relative_links(README)}
    assert {page.resolve() for page in PAGES} <= linked


def test_the_anchors_follow_github():
    page = ROOT / "docs" / "experiments.md"
    assert "joint-decoding" in anchors(page)
    assert "λ1--02-early-in-training" in anchors(page)
    assert "the-cpu-kernels-on-avx2" in anchors(ROOT / "docs" / "benchmarks.md")


def test_readme_results_script_copies_the_reports_table(tmp_path):
    """scripts/readme_results.py: --check fails while the README's table differs from the
    report's, the rewrite copies the report's table and nothing else, and --check then passes."""
    import subprocess
    import sys

    report = tmp_path / "report.md"
    report.write_text("# r\n\n## F1 per split\n\ntext\n\n| a | b |\n|---|---|\n| 1 | **2** |\n| 3 | 4 |\n\n## Next\n"
                      "| x |\n|---|\n| y |\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text("# p\n\n## Results\n\nintro\n\n| a | b |\n|---|---|\n| 1 | 9 |\n\nafter\n", encoding="utf-8")
    script = [sys.executable, str(ROOT / "scripts/readme_results.py"), "--report", str(report), "--readme", str(readme)]
    proc = subprocess.run([*script, "--check"], capture_output=True, text=True)
    assert proc.returncode == 1 and "differs" in proc.stderr
    assert subprocess.run(script, capture_output=True, text=True).returncode == 0
    assert readme.read_text(encoding="utf-8") == ("# p\n\n## Results\n\nintro\n\n| a | b |\n|---|---|\n| 1 | **2** |\n"
                                                  "| 3 | 4 |\n\nafter\n")
    assert subprocess.run([*script, "--check"], capture_output=True, text=True).returncode == 0
    proc = subprocess.run([*script[:2], "--report", str(tmp_path / "none.md"), "--readme", str(readme)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "none.md: not found" in proc.stderr
