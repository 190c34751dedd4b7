"""Latent draws: the facts behind a row's cells, drawn once per row and shared by its columns.

Each draw is `(ctx, row) -> value`. Those memoised in the `Row` (via `row.get` or `latent`)
make related columns agree: `event_end` follows `event_start`, `fax` is `telephone` plus one,
`given_name` and `family_name` make up the Person's name, `total_minutes` is prep + cook.
Draws that depend on `ctx.hard` make corner-case tables harder to read one column at a time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any

from . import formats as F
from . import vocab
from .context import Row, TableContext, fill, plural

Draw = Callable[[TableContext, Row], Any]  # a latent draw: (ctx, row) -> value


def pick(options: tuple[Any, ...]) -> Draw:
    return lambda ctx, row: ctx.rng.choice(options)


def some(options: tuple[str, ...], low: int, high: int) -> Draw:
    return lambda ctx, row: tuple(ctx.rng.sample(options, ctx.rng.randint(low, high)))


def latent(key: str, make: Draw) -> Draw:
    """A draw memoised under `key` in the row: every column reading `key` sees one value."""
    return lambda ctx, row: row.get(key, lambda: make(ctx, row))


def pattern(patterns: tuple[str, ...]) -> Draw:
    """Fill one of `patterns` (see `context.fill`)."""
    return lambda ctx, row: fill(ctx, ctx.rng.choice(patterns))


def log_uniform(ctx: TableContext, low: float, high: float) -> float:
    return math.exp(ctx.rng.uniform(math.log(low), math.log(high)))


# ----------------------------------------------------------------------------- dates and times


def random_date(ctx: TableContext, first_year: int, last_year: int) -> date:
    lo, hi = date(first_year, 1, 1).toordinal(), date(last_year, 12, 31).toordinal()
    return date.fromordinal(ctx.rng.randint(lo, hi))


def random_datetime(ctx: TableContext, first_year: int, last_year: int) -> datetime:
    d = random_date(ctx, first_year, last_year)
    return datetime(d.year, d.month, d.day, ctx.rng.randint(8, 22), ctx.rng.choice((0, 0, 0, 15, 30, 45)))


def event_start(ctx: TableContext, row: Row) -> datetime:
    return row.get("start", lambda: random_datetime(ctx, 2015, 2026))


def event_end(ctx: TableContext, row: Row) -> datetime:
    def make() -> datetime:
        start = event_start(ctx, row)
        if ctx.rng.random() < 0.6:  # same-day event
            return start + timedelta(hours=ctx.rng.randint(1, 5), minutes=ctx.rng.choice((0, 0, 30)))
        return start + timedelta(days=ctx.rng.randint(1, 4), hours=ctx.rng.randint(0, 6))
    return row.get("end", make)


def published_date(ctx: TableContext, row: Row) -> date:
    return row.get("published", lambda: random_date(ctx, 1975, 2025))


def created_date(ctx: TableContext, row: Row) -> date:
    return row.get("created", lambda: published_date(ctx, row) - timedelta(days=ctx.rng.randint(0, 900)))


def birth_date(ctx: TableContext, row: Row) -> date:
    return row.get("birth", lambda: random_date(ctx, 1890, 1995))


def death_date(ctx: TableContext, row: Row) -> date:
    def make() -> date:
        birth = birth_date(ctx, row)
        lo = birth.toordinal() + 25 * 365
        hi = min(birth.toordinal() + 95 * 365, date(2025, 6, 30).toordinal())
        return date.fromordinal(ctx.rng.randint(lo, max(lo, hi)))
    return row.get("death", make)


def posted_date(ctx: TableContext, row: Row) -> date:
    return row.get("posted", lambda: random_date(ctx, 2016, 2025))


def valid_through(ctx: TableContext, row: Row) -> datetime:
    def make() -> datetime:
        d = posted_date(ctx, row) + timedelta(days=ctx.rng.randint(14, 120))
        return datetime(d.year, d.month, d.day, 23, 59) if ctx.rng.random() < 0.5 else \
            datetime(d.year, d.month, d.day, ctx.rng.randint(8, 18), 0)
    return row.get("valid_through", make)


def ticket_sale(ctx: TableContext, row: Row) -> datetime:
    """When tickets go on sale: weeks before the event starts."""
    def make() -> datetime:
        sale = event_start(ctx, row) - timedelta(days=ctx.rng.randint(7, 150))
        return sale.replace(hour=ctx.rng.randint(8, 12), minute=0)
    return row.get("valid_from", make)


def opening_time(ctx: TableContext, row: Row) -> tuple[int, int]:
    return row.get("opens", lambda: (ctx.rng.randint(6, 11), ctx.rng.choice((0, 0, 0, 30))))


def closing_time(ctx: TableContext, row: Row) -> tuple[int, int]:
    return row.get("closes", lambda: (ctx.rng.randint(16, 23), ctx.rng.choice((0, 0, 0, 30))))


def opening_spans(ctx: TableContext, row: Row) -> tuple:
    def make() -> tuple:
        spans = [(0, ctx.rng.choice((4, 4, 5)), opening_time(ctx, row), closing_time(ctx, row))]
        if spans[0][1] == 4 and ctx.rng.random() < 0.6:
            weekend = (ctx.rng.randint(8, 11), 0), (ctx.rng.randint(13, 18), 0)
            spans.append((5, ctx.rng.choice((5, 6)), *weekend))
        return tuple(spans)
    return row.get("opening_spans", make)


def check_in(ctx: TableContext, row: Row) -> tuple[int, int]:
    return row.get("checkin", lambda: (ctx.rng.randint(13, 16), ctx.rng.choice((0, 0, 30))))


def check_out(ctx: TableContext, row: Row) -> tuple[int, int]:
    return row.get("checkout", lambda: (ctx.rng.randint(10, 12), ctx.rng.choice((0, 0, 30))))


def minutes(key: str, low: int, high: int, step: int = 5) -> Draw:
    return latent(key, lambda c, r: c.rng.randrange(low, high + 1, step))


def total_minutes(ctx: TableContext, row: Row) -> int:
    return minutes("prep", 5, 60)(ctx, row) + minutes("cook", 10, 240)(ctx, row)


# ----------------------------------------------------------------------------- people and places


def gender(ctx: TableContext, row: Row) -> tuple[str, str]:
    return row.get("gender", lambda: ctx.rng.choice(vocab.ENUMS["GenderType"]))


def given_name(ctx: TableContext, row: Row) -> str:
    male = gender(ctx, row)[0] == "Male"
    return row.get("given", lambda: ctx.fake.first_name_male() if male else ctx.fake.first_name_female())


def family_name(ctx: TableContext, row: Row) -> str:
    return row.get("family", lambda: ctx.fake.last_name())


def full_name(ctx: TableContext, row: Row) -> tuple[str, str]:
    return given_name(ctx, row), family_name(ctx, row)


def other_person(ctx: TableContext, row: Row) -> tuple[str, str]:
    return ctx.fake.first_name(), ctx.fake.last_name()


def city(ctx: TableContext) -> str:
    """A city of the table's geography: mimesis's real place names, or Faker's at home."""
    geo = ctx.geo
    if geo.home and ctx.rng.random() < 0.3:
        return ctx.fake.city()
    return geo.namer.city().strip()


