"""The embedded synthetic benchmark (docs/design.md, "Data contract"): SOTAB-like tables with CTA and CPA labels.

    from aegir.data.synth import generate_benchmark, generate_split
    tables = generate_split(SyntheticConfig(), "corner_cases")

Modules: `vocab` (curated word lists and schema.org enumerations), `context` (per-table and
per-row state, seeding), `formats` (how dates, prices, phones … are written), `kinds` (value
types: latent draw + formats), `domains` (the 17 domain schemas), `generator` (assembly,
splits, coverage).
"""

from .domains import DOMAIN_NAMES, DOMAINS
from .generator import (
    CONTEXT_PAIRS,
    CTA_LOOKALIKE_GROUPS,
    MISSING_TOKENS,
    WIDE_SPLIT,
    context_pairs,
    coverage_report,
    emittable_labels,
    generate_benchmark,
    generate_split,
    generate_table,
    generate_wide,
    is_missing,
    label_coverage,
    lookalike_pairs,
)

__all__ = [
    "CONTEXT_PAIRS", "CTA_LOOKALIKE_GROUPS", "DOMAIN_NAMES", "DOMAINS", "MISSING_TOKENS", "WIDE_SPLIT", "context_pairs",
    "coverage_report",
    "emittable_labels", "generate_benchmark", "generate_split",
    "generate_table", "generate_wide", "is_missing",
    "label_coverage", "lookalike_pairs",
]
