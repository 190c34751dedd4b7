"""Assemble synthetic tables: pick a domain, columns, formats and missing cells; fill the rows.

Every table is a pure function of `(cfg, split, index)`: its seed is derived with BLAKE2b from
those three (never from `hash()`), its Faker and mimesis providers are reseeded from it, and
nothing carries over from the previous table. The splits differ only in how tables are drawn:

* `train`, `valid`, `test`: natural rates of clues, lookalikes, mixed formats (a share
  `heterogeneity_rate` of the columns that can mix) and missing cells (`missing_rate`). Some
  tables list other entities than the domain's (`domains.SubjectVariant`: countries,
  postcodes, organisations, teams), so column 0 is not always a `*/name`.
* `corner_cases`: names and descriptions carry no clue to their class, telltale formats
  (`tel:`, hemisphere letters, `$$`) are left out, columns are drawn mostly from lookalike
  groups together with their partners (telephone + fax, start + end, best + worst rating),
  and each table keeps at least one column that reveals its domain. A single-column classifier
  cannot tell `Hotel/name` from `Restaurant/name` or a fax from a telephone here; a reader of
  the whole table can (the fax is the telephone with its last digit moved on, the end date
  follows the start date, check-in times make the table a hotel).
* `missing_values`: many columns lose 30–60% of their cells.
* `format_heterogeneity`: every column that has several formats mixes them.
* `wide` (evaluation only, `generate_wide`): natural tables of `wide_min_columns` …
  `wide_max_columns` columns, where a per-table byte budget shared by every column leaves each
  one a few bytes. A domain has fewer distinct properties than that, so once they are used up
  a wide table repeats properties it already shows, each repeat with its own format and case
  (a price in two notations, a second date column): labels still from the vocabulary, and a
  repeated CPA label is the same relation written twice.
* `policy_train` (Phase 4's policy and merge only): drawn as `train` by default; with
  `synthetic.policy_train_styles` its tables take the given ways in turn (e.g. natural, corner
  cases, missing values, mixed formats), so Phase 4 learns on hard tables too, never on an
  evaluation split's own tables.
* `wide_train` (`generate_wide(cfg, SWARM_TRAIN_SPLIT)`): more tables drawn as `wide` is,
  other tables (the split name is in every seed), on which only Phase 4's spawning policy and
  merge train.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from aegir.config import POLICY_TRAIN_SPLIT, SOURCE_SPLITS, SPECIALIST_TRAIN_SPLIT, SWARM_TRAIN_SPLIT, SyntheticConfig
from aegir.data.table import Table
from aegir.errors import AegirError, ConfigError
from aegir.labels import cpa_vocab, cta_vocab

from .context import Row, TableContext, derive_seed, make_context
from .domains import DOMAIN_NAMES, DOMAINS, EXPERT_ONLY_PROPS, Domain, Prop, SubjectVariant
from .kinds import Kind

WIDE_SPLIT = "wide"  # the evaluation-only split of many-column tables (`generate_wide`)
WIDE_SPLITS = (WIDE_SPLIT, SWARM_TRAIN_SPLIT)  # the splits of many-column tables
MISSING_TOKENS: tuple[str | None, ...] = (None, "", "N/A", "-", "null")
HEAVY_MISSING = (0.3, 0.6)  # rate range of the heavily missing columns of the missing_values split
CUE_RATES = (0.0, 0.3, 0.6, 0.9)  # per site: chance that a name or description carries a clue to its class
HARD_CUE_RATE = 0.03  # the same in corner-case tables
HARD_CTA_BOOST = 16.0  # extra weight of `cta_lookalike` columns in corner-case tables
HARD_CPA_BOOST = 4.0  # extra weight of `cpa_lookalike` columns in corner-case tables
PARTNER_RATE = 0.5  # chance that a column's partners join it outside corner cases
NATURAL_ORDER_RATE = 0.5  # chance that a table keeps related columns together in their usual order
SORTED_ROWS_RATE = 0.3  # chance that a table's rows are sorted by their subject, as directories are
RECASE_RATES = (("lower", 0.06), ("upper", 0.04))  # chance that a column of words is written in one case

# Columns that tables usually show side by side and in this order (street before city, latitude
# before longitude, start before end). Keys of `domains.Prop`.
NATURAL_SEQUENCES: tuple[tuple[str, ...], ...] = (
    ("address", "streetAddress", "postalCode", "addressLocality", "addressRegion", "addressCountry"),
    ("latitude", "longitude", "elevation"), ("startDate", "endDate", "eventDay"),
    ("givenName", "familyName"), ("birthDate", "deathDate"), ("telephone", "faxNumber", "email"),
    ("opens", "closes"), ("checkInTime", "checkoutTime"), ("prepTime", "cookTime", "totalTime"),
    ("datePosted", "validThrough"), ("dateCreated", "datePublished"), ("homeTeam", "awayTeam"),
    ("ratingValue", "bestRating", "worstRating"), ("price", "priceCurrency"),
    ("identifier", "globalLocationNumber"), ("population", "area"),
)


def is_missing(cell: str | None) -> bool:
    return cell in MISSING_TOKENS


@dataclass(frozen=True)
class ColumnPlan:
    """How one column is filled."""

    cta: str | None
    cpa: str | None
    kind: Kind
    formats: tuple[int, ...]  # style indices into kind.formats; several = a mixed-format column
    missing_rate: float
    missing_tokens: tuple[str | None, ...]
    case: str | None = None  # "lower" or "upper": the whole column written in one case


# ----------------------------------------------------------------------------- choosing columns


def _weighted_pick(rng: random.Random, props: list[Prop], hard: bool) -> Prop:
    if hard:
        weights = [p.weight * (1.0 + HARD_CTA_BOOST * p.cta_lookalike + HARD_CPA_BOOST * p.cpa_lookalike)
                   for p in props]
    else:
        weights = [p.weight for p in props]
    return rng.choices(props, weights)[0]


def select_props(rng: random.Random, domain: Domain, k: int, hard: bool, min_k: int = 0) -> list[Prop]:
    """Up to `k` distinct properties of `domain`, in draw order.

    A property with `requires` comes only with what it requires. In corner-case tables the
    first pick reveals the domain, the second is a lookalike with its partners (telephone +
    fax, start + end), then only lookalikes are drawn (type lookalikes first), partners
    always come along, and other columns only fill the table up to `min_k`.
    """
    chosen: list[Prop] = []
    taken: set[str] = set()

    def try_add(prop: Prop) -> None:
        if prop.key in taken or (prop.cpa is not None and any(c.cpa == prop.cpa for c in chosen)):
            return
        needed = [domain.prop(r) for r in prop.requires if r not in taken]
        if len(chosen) + len(needed) + 1 > k:
            return
        for p in needed + [prop]:
            chosen.append(p)
            taken.add(p.key)

    def add_with_partners(prop: Prop) -> None:
        try_add(prop)
        if prop.key in taken:
            for partner in prop.partners:
                if hard or rng.random() < PARTNER_RATE:
                    try_add(domain.prop(partner))

    if hard and k >= 1:
        try_add(_weighted_pick(rng, [p for p in domain.props if p.signature], hard))
        # an anchor: a lookalike told apart from its partner only by reading both
        anchors = [p for p in domain.props if p.partners and (p.cta_lookalike or p.cpa_lookalike)]
        if anchors:
            add_with_partners(_weighted_pick(rng, anchors, hard))
    tried: set[str] = set()
    while len(chosen) < k:
        candidates = [p for p in domain.props if p.key not in taken and p.key not in tried]
        if hard and len(chosen) >= min_k:
            candidates = [p for p in candidates if p.cta_lookalike or p.cpa_lookalike]
        if not candidates:
            break
        prop = _weighted_pick(rng, candidates, hard)
        tried.add(prop.key)
        add_with_partners(prop)
    return chosen


def pick_subject_variant(rng: random.Random, domain: Domain) -> SubjectVariant | None:
    """One of the domain's other subjects (each at its share of the tables), or None."""
    draw = rng.random()
    for variant in domain.variants:
        if draw < variant.share:
            return variant
        draw -= variant.share
    return None