def address(ctx: TableContext, row: Row) -> dict[str, str]:
    """Street, city, postcode, region (name and code) of one place, all in the table's geography."""
    def make() -> dict[str, str]:
        geo = ctx.geo
        if geo.home and ctx.rng.random() < 0.5:
            f = ctx.fake
            try:
                region = f.administrative_unit()
            except AttributeError:
                region = f.city()
            street, town, postcode = f.street_address().replace("\n", " "), f.city(), f.postcode()
        else:
            a = geo.namer
            street, town, postcode, region = a.address(), a.city().strip(), a.postal_code(), a.state()
        code = ctx.fake.state_abbr() if geo.home and ctx.country == "US" else geo.namer.state(abbr=True)
        return {"street": street, "city": town, "postcode": postcode, "region": region, "region_code": code}
    return row.get("address", make)


def world_country(ctx: TableContext) -> str:
    """ISO alpha-2 of any of Faker's 195 countries (most have no entry in `vocab.COUNTRIES`)."""
    return ctx.rng.choice(F.WORLD_COUNTRIES).alpha_2_code


def country_code(ctx: TableContext, row: Row, share_local: float) -> str:
    """The table's country (its geography's) at rate `share_local`; else any country, the
    better-known ones more often."""
    if ctx.rng.random() < share_local:  # a directory of one country, often not the site's own
        return ctx.table_value("featured_country", lambda: world_country(ctx) if ctx.rng.random() < 0.3
                               else ctx.geo.country)
    if ctx.rng.random() < 0.5:
        return ctx.rng.choice(vocab.COUNTRIES)[0]
    return world_country(ctx)


WORLD_BOX_RATE = 0.5  # share of tables whose coordinates lie anywhere on Earth, not in their geography


def coordinate_box(ctx: TableContext) -> tuple[float, float, float, float]:
    """The table's box of coordinates: its geography's, or (at `WORLD_BOX_RATE`) a box of 2-12°
    anywhere people live (latitude −45…65), where the longitude is as often the larger number
    as not: a model cannot tell latitude from longitude by which is larger."""
    def make() -> tuple[float, float, float, float]:
        if ctx.rng.random() >= WORLD_BOX_RATE:
            return ctx.geo.bbox
        size = ctx.rng.uniform(2.0, 12.0)
        lat0, lon0 = ctx.rng.uniform(-45.0, 65.0 - size), ctx.rng.uniform(-180.0, 180.0 - size)
        return lat0, lat0 + size, lon0, lon0 + size
    return ctx.table_value("coordinate_box", make)


def lat_lon(ctx: TableContext, row: Row) -> tuple[float, float]:
    """Coordinates inside the table's box (`coordinate_box`)."""
    def make() -> tuple[float, float]:
        lat0, lat1, lon0, lon1 = coordinate_box(ctx)
        return ctx.rng.uniform(lat0, lat1), ctx.rng.uniform(lon0, lon1)
    return row.get("latlon", make)


