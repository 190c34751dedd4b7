"""The fixed SOTAB V2 label vocabularies (82 CTA labels, 108 CPA labels).

The vocabulary is never inferred from data: a label outside these files is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class Vocabulary:
    """An ordered label set; `index[label]` is the label's class id."""

    name: str
    labels: tuple[str, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {label: i for i, label in enumerate(self.labels)})

    def __len__(self) -> int:
        return len(self.labels)

    def __contains__(self, label: object) -> bool:
        return label in self.index


def _read(filename: str, name: str) -> Vocabulary:
    text = resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
    labels = tuple(line.strip() for line in text.splitlines() if line.strip())
    return Vocabulary(name=name, labels=labels)


@cache
def cta_vocab() -> Vocabulary:
    """The 82 SOTAB V2 column-type labels."""
    return _read("sotab_v2_cta.txt", "cta")


@cache
def cpa_vocab() -> Vocabulary:
    """The 108 SOTAB V2 column-property labels."""
    return _read("sotab_v2_cpa.txt", "cpa")


def label_families(vocab: Vocabulary) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(family id of each label, −1 for a label of no family; the family names, in order of
    first appearance): the family of `X/name` and `X/description` is the class X, the table
    domain a subject column of that type names (`Movie/name` → `Movie`)."""
    families: list[str] = []
    ids = []
    for label in vocab.labels:
        cls, _, kind = label.partition("/")
        if kind in ("name", "description"):
            if cls not in families:
                families.append(cls)
            ids.append(families.index(cls))
        else:
            ids.append(-1)
    return tuple(ids), tuple(families)


def label_counts() -> dict[str, int]:
    """{"cta": 82, "cpa": 108}: the size of each task's vocabulary."""
    return {"cta": len(cta_vocab()), "cpa": len(cpa_vocab())}
