"""Value kinds: what a column's cells are, as a latent draw plus the ways to write it.

A `Kind` draws one latent value per row (`draw(ctx, row)`, see `latents`) and renders it with
one of its `formats` (see `formats`). Kinds with a single format are plain text (names,
descriptions); kinds with several are the ones a column can mix (dates, prices, phones,
enumerations, units). `SUBJECTS` names each domain's entities, `K` holds the property kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime

from . import formats as F
from . import latents as L
from . import vocab
from .context import Row, TableContext


@dataclass(frozen=True)
class Kind:
    """A value type: a latent draw and the formats that write it as a string."""

    name: str
    draw: L.Draw
    formats: tuple[F.Formatter, ...] = (F.as_is,)
    preferred: Callable[[TableContext], tuple[int, ...]] | None = None  # styles a site of this locale picks
    cue_formats: tuple[int, ...] = ()  # styles that give the label away; kept out of corner-case tables
    hard_preferred: tuple[int, ...] = ()  # styles corner-case tables favour (the most confusable ones)
    recase: bool = False  # words whose case a site may change (all lower, ALL UPPER) for a column

    @property
    def mixable(self) -> bool:
        return len(self.formats) > 1


def by_locale(table: dict[str, tuple[int, ...]], default: tuple[int, ...] = (0,)):
    def preferred(ctx: TableContext) -> tuple[int, ...]:
        return table.get(ctx.locale) or table.get(ctx.lang) or default
    return preferred


# Decimal degrees at full or at the table's precision; sites in comma-decimal languages write
# a comma (see `formats.COORDINATE_FORMATS`).
COORDINATE_HABITS = by_locale({"en": (0, 1, 6, 7, 7)}, default=(0, 1, 6, 7, 8, 8))


def _as_datetime(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, 0, 0)


def date_kind(name: str, draw: Callable[[TableContext, Row], date]) -> Kind:
    def as_date(c: TableContext, r: Row) -> date:
        value = draw(c, r)
        return value.date() if isinstance(value, datetime) else value
    return Kind(name, as_date, F.DATE_FORMATS, by_locale(F.PREFERRED_DATE))


def datetime_kind(name: str, draw: Callable[[TableContext, Row], datetime]) -> Kind:
    def as_datetime(c: TableContext, r: Row) -> datetime:
        value = draw(c, r)
        return value if isinstance(value, datetime) else _as_datetime(value)
    return Kind(name, as_datetime, F.DATETIME_FORMATS, by_locale(F.PREFERRED_DATETIME))


def year_or_date_kind(name: str, draw: Callable[[TableContext, Row], date]) -> Kind:
    """A date that listings often cut to its year (a film's or a record's release): the date
    formats plus the year alone, which a site picks about as often as its usual date style."""
    dated = date_kind(name, draw)
    year = len(F.DATE_FORMATS)
    locale_styles = dated.preferred

    def preferred(ctx: TableContext) -> tuple[int, ...]:
        styles = locale_styles(ctx)
        return styles + (year,) * max(1, len(styles) // 2)
    return Kind(name, dated.draw, (*F.DATE_FORMATS, F.YEAR_FORMAT), preferred)


def time_kind(name: str, draw: Callable[[TableContext, Row], tuple[int, int]]) -> Kind:
    return Kind(name, draw, F.TIME_FORMATS, by_locale(F.PREFERRED_TIME))


def enum_kind(name: str, enum: str) -> Kind:
    return Kind(name, L.pick(vocab.ENUMS[enum]), F.ENUM_FORMATS, lambda c: F.PREFERRED_ENUM)


# grams: parcels in general, small packs in corner cases (where they could be servings)
GRAMS_PRODUCT = L.latent("weight", lambda c, r: round(L.log_uniform(c, 50, 500 if c.hard else 25000)))
DURATION = (F.DURATION_FORMATS, by_locale(F.PREFERRED_DURATION))
MONEY = (F.MONEY_FORMATS, by_locale(F.PREFERRED_MONEY))


def subject(name: str, draw: L.Draw) -> Kind:
    """A subject column; the name is memoised as `name` so the row's URL and e-mail can use it."""
    return Kind(name, L.latent("name", draw), recase=True)