def telephone(ctx: TableContext, row: Row) -> str:
    return row.get("phone", lambda: ctx.fake.phone_number())


def fax(ctx: TableContext, row: Row) -> str:
    """The row's telephone number with its last digit moved on by one (see `bump_last_digit`)."""
    return row.get("fax", lambda: F.bump_last_digit(telephone(ctx, row)))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "item"


def subject_slug(ctx: TableContext, row: Row) -> str:
    name = row.values.get("name")
    if "name_parts" in row.values:
        name = " ".join(row.values["name_parts"])
    return slug(name if isinstance(name, str) else ctx.fake.slug())


def url_path(ctx: TableContext, row: Row) -> str:
    section = ctx.table_value("url_section", lambda: ctx.rng.choice(("", "p/", "item/", "en/", "detail/")))
    suffix = f"-{ctx.rng.randint(1, 9999)}" if ctx.rng.random() < 0.4 else ""
    return f"{section}{subject_slug(ctx, row)}{suffix}"


def image_path(ctx: TableContext, row: Row) -> tuple[str, str, str]:
    return (subject_slug(ctx, row), f"{ctx.rng.getrandbits(40):010x}",
            f"{ctx.rng.randint(2012, 2024)}/{ctx.rng.randint(1, 12):02d}")


def email(ctx: TableContext, row: Row) -> str:
    if "given" in row.values or ctx.rng.random() < 0.25:
        given, family = full_name(ctx, row)
        local = slug(f"{given}.{family}").replace("-", ".")
        return f"{local}@{ctx.rng.choice((ctx.site, ctx.fake.free_email_domain()))}"
    role = ctx.rng.choice(("info", "contact", "hello", "office", "booking", "reservations", "service"))
    words = slug(str(row.values.get("name") or ctx.fake.word())).split("-")[:2]  # the business's own domain
    return f"{role}@{''.join(words) or 'mail'}.{ctx.site.rsplit('.', 1)[-1]}"


# ----------------------------------------------------------------------------- names of things


def creative_title(ctx: TableContext, cues: tuple[str, ...] = ()) -> str:
    if ctx.rng.random() < 0.2:  # a title in the site's language
        base = ctx.fake.sentence(ctx.rng.randint(2, 4), variable_nb_words=False).rstrip(".")
    else:
        base = fill(ctx, ctx.rng.choice(vocab.TITLE_PATTERNS))
    if cues and ctx.cue():
        base += fill(ctx, ctx.rng.choice(cues))
    return base


def article_title(ctx: TableContext) -> str:
    noun = ctx.rng.choice(vocab.ARTICLE_NOUNS)
    title = fill(ctx, ctx.rng.choice(vocab.ARTICLE_PATTERNS), verb=ctx.rng.choice(vocab.ARTICLE_VERBS),
                 noun=noun, nouns=plural(noun))
    return title[0].upper() + title[1:]


def episode_title(ctx: TableContext, row: Row) -> str:
    if ctx.cue():
        return fill(ctx, ctx.rng.choice(vocab.EPISODE_TITLE_CUES), n=row.index + 1, title=creative_title(ctx))
    return creative_title(ctx)


def place_name(patterns: tuple[str, ...]) -> Draw:
    def draw(ctx: TableContext, row: Row) -> str:
        chosen = patterns if ctx.cue() else vocab.NEUTRAL_PLACE_PATTERNS
        return fill(ctx, ctx.rng.choice(chosen))
    return draw


def artist(ctx: TableContext, row: Row) -> str:
    def pool() -> tuple[str, ...]:
        n = ctx.rng.choice((1, 1, 2, 3, 5))
        bands = 0.2 if ctx.hard else 0.55  # solo artists' names look like any person's
        return tuple(fill(ctx, ctx.rng.choice(vocab.BAND_PATTERNS)) if ctx.rng.random() < bands
                     else f"{ctx.fake.first_name()} {ctx.fake.last_name()}" for _ in range(n))
    return row.get("artist", lambda: ctx.rng.choice(ctx.table_value("artists", pool)))


def club(ctx: TableContext) -> tuple[str, str]:
    """(its town, a team's name), named as the page's league writes its clubs: half the pages
    as football leagues do (`vocab.CLUB_PATTERNS`), the others with the older patterns."""
    city = ctx.fake.city()
    patterns = ctx.table_value("club_patterns", lambda: vocab.CLUB_PATTERNS if ctx.rng.random() < 0.5
                               else vocab.SPORT_TEAM_PATTERNS)
    return city, fill(ctx, ctx.rng.choice(patterns), City=city)


def teams(ctx: TableContext, row: Row) -> tuple[tuple[str, str], tuple[str, str]]:
    """A fixture's home and away teams, (town, name) each."""
    return row.get("teams", lambda: (club(ctx), club(ctx)))


def team(ctx: TableContext, row: Row) -> tuple[str, str]:
    """The team a row of a list of teams is about (town, name): each row its own club."""
    return row.get("team", lambda: club(ctx))