# Pairs whose order sites do not reverse, even where the other columns stand anywhere: latitude
# before longitude, a start before its end, the home team before the away team. Outside corner
# cases a table that has both keeps them in this order (`site_order`); where they stand is free.
SITE_ORDER: tuple[tuple[str, str], ...] = (
    ("latitude", "longitude"), ("startDate", "endDate"), ("birthDate", "deathDate"), ("homeTeam", "awayTeam"),
    ("opens", "closes"), ("checkInTime", "checkoutTime"), ("datePosted", "validThrough"),
)


def site_order(props: list[Prop]) -> list[Prop]:
    """`props` with each `SITE_ORDER` pair in its order: where the second member stands before the
    first, the two swap places (each's first occurrence); every other column keeps its place."""
    out = list(props)
    for first, second in SITE_ORDER:
        keys = [p.key for p in out]
        if first in keys and second in keys:
            i, j = keys.index(first), keys.index(second)
            if j < i:
                out[i], out[j] = out[j], out[i]
    return out


def natural_order(props: list[Prop]) -> list[Prop]:
    """`props` with the members of each `NATURAL_SEQUENCES` group side by side, in the group's
    order, where the group's first member stood; other columns keep their places."""
    rank = {key: (g, i) for g, group in enumerate(NATURAL_SEQUENCES) for i, key in enumerate(group)}
    out: list[Prop] = []
    placed: set[int] = set()
    for prop in props:
        if prop.key not in rank:
            out.append(prop)
            continue
        group = rank[prop.key][0]
        if group in placed:
            continue
        placed.add(group)
        out.extend(sorted((p for p in props if rank.get(p.key, (-1,))[0] == group), key=lambda p: rank[p.key][1]))
    return out