def words(name: str, draw: L.Draw, *formats: F.Formatter) -> Kind:
    """Plain words (names, places, categories) that a site may write in any case."""
    return Kind(name, draw, formats or (F.as_is,), recase=True)


def count_kind(name: str, draw: L.Draw) -> Kind:
    return Kind(name, draw, F.COUNT_FORMATS, lambda c: F.PREFERRED_COUNT)


def titled(cues: tuple[str, ...]) -> L.Draw:
    return lambda c, r: L.creative_title(c, cues)


# domain → the kind of its subject column (CTA `<domain>/name`)
SUBJECTS: dict[str, Kind] = {
    "Book": subject("book_title", titled(vocab.BOOK_TITLE_CUES)),
    "CreativeWork": subject("creative_work_title",
                            lambda c, r: L.article_title(c) if c.cue() else L.creative_title(c)),
    "Event": subject("event_name", L.event_name),
    "Hotel": subject("hotel_name", L.place_name(vocab.HOTEL_PATTERNS)),
    "JobPosting": subject("job_title", L.job_name),
    "LocalBusiness": subject("business_name", L.place_name(vocab.BUSINESS_PATTERNS)),
    "Movie": subject("movie_title", titled(vocab.MOVIE_TITLE_CUES)),
    "Museum": subject("museum_name", L.place_name(vocab.MUSEUM_PATTERNS)),
    "MusicAlbum": subject("album_title", titled(vocab.ALBUM_TITLE_CUES)),
    "MusicRecording": subject("recording_title", titled(vocab.RECORDING_TITLE_CUES)),
    "Person": Kind("person_name", L.latent("name_parts", L.full_name), F.PERSON_NAME_FORMATS, recase=True),
    "Place": subject("place_name", L.place_subject),
    "Product": subject("product_name", L.product_name),
    "Recipe": subject("recipe_name", L.recipe_name),
    "Restaurant": subject("restaurant_name", L.place_name(vocab.RESTAURANT_PATTERNS)),
    "SportsEvent": subject("sports_event_name", L.sports_event_name),
    "TVEpisode": subject("episode_title", L.episode_title),
}