def standing(ctx: TableContext, row: Row) -> dict[str, int]:
    """A team's line in a league table: games played (the table's matchday), won, drawn, lost,
    goals for and against, points (three for a win, on some pages two) and its position."""
    def make() -> dict[str, int]:
        played = ctx.table_value("matchday", lambda: ctx.rng.choice((10, 17, 22, 30, 34, 34, 38, 38)))
        win = ctx.table_value("points_for_a_win", lambda: 2 if ctx.rng.random() < 0.15 else 3)
        won = ctx.rng.randint(0, played)
        drawn = ctx.rng.randint(0, played - won)
        scored = won * 2 + drawn + ctx.rng.randint(0, played)
        conceded = (played - won - drawn) * 2 + drawn + ctx.rng.randint(0, played)
        return {"played": played, "won": won, "drawn": drawn, "lost": played - won - drawn,
                "for": scored, "against": conceded, "points": win * won + drawn, "position": row.index + 1}
    return row.get("standing", make)


def catalogue_item(ctx: TableContext, row: Row) -> tuple[str, str, str] | None:
    """(maker, model, name) of a real product for a row of a `specialist_train` Product table
    that lists them: half of those tables take one catalogue of `vocab.CATALOGUES` (cars,
    aircraft, graphics cards, drives, phones); None for every other table. The model part is
    written as catalogues write it: as the maker gives it, in lower case, or in capitals."""
    if not ctx.catalogue:
        return None
    def pick() -> tuple[str, str] | None:
        if ctx.rng.random() >= 0.5:
            return None
        names = list(vocab.CATALOGUES)
        return ctx.rng.choices(names, weights=vocab.CATALOGUE_WEIGHTS)[0], ctx.rng.choice(("as is", "as is", "lower", "upper"))
    chosen = ctx.table_value("catalogue", pick)
    if chosen is None:
        return None
    name, case = chosen
    def make() -> tuple[str, str, str]:
        full = ctx.rng.choice(vocab.CATALOGUES[name])
        maker = next((m for m in vocab.CATALOGUE_MAKERS if full.startswith(m + " ")), full.split(" ")[0])
        if maker == "iPhone":  # a phone named by its line: Apple makes it, the whole name is its model
            maker = "Apple"
        listed = full.startswith(maker + " ")  # "Audi A4" names its maker; "iPhone 11", "Concorde" do not
        model = full[len(maker):].strip() if listed else full
        model = model.lower() if case == "lower" else model.upper() if case == "upper" else model
        return maker, model, f"{maker} {model}" if listed else model
    return row.get("catalogue_item", make)


def brand(ctx: TableContext, row: Row) -> str:
    if (item := catalogue_item(ctx, row)) is not None:
        return item[0]

    def make() -> str:  # a known brand, a company's short name, or an invented word
        if ctx.table_value("real_brands", lambda: ctx.rng.random() < 0.4):
            return ctx.rng.choice(vocab.REAL_BRANDS)
        if ctx.rng.random() < (0.8 if ctx.hard else 0.45):  # corner cases favour company names
            return ctx.providers.finance.company().split(",")[0].split(" ")[0]
        parts = [ctx.rng.choice(vocab.BRAND_SYLLABLES) for _ in range(ctx.rng.randint(2, 3))]
        return "".join(parts).capitalize()
    return row.get("brand", make)


def model_name(ctx: TableContext, row: Row) -> str:
    if (item := catalogue_item(ctx, row)) is not None:
        return item[1]

    def make() -> str:
        r, letters = ctx.rng, "ABCDEFGHKLMNPRSTWXZ"
        style = r.randint(0, 3)
        if style == 0:
            return f"{r.choice(vocab.MODEL_PREFIXES)}{r.randint(1, 99) * 10}"
        if style == 1:
            return f"{r.choice(letters)}{r.choice(letters)}-{r.randint(100, 9999)}"
        if style == 2:
            return f"{r.choice(vocab.MODEL_PREFIXES)} {r.randint(2, 15)}"
        return f"{r.randint(1, 9)}{r.choice(letters)}{r.randint(10, 99)}"
    return row.get("model", make)


def product_name(ctx: TableContext, row: Row) -> str:
    if (item := catalogue_item(ctx, row)) is not None:
        return item[2]
    if ctx.cue():
        noun = ctx.rng.choice(vocab.PRODUCT_NOUNS)
        return f"{brand(ctx, row)} {noun}" + (f" {model_name(ctx, row)}" if ctx.rng.random() < 0.6 else "")
    food = f"{ctx.rng.choice(vocab.FOOD_PRODUCT_WORDS)} {ctx.rng.choice(vocab.FOOD_PRODUCT_TYPES)}"
    return food if ctx.hard or ctx.rng.random() < 0.5 else f"{brand(ctx, row)} {food}"


def recipe_name(ctx: TableContext, row: Row) -> str:
    if ctx.cue():
        if ctx.rng.random() < 0.5:
            return ctx.providers.food.dish()
        return f"{ctx.rng.choice(vocab.RECIPE_ADJECTIVES)} {ctx.providers.food.dish()}"
    return f"{ctx.rng.choice(vocab.FOOD_PRODUCT_WORDS)} {ctx.rng.choice(vocab.FOOD_PRODUCT_TYPES)}"