def plan_case(rng: random.Random, kind: Kind) -> str | None:
    if not kind.recase:
        return None
    draw = rng.random()
    for case, rate in RECASE_RATES:
        if draw < rate:
            return case
        draw -= rate
    return None


def plan_formats(ctx: TableContext, kind: Kind, mixed: bool) -> tuple[int, ...]:
    """One style (a site's habit, mostly its locale's) or, for a mixed column, two to four."""
    rng = ctx.rng
    allowed = [i for i in range(len(kind.formats)) if not (ctx.hard and i in kind.cue_formats)]
    if mixed and len(allowed) >= 2:
        return tuple(rng.sample(allowed, rng.randint(2, min(4, len(allowed)))))
    if ctx.hard and kind.hard_preferred:
        habit = kind.hard_preferred
    else:
        habit = kind.preferred(ctx) if kind.preferred else allowed
    preferred = [i for i in habit if i in allowed] or allowed
    return (rng.choice(preferred if rng.random() < 0.8 else allowed),)


def _missing_rates(rng: random.Random, cfg: SyntheticConfig, split: str, n_columns: int) -> list[float]:
    rates = [cfg.missing_rate * 0.5]  # the subject is rarely missing
    rates += [cfg.missing_rate * rng.uniform(0.0, 2.0) for _ in range(n_columns - 1)]
    if split == "missing_values" and n_columns > 1:
        rates[0] = cfg.missing_rate
        heavy = [i for i in range(1, n_columns) if rng.random() < 0.6] or [rng.randrange(1, n_columns)]
        for i in heavy:
            rates[i] = rng.uniform(*HEAVY_MISSING)
    return [min(r, 0.95) for r in rates]


# ----------------------------------------------------------------------------- one table


@lru_cache(maxsize=64)
def _domain_order(seed: int, split: str) -> tuple[str, ...]:
    """Domains in a per-split shuffled order, dealt round-robin so every split covers all 17."""
    order = list(DOMAIN_NAMES)
    random.Random(derive_seed(seed, split, "domains")).shuffle(order)
    return tuple(order)