# name → the kind of a property column, grouped as the domains use them
K: dict[str, Kind] = {k.name: k for k in (
    # people and organisations
    Kind("person", L.other_person, F.PERSON_NAME_FORMATS, recase=True),
    words("given_name", L.given_name), words("family_name", L.family_name),
    words("artist", L.artist),
    words("organisation", L.organisation), words("publisher", L.publisher),
    words("production_company", L.production_company), words("organizer", L.organizer),
    words("university", lambda c, r: c.providers.people.university()),
    words("brand", L.brand), Kind("model", L.model_name),
    words("home_team", lambda c, r: L.teams(c, r)[0][1]), words("away_team", lambda c, r: L.teams(c, r)[1][1]),
    words("job", lambda c, r: c.fake.job()),
    Kind("credential", L.pick(vocab.CREDENTIALS)),
    Kind("gender", L.gender, F.GENDER_FORMATS, lambda c: (0, 1, 2)),
    # places
    Kind("street", lambda c, r: L.address(c, r)["street"]),
    words("city", lambda c, r: L.address(c, r)["city"]),
    Kind("postcode", lambda c, r: L.address(c, r)["postcode"],
         (F.as_is, lambda c, p: f"{c.geo.country}-{p}"), lambda c: (0,), (1,)),
    Kind("region", lambda c, r: L.address(c, r),
         (lambda c, a: a["region"], lambda c, a: a["region_code"], lambda c, a: a["region_code"].split("-")[-1]),
         lambda c: (0, 0, 0, 1, 2), recase=True),
    Kind("country", lambda c, r: r.get("country", lambda: L.country_code(c, r, 0.9)), F.COUNTRY_FORMATS,
         lambda c: (0, 3, 3, 1, 2), hard_preferred=(1,), recase=True),
    Kind("nationality", lambda c, r: L.country_code(c, r, 0.6), F.COUNTRY_FORMATS, lambda c: (0, 3, 3, 1, 2),
         hard_preferred=(1,), recase=True),
    Kind("origin_country", lambda c, r: L.country_code(c, r, 0.4), F.COUNTRY_FORMATS, lambda c: (0, 3, 3, 1, 2),
         hard_preferred=(1,), recase=True),
    Kind("address", L.address, F.ADDRESS_FORMATS, lambda c: (0, 0, 1, 2, 3, 4)),
    words("birth_place", lambda c, r: L.city(c)),
    words("venue", L.pattern(vocab.VENUE_PATTERNS + vocab.NEUTRAL_PLACE_PATTERNS[:6])),
    words("event_city", lambda c, r: L.address(c, r)["city"]),
    Kind("home_venue", lambda c, r: c.rng.choice(("{c} Arena", "Stadion {c}", "{c} Stadium", "Sportpark {c}"))
         .format(c=L.teams(c, r)[0][0])),
    Kind("home_city", lambda c, r: L.teams(c, r)[0][0]),
    Kind("latitude", lambda c, r: ("lat", L.lat_lon(c, r)[0]), F.COORDINATE_FORMATS, COORDINATE_HABITS,
         F.COORDINATE_CUE_FORMATS),
    Kind("longitude", lambda c, r: ("lon", L.lat_lon(c, r)[1]), F.COORDINATE_FORMATS, COORDINATE_HABITS,
         F.COORDINATE_CUE_FORMATS),
    # contact
    Kind("telephone", L.telephone, F.PHONE_FORMATS, lambda c: (0, 0, 1, 2), F.PHONE_CUE_FORMATS),
    Kind("fax", L.fax, F.PHONE_FORMATS, lambda c: (0, 0, 1, 2), F.PHONE_CUE_FORMATS),
    Kind("email", L.latent("email", L.email), (F.as_is, lambda c, e: f"mailto:{e}"), lambda c: (0,), (1,)),
    Kind("url", L.url_path, F.URL_FORMATS, lambda c: (0, 1, 2)),
    Kind("image", L.image_path, F.IMAGE_FORMATS),
    # dates and times
    datetime_kind("start_datetime", L.event_start), datetime_kind("end_datetime", L.event_end),
    date_kind("start_date", L.event_start), date_kind("end_date", L.event_end),
    date_kind("published", L.published_date), date_kind("created", L.created_date),
    year_or_date_kind("release", L.published_date),
    date_kind("birth_date", L.birth_date), date_kind("death_date", L.death_date),
    date_kind("posted", L.posted_date), date_kind("valid_through_date", L.valid_through),
    datetime_kind("valid_through", L.valid_through),
    datetime_kind("valid_from", L.latent("valid_from", lambda c, r: L.random_datetime(c, 2018, 2025))),
    datetime_kind("ticket_sale", L.ticket_sale),
    date_kind("release_date", L.latent("release", lambda c, r: L.random_date(c, 2005, 2025))),
    time_kind("check_in", L.check_in), time_kind("check_out", L.check_out),
    time_kind("opens", L.opening_time), time_kind("closes", L.closing_time),
    Kind("opening_hours", L.opening_spans, F.OPENING_HOURS_FORMATS, lambda c: (0, 0, 1, 2)),
    Kind("day_of_week", L.latent("day", lambda c, r: c.rng.randint(0, 6)), F.DAY_FORMATS,
         by_locale(F.PREFERRED_DAY, (0, 1, 2, 3))),
    Kind("event_weekday", L.event_weekday, F.DAY_FORMATS, by_locale(F.PREFERRED_DAY, (0, 4))),
    Kind("movie_duration", L.minutes("duration", 75, 185, 1), *DURATION),
    Kind("episode_duration", L.minutes("duration", 20, 65, 1), *DURATION),
    Kind("prep_time", L.minutes("prep", 5, 60), *DURATION),
    Kind("cook_time", L.minutes("cook", 10, 240), *DURATION),
    Kind("total_time", L.total_minutes, *DURATION),
    Kind("track_duration", L.latent("seconds", lambda c, r: c.rng.randint(95, 540)), F.TRACK_DURATION_FORMATS,
         lambda c: (0, 1)),
    # numbers and amounts
    Kind("pages", L.pages), Kind("tracks", L.tracks), Kind("episode_number", L.episode_number),
    Kind("copyright_year", L.copyright_year), Kind("edition", L.pick(vocab.EDITIONS)),
    Kind("rating_value", lambda c, r: L.rating(c, r)[0], F.RATING_FORMATS, lambda c: (0,)),
    Kind("best_rating", lambda c, r: L.rating(c, r)[1], F.SCALE_FORMATS, lambda c: (0,)),
    Kind("worst_rating", lambda c, r: L.rating(c, r)[2], F.SCALE_FORMATS, lambda c: (0,)),
    Kind("product_price", L.price(2, 1500), *MONEY),
    Kind("book_price", L.price(5, 45), *MONEY),
    Kind("ticket_price", L.price(8, 180), *MONEY),
    Kind("admission_price", L.price(3, 25), *MONEY),
    Kind("gross", L.gross, F.GROSS_FORMATS, by_locale(F.PREFERRED_GROSS, (0, 4))),
    Kind("percent_score", L.percent_score, F.PERCENT_FORMATS, lambda c: (0, 0, 1, 2)),
    Kind("price_range", L.price_range, F.PRICE_RANGE_FORMATS, lambda c: (0, 0, 1, 2), (0, 4, 6)),
    Kind("salary", L.salary, F.SALARY_FORMATS),
    Kind("currency", L.price_currency, F.CURRENCY_FORMATS, lambda c: (0, 0, 0, 4)),
    Kind("currencies", L.currencies, F.CURRENCY_FORMATS, lambda c: (0, 3)),
    Kind("product_weight", GRAMS_PRODUCT, F.MASS_FORMATS, lambda c: (0, 1, 3)),
    Kind("person_weight", L.latent("weight", lambda c, r: c.rng.randint(45, 120) * 1000), F.MASS_FORMATS,
         lambda c: (0, 1, 4)),
    Kind("serving_mass", L.latent("serving", lambda c, r: c.rng.randrange(30, 460, 10)), F.MASS_FORMATS,
         lambda c: (0, 2, 3, 5)),
    Kind("energy", L.latent("kcal", lambda c, r: c.rng.randint(80, 950)), F.ENERGY_FORMATS, lambda c: (0, 2)),
    Kind("length", L.latent("length", lambda c, r: round(L.log_uniform(c, 2, 250), 1)), F.DISTANCE_FORMATS,
         lambda c: (0, 1, 2)),
    Kind("height", L.latent("height", lambda c, r: c.rng.randint(150, 202)), F.DISTANCE_FORMATS,
         lambda c: (0, 1)),
    Kind("floor_size", L.latent("floor", lambda c, r: c.rng.randint(12, 85)),
         (lambda c, a: f"{a} m²", lambda c, a: f"{round(a * 10.764)} sq ft", lambda c, a: f"{a} sqm",
          lambda c, a: f"{a} m2")),
    Kind("recipe_yield", L.latent("yield", lambda c, r: c.rng.randint(1, 12)),
         (lambda c, n: f"{n} servings", lambda c, n: f"Serves {n}", lambda c, n: f"{n} portions",
          lambda c, n: f"{n} Portionen")),
    # identifiers and codes
    Kind("isbn", lambda c, r: c.fake.isbn13(), F.ISBN_FORMATS, lambda c: (0, 1), (0, 3)),
    Kind("gtin", L.gtin), Kind("product_id", L.product_id, F.PRODUCT_ID_FORMATS, lambda c: (0, 1, 2), (0, 2)),
    Kind("isrc", L.isrc, (lambda c, p: "".join(p), lambda c, p: "-".join(p))),
    Kind("category", L.pick(vocab.PRODUCT_CATEGORIES),
         (F.as_is, lambda c, s: s.replace(" > ", " / "), lambda c, s: s.replace(" > ", " › "),
          lambda c, s: s.replace(" > ", ">"))),
    Kind("category_code", L.category_code), Kind("occupation_code", L.occupation_code),
    Kind("unit_code", L.unit, (lambda c, u: u[0],)),
    Kind("unit_text", L.unit, tuple(F.unit_text_format(i) for i in range(3))),
    # enumerations
    enum_kind("availability", "ItemAvailability"), enum_kind("event_status", "EventStatusType"),
    enum_kind("item_condition", "OfferItemCondition"), enum_kind("book_format", "BookFormatType"),
    enum_kind("attendance_mode", "EventAttendanceModeEnumeration"), enum_kind("diet", "RestrictedDiet"),
    Kind("delivery", L.delivery_method, F.DELIVERY_FORMATS, lambda c: (0, 1)),
    Kind("boolean", L.flag, F.BOOLEAN_FORMATS, lambda c: (7, 7, 7, 7, 0, 1, 5)),
    Kind("language", L.language, F.LANGUAGE_FORMATS, lambda c: (0, 1, 2), hard_preferred=(0, 5)),
    Kind("languages", L.languages, tuple((lambda f: lambda c, codes: ", ".join(f(c, x) for x in codes))(f)  # noqa: B023 (bound)
                                        for f in F.LANGUAGE_FORMATS[:4]), lambda c: (2, 0)),
    # categories and genres
    words("book_genre", L.pick(vocab.BOOK_GENRES)), words("movie_genre", L.pick(vocab.MOVIE_GENRES)),
    words("music_genre", L.pick(vocab.MUSIC_GENRES)), words("work_genre", L.pick(vocab.CREATIVE_WORK_GENRES)),
    Kind("content_rating", L.pick(vocab.CONTENT_RATINGS)),
    Kind("cuisine", L.some(vocab.CUISINES, 1, 2), F.joined(", ", " / ", " | "), lambda c: (0,), recase=True),
    words("recipe_category", L.pick(vocab.RECIPE_CATEGORIES)),
    words("cooking_method", L.pick(vocab.COOKING_METHODS)),
    words("employment_type", L.pick(vocab.EMPLOYMENT_TYPES)),
    words("department", L.pick(vocab.DEPARTMENTS)),
    Kind("amenities", L.some(vocab.AMENITIES, 1, 4), F.joined(", ", " | ", "; "), lambda c: (0,)),
    Kind("payment", L.some(vocab.PAYMENT_METHODS, 1, 5), F.joined(", ", " | ", "; ", " / "), lambda c: (0,)),
    words("colour", lambda c, r: c.providers.text.color() if c.rng.random() < 0.5 else c.fake.color_name()),
    words("material", L.pick(vocab.MATERIALS)),
    # registries and directories: sizes, years, codes, measures
    count_kind("population", L.count("population", 300, 5e6)),
    count_kind("employees", L.count("employees", 3, 60000)),
    count_kind("rooms", L.count("rooms", 8, 900)),
    count_kind("seats", L.count("seats", 12, 400)),
    count_kind("capacity", L.count("capacity", 50, 90000)),
    count_kind("visitors", L.count("visitors", 1500, 5e6)),
    Kind("small_number", lambda c, r: c.rng.randint(1, 16)),
    *(Kind(f"figure_{key}", L.figure(key), F.FIGURE_FORMATS, by_locale(F.PREFERRED_FIGURE, (0, 1)))
      for key in L.FIGURE_SHARES),
    Kind("founding_year", L.year("founded", 1150, 2022)),
    Kind("model_year", L.year("model_year", 1968, 2025)),
    Kind("measure", L.measure(6, 60), F.MEASURE_FORMATS, lambda c: (1, 0)),
    Kind("area", L.area_km2, F.AREA_FORMATS, lambda c: (0, 1, 2, 3)),
    Kind("elevation", L.elevation_m, F.ELEVATION_FORMATS, lambda c: (0, 1, 2, 4)),
    Kind("identifier", L.identifier("a")), Kind("identifier_b", L.identifier("b")),
    Kind("place_code", L.identifier("place", vocab.PLACE_CODE_STYLES)),
    Kind("time_zone", lambda c, r: c.fake.timezone()),
    Kind("local_currency", L.currency_code, F.CURRENCY_CODE_FORMATS, lambda c: (0, 0, 0, 4)),
    Kind("spoken_languages", L.spoken_languages, F.joined(", ", "; ", " / "), lambda c: (0,)),
    words("place_category", L.pick(vocab.PLACE_CATEGORIES)),
    # columns of tables whose subject is a country, a postcode, an organisation or a team
    Kind("country_code_2", lambda c, r: L.listed_country(c, r).alpha_2_code, (F.COUNTRY_FORMATS[1],)),
    Kind("country_code_3", lambda c, r: L.listed_country(c, r).alpha_2_code, (F.COUNTRY_FORMATS[2],)),
    words("capital", lambda c, r: L.listed_country(c, r).capital),
    count_kind("country_population", L.count("population", 5e4, 1.4e9)),
    Kind("country_area", L.latent("area", lambda c, r: round(L.log_uniform(c, 300, 1.7e7))), F.AREA_FORMATS,
         lambda c: (0, 1, 2)),
    Kind("country_currency", L.listed_country_currency, F.CURRENCY_FORMATS, lambda c: (0, 0, 2)),
    words("team_city", lambda c, r: L.team(c, r)[0]),
    words("team_venue", lambda c, r: c.rng.choice(("{c} Arena", "Stadion {c}", "{c} Stadium", "{c} Center",
                                                  "{c} Coliseum")).format(c=L.team(c, r)[0])),
    # a league table's columns (`domains.STANDINGS_TABLE`)
    *(Kind(f"standing_{key}", lambda c, r, key=key: L.standing(c, r)[key])
      for key in ("played", "won", "drawn", "lost", "points", "position")),
    Kind("goal_difference", lambda c, r: L.standing(c, r)["for"] - L.standing(c, r)["against"],
         (F.as_is, lambda c, d: f"{d:+d}" if d else "0")),
    Kind("goals", lambda c, r: (L.standing(c, r)["for"], L.standing(c, r)["against"]),
         (lambda c, g: f"{g[0]}:{g[1]}", lambda c, g: f"{g[0]}-{g[1]}", lambda c, g: f"{g[0]} : {g[1]}")),
    words("org_category", L.pick(vocab.ORGANISATION_CATEGORIES)),
    # works
    Kind("series", L.series), Kind("album", L.album),
    Kind("track", lambda c, r: L.creative_title(c, vocab.RECORDING_TITLE_CUES)),
    Kind("work_performed", L.pick(vocab.WORK_PERFORMED)),
    Kind("headline", lambda c, r: L.article_title(c) if c.rng.random() < 0.5
         else c.fake.sentence(c.rng.randint(5, 10)).rstrip(".")),
    Kind("article_text", lambda c, r: c.fake.paragraph(c.rng.randint(3, 6))),
    Kind("review", L.review),
    Kind("ingredients", L.ingredients, F.LIST_FORMATS, lambda c: (0, 2)),
    Kind("instructions", L.instructions, F.STEPS_FORMATS, lambda c: (0, 1, 3)),
    # jobs
    Kind("education", L.pick(vocab.EDUCATION_REQUIREMENTS)), Kind("experience", L.experience),
    Kind("work_hours", L.pick(vocab.WORK_HOURS)),
)}


# subjects of the tables a domain's sites also publish (see `domains.SubjectVariant`)
OTHER_SUBJECTS: dict[str, Kind] = {
    "country": Kind("country_subject", lambda c, r: L.listed_country(c, r).alpha_2_code,
                    (F.COUNTRY_FORMATS[0], F.COUNTRY_FORMATS[3], F.COUNTRY_FORMATS[4]), lambda c: (0, 1, 1),
                    recase=True),
    "postcode": Kind("postcode_subject", L.latent("name", lambda c, r: L.address(c, r)["postcode"])),
    "organisation": subject("organisation_subject", L.organisation),
    "team": subject("team_subject", lambda c, r: L.team(c, r)[1]),
    # a list of towns names them as an address names its locality: only the table tells them apart
    "town": subject("town_subject", lambda c, r: L.city(c)),
}


# domain → the kind of its `description` column
DESCRIPTIONS: dict[str, Kind] = {
    domain: Kind(f"{domain}_description", L.description(domain)) for domain in vocab.DESCRIPTION_TEMPLATES
}