def job_name(ctx: TableContext, row: Row) -> str:
    job = ctx.fake.job()
    if ctx.cue():
        r = ctx.rng.random()
        if ctx.lang == "de" or r < 0.2:
            return f"{job} (m/w/d)"
        return f"Senior {job}" if r < 0.5 else f"{job} - {ctx.fake.city()}"
    return job


def event_name(ctx: TableContext, row: Row) -> str:
    """An event's name; some tables list named days (holidays, feasts, observances) instead,
    mostly in the site's language."""
    if ctx.table_value("observances", lambda: ctx.rng.random() < 0.15):
        lang = ctx.table_value("observance_lang", lambda: ctx.lang if ctx.rng.random() < 0.7 else "en")
        patterns = vocab.OBSERVANCE_PATTERNS.get(lang, vocab.OBSERVANCE_PATTERNS["en"])
        return fill(ctx, ctx.rng.choice(patterns))
    patterns = vocab.EVENT_PATTERNS if ctx.cue() else vocab.NEUTRAL_EVENT_PATTERNS
    return fill(ctx, ctx.rng.choice(patterns))


PLACE_KINDS = ("landmark", "landmark", "hub", "settlement", "settlement")


def place_subject(ctx: TableContext, row: Row) -> str:
    """A Place's name: a landmark ("Lake X"), a transport hub ("X Airport") or a settlement
    (a town or region), one kind per table. Hubs and landmarks carry their clue only when the
    table gives clues; settlement names never do."""
    kind = ctx.table_value("place_kind", lambda: ctx.rng.choice(PLACE_KINDS))
    if kind == "settlement":
        return fill(ctx, ctx.rng.choice(vocab.SETTLEMENT_PATTERNS))
    if not ctx.cue():
        return fill(ctx, ctx.rng.choice(vocab.NEUTRAL_PLACE_PATTERNS))
    return fill(ctx, ctx.rng.choice(vocab.HUB_PATTERNS if kind == "hub" else vocab.PLACE_PATTERNS))


def sports_event_name(ctx: TableContext, row: Row) -> str:
    if ctx.cue():
        (_, home), (_, away) = teams(ctx, row)
        return fill(ctx, ctx.rng.choice(vocab.SPORTS_EVENT_PATTERNS), home=home, away=away)
    return fill(ctx, ctx.rng.choice(vocab.NEUTRAL_EVENT_PATTERNS))


def series(ctx: TableContext, row: Row) -> str:
    pool = ctx.table_value("series", lambda: tuple(fill(ctx, ctx.rng.choice(vocab.SERIES_PATTERNS))
                                                   for _ in range(ctx.rng.choice((1, 1, 2, 3)))))
    return row.get("series", lambda: ctx.rng.choice(pool))


def album(ctx: TableContext, row: Row) -> str:
    pool = ctx.table_value("albums", lambda: tuple(creative_title(ctx, vocab.ALBUM_TITLE_CUES)
                                                   for _ in range(ctx.rng.randint(1, 4))))
    return row.get("album", lambda: ctx.rng.choice(pool))


def organisation(ctx: TableContext, row: Row) -> str:
    """A company, bank, school or agency; in corner cases mostly bare names ("Boskalis") that
    could as well be brands."""
    r = ctx.rng.random()
    if r < (0.7 if ctx.hard else 0.3):
        return ctx.providers.finance.company()
    if not ctx.hard and r < 0.5:
        return fill(ctx, ctx.rng.choice(vocab.INSTITUTION_PATTERNS))
    return ctx.fake.company()


def publisher(ctx: TableContext, row: Row) -> str:
    if ctx.hard or ctx.rng.random() < 0.5:
        return organisation(ctx, row)
    return fill(ctx, ctx.rng.choice(("{Last} Verlag", "{X} Press", "{Last} & {Last} Publishing",
                                     "Éditions {Last}", "{Last} Books", "{City} University Press",
                                     "{Adj} {Noun} Records")))


def production_company(ctx: TableContext, row: Row) -> str:
    if ctx.hard or ctx.rng.random() < 0.4:
        return organisation(ctx, row)
    return fill(ctx, ctx.rng.choice(("{Last} Pictures", "{Adj} {Noun} Films", "{X} Studios",
                                     "{Last} Entertainment", "{Noun} Productions")))


def organizer(ctx: TableContext, row: Row) -> str:
    if ctx.hard or ctx.rng.random() < 0.5:
        return organisation(ctx, row)
    return fill(ctx, ctx.rng.choice(("{City} Jazz Society", "{City} Tourism Board", "Friends of {X}",
                                     "{City} Chamber Orchestra", "{Last} Events", "{City} Sports Club")))


# ----------------------------------------------------------------------------- identifiers


def gs1_check_digit(body: str) -> str:
    """The GS1 mod-10 check digit of `body` (GTIN-8/12/13/14 without their last digit)."""
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(body)))
    return str((10 - total % 10) % 10)