def drawn_as(cfg: SyntheticConfig, split: str, index: int) -> str:
    """The split whose way of drawing tables table `index` of `split` follows: itself, except
    `policy_train` and `specialist_train`, whose tables take `synthetic.policy_train_styles` and
    `synthetic.specialist_train_styles` in turn ("natural" = `train`)."""
    if split == POLICY_TRAIN_SPLIT:
        styles = cfg.policy_train_styles
    elif split == SPECIALIST_TRAIN_SPLIT:
        styles = cfg.specialist_train_styles
    else:
        return split
    style = styles[index % len(styles)]
    return "train" if style == "natural" else style


def generate_table(cfg: SyntheticConfig, split: str, index: int) -> Table:
    """Table `index` of `split`: a pure function of (cfg, split, index). Seeds and ids come from
    `split`; how the table is drawn from `drawn_as` (only `policy_train` differs)."""
    domain = DOMAINS[_domain_order(cfg.seed, split)[index % len(DOMAIN_NAMES)]]
    layout = random.Random(derive_seed(cfg.seed, split, index, "layout"))
    locale = cfg.locales[layout.randrange(len(cfg.locales))]
    style = drawn_as(cfg, split, index)
    hard = style == "corner_cases"
    ctx = make_context(locale, derive_seed(cfg.seed, split, index, "values"), hard=hard,
                       cue_rate=HARD_CUE_RATE if hard else layout.choice(CUE_RATES),
                       catalogue=split == SPECIALIST_TRAIN_SPLIT and domain.name == "Product")
    rng = ctx.rng

    n_rows = rng.randint(cfg.min_rows, cfg.max_rows)
    wide = split in WIDE_SPLITS
    n_columns = rng.randint(cfg.wide_min_columns, cfg.wide_max_columns) if wide else rng.randint(cfg.min_columns, cfg.max_columns)
    subject_cta, schema = domain.subject_cta, domain
    if cfg.expert_only_columns and split == SPECIALIST_TRAIN_SPLIT and domain.name in EXPERT_ONLY_PROPS:
        schema = Domain(domain.name, domain.subject, domain.props + EXPERT_ONLY_PROPS[domain.name], domain.variants)
    if not hard:
        variant = pick_subject_variant(rng, domain)
        if variant is not None:
            subject_cta, schema = variant.cta, Domain(domain.name, variant.subject, variant.props)
    props = select_props(rng, schema, n_columns - 1, hard, cfg.min_columns - 1)
    if wide:  # past the domain's distinct properties: repeats of those already shown
        distinct = list(props)
        props += [_weighted_pick(rng, distinct, False) for _ in range(n_columns - 1 - len(props))]
    rng.shuffle(props)
    if rng.random() < NATURAL_ORDER_RATE:
        props = natural_order(props)
    if not hard:
        props = site_order(props)

    tokens = tuple(rng.sample(MISSING_TOKENS, rng.choice((1, 1, 2))))
    rates = _missing_rates(rng, cfg, style, len(props) + 1)
    specs = [(subject_cta, None, schema.subject)] + [_variant(ctx, p) for p in props]
    plans = []
    for (cta, cpa, kind), rate in zip(specs, rates):
        mixed = kind.mixable and (style == "format_heterogeneity" or rng.random() < cfg.heterogeneity_rate)
        plans.append(ColumnPlan(cta, cpa, kind, plan_formats(ctx, kind, mixed), rate, tokens, plan_case(rng, kind)))

    columns = _fill(ctx, plans, n_rows)
    return Table(
        table_id=f"synth_{split}_{index:06d}_{domain.name}",
        columns=columns,
        cta=tuple(p.cta for p in plans),
        cpa=tuple(p.cpa for p in plans),
        domain=domain.name,
    )


def _variant(ctx: TableContext, prop: Prop) -> tuple[str | None, str | None, Kind]:
    if len(prop.variants) == 1:
        i = 0
    elif prop.variant_key:
        i = ctx.table_value(f"variant/{prop.variant_key}", lambda: ctx.rng.randrange(len(prop.variants)))
    else:
        i = ctx.rng.randrange(len(prop.variants))
    cta, kind = prop.variants[i]
    return cta, prop.cpa, kind