def gtin(ctx: TableContext, row: Row) -> str:
    def make() -> str:
        length = ctx.table_value("gtin_length", lambda: ctx.rng.choice((13, 13, 13, 12, 8, 14)))
        body = "".join(str(ctx.rng.randint(0, 9)) for _ in range(length - 1))
        if length == 14:
            body = "0" + body[1:]
        return body + gs1_check_digit(body)
    return row.get("gtin", make)


def product_id(ctx: TableContext, row: Row) -> tuple[int, str, str]:
    letters = "".join(ctx.rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(ctx.rng.randint(2, 3)))
    ean = "".join(str(ctx.rng.randint(0, 9)) for _ in range(12))
    number = ctx.rng.randint(10000, 99999) if ctx.hard else ctx.rng.randint(1000, 9_999_999)
    return number, letters, ean + gs1_check_digit(ean)


def isrc(ctx: TableContext, row: Row) -> tuple[str, str, str, str]:
    r = ctx.rng
    return (r.choice(("US", "GB", "DE", "FR", "NL", "SE")),
            "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(3)),
            f"{r.randint(0, 99):02d}", f"{r.randint(0, 99999):05d}")


def category_code(ctx: TableContext, row: Row) -> str:
    if ctx.table_value("code_scheme", lambda: ctx.rng.random() < 0.6):
        return str(ctx.rng.randint(1, 6000))  # Google product taxonomy ids
    return f"{ctx.rng.randint(10, 95)}{ctx.rng.randint(100000, 999999)}"  # UNSPSC, 8 digits


def occupation_code(ctx: TableContext, row: Row) -> str:
    if ctx.rng.random() < 0.5:
        return ctx.rng.choice(vocab.OCCUPATION_CODES)
    return f"{ctx.rng.randint(11, 53)}-{ctx.rng.randint(1000, 9199)}.00"


# ----------------------------------------------------------------------------- amounts and numbers


def price(low: float, high: float) -> Draw:
    def draw(ctx: TableContext, row: Row) -> float:
        def make() -> float:
            whole = math.floor(log_uniform(ctx, low, high))
            cents = ctx.rng.choice((0.99, 0.95, 0.0, 0.0, 0.5, ctx.rng.randint(0, 99) / 100))
            return round(whole + cents, 2)
        return row.get("price", make)
    return draw


def gross(ctx: TableContext, row: Row) -> int:
    """A film's worldwide takings in whole dollars, log-uniform over $0.5 M-$2.5 bn."""
    return row.get("gross", lambda: round(log_uniform(ctx, 5e5, 2.5e9)))


def percent_score(ctx: TableContext, row: Row) -> int:
    """A critics' score in percent: most films listed are liked by most critics."""
    return row.get("percent", lambda: min(100, max(0, round(100 - abs(ctx.rng.gauss(0, 30))))))


def price_range(ctx: TableContext, row: Row) -> tuple[int, int, int]:
    level = ctx.rng.randint(1, 4)
    low = ctx.rng.choice((5, 8, 10, 12, 15, 20, 25, 30, 40, 50)) * level
    return level, low, low + ctx.rng.choice((10, 15, 20, 30, 50)) * level


def salary(ctx: TableContext, row: Row) -> tuple[int, int, str]:
    if ctx.rng.random() < 0.75:
        low = ctx.rng.randint(25, 110) * 1000
        return low, low + ctx.rng.randint(5, 30) * 1000, "year"
    low = ctx.rng.randint(12, 55)
    return low, low + ctx.rng.randint(2, 15), "hour"


def rating(ctx: TableContext, row: Row) -> tuple[float, int, int]:
    """(value, best, worst) with worst ≤ value ≤ best.

    A site keeps one scale; in corner cases rows mix 5- and 10-point scales and values are
    whole stars, so "5" may be a best rating or a rating and only the row tells which.
    """
    def scale() -> tuple[int, int]:
        if ctx.hard:
            return ctx.rng.choice((5, 10)), ctx.rng.choice((1, 1, 0))
        return ctx.rng.choices((5, 10, 100), (0.75, 0.15, 0.1))[0], ctx.rng.choice((1, 1, 1, 0))

    def make() -> tuple[float, int, int]:
        best, worst = scale() if ctx.hard else ctx.table_value("rating_scale", scale)
        if ctx.hard:
            return ctx.rng.randint(worst, best), best, worst
        value = ctx.rng.uniform(max(worst, best * 0.45), best)
        return (round(value) if best == 100 else round(value, 1)), best, worst
    return row.get("rating", make)


def pages(ctx: TableContext, row: Row) -> int:
    return ctx.rng.randint(12, 64) if ctx.hard else int(log_uniform(ctx, 48, 1200))


def tracks(ctx: TableContext, row: Row) -> int:
    return ctx.rng.randint(6, 30) if ctx.hard else ctx.rng.randint(8, 22)


def episode_number(ctx: TableContext, row: Row) -> int:
    offset = ctx.table_value("episode_offset", lambda: ctx.rng.choice((0, 0, 0, 10, 12, 20)))
    return offset + row.index + 1


def copyright_year(ctx: TableContext, row: Row) -> int:
    return published_date(ctx, row).year


# ----------------------------------------------------------------------------- languages, units, delivery