def _fill(ctx: TableContext, plans: list[ColumnPlan], n_rows: int) -> tuple[tuple[str | None, ...], ...]:
    """Draw every row's values (row by row, so related columns share latents), then hide cells."""
    rng = ctx.rng
    styles = []
    for plan in plans:
        if len(plan.formats) == 1:
            styles.append([plan.formats[0]] * n_rows)
        else:  # balanced, so a mixed column really shows each of its formats
            assigned = [plan.formats[r % len(plan.formats)] for r in range(n_rows)]
            rng.shuffle(assigned)
            styles.append(assigned)

    cells: list[list[str | None]] = [[] for _ in plans]
    for r in range(n_rows):
        row = Row(r)
        for c, plan in enumerate(plans):
            value = plan.kind.draw(ctx, row)
            cells[c].append(recase(plan.kind.formats[styles[c][r]](ctx, value), plan.case))
    if rng.random() < SORTED_ROWS_RATE:  # a directory: rows in alphabetical order of their subject
        order = sorted(range(n_rows), key=lambda r: (cells[0][r].casefold(), r))
        cells = [[column[r] for r in order] for column in cells]

    for c, plan in enumerate(plans):
        hidden = [r for r in range(n_rows) if rng.random() < plan.missing_rate]
        if len(hidden) == n_rows:  # keep one value: a column of nothing has no type
            hidden.pop(rng.randrange(n_rows))
        for r in hidden:
            cells[c][r] = rng.choice(plan.missing_tokens)
    return tuple(tuple(col) for col in cells)


def recase(cell: str, case: str | None) -> str:
    if case == "lower":
        return cell.lower()
    if case == "upper":
        return cell.upper()
    return cell


# ----------------------------------------------------------------------------- splits


def _check_split(split: str) -> None:
    if split not in SOURCE_SPLITS:
        raise ConfigError(f"synthetic: unknown split {split!r} (known: {', '.join(SOURCE_SPLITS)})")


@lru_cache(maxsize=1)
def check_schema_labels() -> None:
    """Every label the schemas can emit is a SOTAB V2 label (else the schema is broken)."""
    ctas, cpas = emittable_labels()
    bad = sorted(ctas - set(cta_vocab().labels)) + sorted(cpas - set(cpa_vocab().labels))
    if bad:
        raise AegirError(f"aegir.data.synth: labels outside the SOTAB V2 vocabulary: {bad}")


def generate_split(cfg: SyntheticConfig, split: str) -> list[Table]:
    """All `cfg.<split>_tables` tables of one split, in index order."""
    _check_split(split)
    check_schema_labels()
    return [generate_table(cfg, split, i) for i in range(cfg.tables_in(split))]


def generate_wide(cfg: SyntheticConfig, split: str = WIDE_SPLIT) -> list[Table]:
    """A split of many-column tables (`wide_min_columns` … `wide_max_columns` columns, module
    docstring), in index order: the evaluation-only `wide` (`cfg.wide_tables` tables, never
    trained on) or Phase 4's `wide_train` (`cfg.wide_train_tables`)."""
    if split not in WIDE_SPLITS:
        raise ConfigError(f"no wide split {split!r}; known: {', '.join(WIDE_SPLITS)}")
    check_schema_labels()
    count = cfg.wide_tables if split == WIDE_SPLIT else cfg.wide_train_tables
    return [generate_table(cfg, split, i) for i in range(count)]


def generate_benchmark(cfg: SyntheticConfig) -> dict[str, list[Table]]:
    """Every split of the embedded benchmark, keyed as `aegir.config.SOURCE_SPLITS`."""
    return {split: generate_split(cfg, split) for split in SOURCE_SPLITS}


# ----------------------------------------------------------------------------- labels and lookalikes


def emittable_labels() -> tuple[set[str], set[str]]:
    """(CTA labels, CPA labels) the schemas can emit at all."""
    ctas: set[str] = set()
    cpas: set[str] = set()
    for domain in DOMAINS.values():
        ctas.add(domain.subject_cta)
        ctas.update(variant.cta for variant in domain.variants)
        for prop in domain.props + tuple(p for v in domain.variants for p in v.props):
            if prop.cpa:
                cpas.add(prop.cpa)
            ctas.update(cta for cta, _ in prop.variants if cta)
    return ctas, cpas