def delivery_method(ctx: TableContext, row: Row) -> tuple[str, str]:
    carriers = tuple((g, g) for g in vocab.GOODRELATIONS_CARRIERS)  # GoodRelations names, not schema.org
    return ctx.rng.choice(vocab.ENUMS["DeliveryMethod"] + carriers)


def language(ctx: TableContext, row: Row) -> str:
    if ctx.rng.random() < 0.7:
        return ctx.lang if any(ctx.lang == entry[0] for entry in vocab.LANGUAGES) else "en"
    return ctx.rng.choice(vocab.LANGUAGES)[0]


def languages(ctx: TableContext, row: Row) -> tuple[str, ...]:
    first = language(ctx, row)
    others = [e[0] for e in vocab.LANGUAGES[:6] if e[0] != first]
    return (first, *ctx.rng.sample(others, ctx.rng.randint(0, 2)))


def unit(ctx: TableContext, row: Row) -> tuple[str, str]:
    return row.get("unit", lambda: ctx.rng.choice(vocab.UNITS))


def currencies(ctx: TableContext, row: Row) -> tuple[str, ...]:
    others = [c[0] for c in vocab.CURRENCIES[:4] if c[0] != ctx.currency]
    if ctx.rng.random() < 0.3:
        others.append(ctx.rng.choice(F.WORLD_CURRENCIES)[0])
    return (ctx.currency, *ctx.rng.sample(others, ctx.rng.choice((0, 0, 1, 2))))


def price_currency(ctx: TableContext, row: Row) -> tuple[str]:
    """The site's currency; a marketplace's rows may each have their own."""
    if ctx.table_value("multi_currency", lambda: ctx.rng.random() < 0.2):
        return (currency_code(ctx, row),)
    return (ctx.currency,)


# ----------------------------------------------------------------------------- lists and texts


def ingredients(ctx: TableContext, row: Row) -> tuple[str, ...]:
    food = ctx.providers.food
    basics = ("flour", "sugar", "eggs", "butter", "milk", "salt", "olive oil", "onion", "garlic", "water")
    items = []
    for _ in range(ctx.rng.randint(3, 8)):
        what = ctx.rng.choice((food.vegetable, food.fruit, food.spices, lambda: ctx.rng.choice(basics)))()
        items.append(f"{ctx.rng.choice(vocab.INGREDIENT_AMOUNTS)} {what.lower()}")
    return tuple(items)


def instructions(ctx: TableContext, row: Row) -> tuple[str, ...]:
    steps = ctx.rng.sample(vocab.INSTRUCTION_STEPS, ctx.rng.randint(2, 6))
    return tuple(fill(ctx, s) for s in steps)


# Domains whose description has a CTA label: they share neutral texts so that only the table
# tells Book/description from Movie/description. The others always describe their domain.
NEUTRAL_DESCRIPTION_DOMAINS = ("Book", "Event", "Hotel", "JobPosting", "Movie", "Product", "Recipe")


def description(domain: str) -> Draw:
    """Domain-flavoured text, or (when the table hides clues) text any domain could carry."""
    def draw(ctx: TableContext, row: Row) -> str:
        templates = vocab.DESCRIPTION_TEMPLATES[domain]
        if not ctx.cue() and domain in NEUTRAL_DESCRIPTION_DOMAINS:
            templates = vocab.NEUTRAL_DESCRIPTIONS
        text = fill(ctx, ctx.rng.choice(templates))
        if ctx.rng.random() < 0.3:
            text += " " + ctx.fake.sentence()
        return text
    return draw


def review(ctx: TableContext, row: Row) -> str:
    text = f"{ctx.rng.choice(vocab.REVIEW_OPENERS)}! {ctx.rng.choice(vocab.REVIEW_BODIES)}"
    if ctx.rng.random() < 0.3:
        text += " " + ctx.fake.sentence()
    if ctx.rng.random() < 0.2:
        text += f" – {ctx.fake.first_name()}"
    return text


def experience(ctx: TableContext, row: Row) -> str:
    n = ctx.rng.randint(1, 8)
    return fill(ctx, ctx.rng.choice(vocab.EXPERIENCE_REQUIREMENTS), n=n, m=n + ctx.rng.randint(1, 4),
                field=ctx.rng.choice(vocab.EXPERIENCE_FIELDS))


# ----------------------------------------------------------------------------- registries: counts, codes, flags


def count(key: str, low: float, high: float) -> Draw:
    """A whole number, log-uniform in [low, high] (sizes of towns, firms, venues, crowds)."""
    return latent(key, lambda c, r: int(round(log_uniform(c, low, high))))


# A firm's figures as annual reports and rankings list them, relative to its revenue (profit may be
# a loss), in the table's unit: billions (a ranking of the largest firms: "12.34", "-0.87") or
# millions ("12,345.6"); the header names the unit, the cells are bare numbers.
FIGURE_SHARES = {"revenue": (1.0, 1.0), "profit": (-0.12, 0.22), "market_value": (0.2, 5.0), "assets": (0.5, 12.0)}


def figure(key: str) -> Draw:
    """One of a firm's figures (`FIGURE_SHARES`), a float in the table's unit."""
    def make(ctx: TableContext, row: Row) -> float:
        revenue = row.get("revenue", lambda: log_uniform(ctx, 0.2, 250.0))
        low, high = FIGURE_SHARES[key]
        share = 1.0 if key == "revenue" else (ctx.rng.uniform(low, high) if low < 0 else log_uniform(ctx, low, high))
        unit = ctx.table_value("figure_unit", lambda: 1.0 if ctx.rng.random() < 0.6 else 1000.0)
        return revenue * share * unit
    return latent(f"figure_{key}", make)


def year(key: str, first: int, last: int) -> Draw:
    """A year (founded, built, admitted), later years likelier."""
    return latent(key, lambda c, r: last - int((last - first) * c.rng.random() ** 1.6))


def measure(low: float, high: float) -> Draw:
    """A unitless decimal measurement (fuel economy, a score, a ratio)."""
    return lambda c, r: round(c.rng.uniform(low, high), c.rng.choice((1, 1, 2)))


def area_km2(ctx: TableContext, row: Row) -> float:
    """Square kilometres: parks and districts to countries, one scale per table."""
    low, high = ctx.table_value("area_scale", lambda: ctx.rng.choice(((0.5, 200), (20, 20_000),
                                                                        (500, 2_000_000))))
    return row.get("area", lambda: round(log_uniform(ctx, low, high), 1))


def elevation_m(ctx: TableContext, row: Row) -> float:
    """Metres above sea level: mostly low, a few mountains."""
    return row.get("elevation", lambda: max(-20.0, round(ctx.rng.expovariate(1 / 350.0))))


def identifier(column: str, styles: tuple[str, ...] = vocab.IDENTIFIER_STYLES) -> Draw:
    """A code in one of `styles` per table and column (see `vocab.IDENTIFIER_STYLES`); some
    registries number their rows in sequence ("001", "002", …), as FIPS or catalogue numbers do,
    and some share a prefix down the column (ICAO codes of one country)."""
    def draw(ctx: TableContext, row: Row) -> str:
        style = ctx.table_value(f"id_style/{column}", lambda: ctx.rng.choice(styles))
        if set(style) == {"9"} and ctx.table_value(f"id_sequence/{column}", lambda: ctx.rng.random() < 0.3):
            start = ctx.table_value(f"id_start/{column}", lambda: ctx.rng.randint(0, 10 ** (len(style) - 1)))
            step = ctx.table_value(f"id_step/{column}", lambda: ctx.rng.choice((1, 1, 2, 3, 5, 10)))
            return f"{(start + step * (row.index + 1)) % 10 ** len(style):0{len(style)}d}"
        prefix = ""
        if "P" in style:
            prefix = ctx.table_value(f"id_prefix/{column}", lambda: "".join(
                ctx.rng.choice("ABCDEFGHIJKLMNOPRSTUVWYZ") for _ in range(style.count("P"))))
        return F.identifier_from_style(ctx, style, prefix)
    return draw


def flag(ctx: TableContext, row: Row) -> tuple[str, str]:
    """A yes/no fact as ("True", "yes") or ("False", "no") (the `vocab.ENUMS["Boolean"]` members);
    one table's column leans one way (most states are not territories)."""
    share = ctx.table_value("flag_share", lambda: ctx.rng.choice((0.05, 0.2, 0.5, 0.8, 0.95)))
    return vocab.ENUMS["Boolean"][0 if ctx.rng.random() < share else 1]


def event_weekday(ctx: TableContext, row: Row) -> int:
    return event_start(ctx, row).weekday()


def currency_code(ctx: TableContext, row: Row) -> str:
    """An ISO 4217 code: the table's geography's currency mostly, else any of Faker's."""
    if ctx.rng.random() < 0.6:
        return vocab.COUNTRY_FACTS[ctx.geo.country][1]
    return ctx.rng.choice(F.WORLD_CURRENCIES)[0]


def spoken_languages(ctx: TableContext, row: Row) -> tuple[str, ...]:
    """One to three language names, in the site's language (mimesis) or in English (Faker)."""
    local = ctx.table_value("language_names_local", lambda: ctx.rng.random() < 0.5)
    n = ctx.rng.choice((1, 1, 1, 2, 3))
    if local:
        return tuple(dict.fromkeys(ctx.providers.people.language() for _ in range(n)))
    return tuple(dict.fromkeys(ctx.rng.choice(F.WORLD_LANGUAGE_NAMES) for _ in range(n)))


# ----------------------------------------------------------------------------- other subjects


def listed_country(ctx: TableContext, row: Row):
    """The country a row of a country table is about: one of Faker's 195 (name, codes, capital)."""
    return row.get("listed_country", lambda: ctx.rng.choice(F.WORLD_COUNTRIES))


def listed_country_currency(ctx: TableContext, row: Row) -> tuple[str]:
    code = listed_country(ctx, row).alpha_2_code
    if code in vocab.COUNTRY_FACTS:
        return (vocab.COUNTRY_FACTS[code][1],)
    return (ctx.rng.choice(F.WORLD_CURRENCIES)[0],)