def label_coverage(tables: list[Table]) -> tuple[set[str], set[str]]:
    """(CTA labels, CPA labels) that occur in `tables`."""
    ctas = {label for t in tables for label in t.cta if label}
    cpas = {label for t in tables for label in t.cpa if label}
    return ctas, cpas


def coverage_report(tables: list[Table] | None = None) -> str:
    """A Markdown summary of which SOTAB labels the generator emits (and, given tables, how often)."""
    if tables is None:
        ctas, cpas = emittable_labels()
        counts: dict[str, int] = {}
    else:
        ctas, cpas = label_coverage(tables)
        counts = {}
        for t in tables:
            for label in (*t.cta, *(f"cpa:{x}" for x in t.cpa if x)):
                if label:
                    counts[label] = counts.get(label, 0) + 1
    lines = []
    for name, vocab_labels, covered, prefix in (("CTA", cta_vocab().labels, ctas, ""),
                                                 ("CPA", cpa_vocab().labels, cpas, "cpa:")):
        missing = [label for label in vocab_labels if label not in covered]
        lines.append(f"**{name}**: {len(vocab_labels) - len(missing)}/{len(vocab_labels)} labels emitted.")
        if counts:
            top = sorted((x for x in vocab_labels if x in covered), key=lambda x: -counts[prefix + x])
            lines.append("Columns per label: " + ", ".join(f"`{x}` {counts[prefix + x]}" for x in top))
        lines.append("Not emitted: " + (", ".join(f"`{x}`" for x in missing) if missing else "none") + ".")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


NAME_LABELS = tuple(f"{d}/name" for d in DOMAIN_NAMES)
CTA_LOOKALIKE_GROUPS: tuple[tuple[str, ...], ...] = (
    NAME_LABELS,
    ("Book/description", "Event/description", "Hotel/description", "JobPosting/description",
     "Movie/description", "Product/description", "Recipe/description"),
    ("telephone", "faxNumber"), ("Date", "DateTime"), ("price", "priceRange", "MonetaryAmount"),
    ("weight", "Mass"), ("Person/name", "MusicArtistAT"), ("Organization", "Brand"),
    ("addressLocality", "Place/name"), ("category", "CategoryCode"), ("Country", "Language"),
    ("IdentifierAT", "postalCode"),
)


def _context_pairs() -> tuple[tuple[str, str], ...]:
    pairs = []
    for domain in DOMAINS.values():
        for prop in domain.props:
            for other in prop.partners + prop.requires:
                a, b = sorted((prop.cpa or prop.key, domain.prop(other).cpa or other))
                if (a, b) not in pairs:
                    pairs.append((a, b))
    return tuple(pairs)


# CPA label pairs whose columns are told apart by reading them together (the fax is the
# telephone plus one, the end follows the start, best ≥ value ≥ worst, total = prep + cook).
CONTEXT_PAIRS: tuple[tuple[str, str], ...] = _context_pairs()


def context_pairs(table: Table) -> int:
    """Column pairs of `table` that form a `CONTEXT_PAIRS` pair."""
    present = [label for label in table.cpa if label]
    return sum(1 for a, b in CONTEXT_PAIRS if a in present and b in present)


def lookalike_pairs(table: Table) -> int:
    """Column pairs of `table` a single-column reader is likely to confuse.

    A pair counts when its CTA labels differ but sit in one lookalike group (telephone vs
    faxNumber), or when both columns have the same CTA label but different CPA labels
    (two Date columns: startDate vs endDate; two Person/name columns: author vs director).
    """
    n = 0
    for i in range(table.num_columns):
        for j in range(i + 1, table.num_columns):
            a, b = table.cta[i], table.cta[j]
            if a and b and a != b and any(a in g and b in g for g in CTA_LOOKALIKE_GROUPS) or a and a == b and table.cpa[i] != table.cpa[j]:
                n += 1
    return n
