"""Per-table and per-row state shared by the value generators.

A `TableContext` is what one web site would hold fixed: locale, currency, domain name, how
often names carry a clue to their class. A `Row` memoises latent facts of one entity
(its start time, its phone number, its given name) so that every column of the row that
depends on the fact agrees with the others: the fax shares the telephone's prefix, the end
date follows the start date, `givenName` is the first word of the subject's name.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import mimesis
from faker import Faker
from mimesis.locales import Locale

from aegir.errors import ConfigError

from . import vocab


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from `parts`, stable across processes (unlike `hash()`)."""
    text = "/".join(str(p) for p in ("aegir-synth", *parts))
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


@dataclass
class Providers:
    """One Faker and a few mimesis providers for a locale, created once and reseeded per table.

    Creating Faker objects is slow; reseeding is cheap, and a reseeded provider gives the same
    draws whatever it produced before, so tables stay independent of generation order.
    """

    fake: Faker
    food: mimesis.Food
    people: mimesis.Person
    finance: mimesis.Finance
    text: mimesis.Text
    address: mimesis.Address

    def reseed(self, seed: int) -> None:
        self.fake.seed_instance(seed)
        for offset, provider in enumerate((self.food, self.people, self.finance, self.text, self.address)):
            provider.reseed(seed + offset + 1)


def _mimesis_locale(locale: str) -> Locale:
    lang, _, region = locale.replace("-", "_").partition("_")
    by_value = {member.value: member for member in Locale}
    for key in (f"{lang}-{region}".lower(), lang.lower()):
        if key in by_value:
            return by_value[key]
    return Locale.EN


def _stabilise(fake: Faker) -> None:
    """Sort word pools that Faker builds from a set, so draws do not depend on the hash seed.

    Faker 40's it_IT address provider builds `cities` as `list({...})`, whose order changes
    with PYTHONHASHSEED; a seeded draw from it then differs between processes. Sorting a
    uniform pool changes no distribution. (Tuples and weighted OrderedDicts are left alone.)
    """
    for provider in fake.providers:
        for name in ("cities",):
            pool = getattr(provider, name, None)
            if isinstance(pool, list) and all(isinstance(x, str) for x in pool):
                setattr(provider, name, sorted(pool))


@cache
def providers_for(locale: str) -> Providers:
    try:
        fake = Faker(locale)
    except AttributeError:
        raise ConfigError(f"synthetic.locales: Faker has no locale {locale!r}") from None
    _stabilise(fake)
    mloc = _mimesis_locale(locale)
    return Providers(fake=fake, food=mimesis.Food(mloc), people=mimesis.Person(mloc),
                     finance=mimesis.Finance(mloc), text=mimesis.Text(mloc), address=mimesis.Address(mloc))


@cache
def place_namer(mimesis_locale: str) -> mimesis.Address:
    """mimesis's namer of one country's places (created once, reseeded per table by `GeoFrame`)."""
    return mimesis.Address(Locale(mimesis_locale))


@dataclass(frozen=True)
class GeoFrame:
    """The country a table's places lie in: the site's own (`home`) or one abroad.

    Cities, regions, streets, postcodes and coordinates of the table come from it, so a site
    in Germany may list airports in Brazil, named as Brazilians name them.
    """

    country: str  # ISO 3166 alpha-2, a key of vocab.COUNTRY_FACTS
    namer: mimesis.Address  # reseeded for this table
    home: bool

    @property
    def bbox(self) -> tuple[float, float, float, float]:
        return vocab.COUNTRY_FACTS[self.country][2]


ABROAD_RATE = 0.4  # share of tables about places in another country than the site's


@dataclass
class TableContext:
    """What stays fixed over one table (one web site's page)."""

    rng: random.Random
    providers: Providers
    locale: str  # Faker locale, e.g. "de_DE"
    lang: str  # "de"
    country: str  # ISO 3166 alpha-2 of the locale, e.g. "DE"
    currency: str  # ISO 4217 code used by this site's prices
    site: str  # the site's domain name, shared by its URLs and e-mail addresses
    cue_rate: float  # chance that one name or description carries a clue to its class
    hard: bool  # a corner-case table: telltale formats are left out
    seed: int = 0  # the table's seed (for providers first used mid-table)
    catalogue: bool = False  # its products may be real ones (latents.catalogue_item): `specialist_train` only
    memo: dict[str, Any] = field(default_factory=dict)

    @property
    def fake(self) -> Faker:
        return self.providers.fake

    def cue(self) -> bool:
        return self.rng.random() < self.cue_rate

    def table_value(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    @property
    def facts(self) -> tuple[str, str, tuple[float, float, float, float], str]:
        return vocab.COUNTRY_FACTS.get(self.country, vocab.COUNTRY_FACTS["US"])

    @property
    def geo(self) -> GeoFrame:
        """Where this table's places are (drawn on first use, fixed for the table)."""
        def make() -> GeoFrame:
            if self.country in vocab.PLACE_LOCALES and self.rng.random() >= ABROAD_RATE:
                return GeoFrame(self.country, self.providers.address, home=True)
            latin = [c for c in vocab.PLACE_LOCALES if c not in vocab.NON_LATIN_PLACES and c != self.country]
            pool = vocab.NON_LATIN_PLACES if self.rng.random() < 0.15 else latin
            country = pool[self.rng.randrange(len(pool))]
            namer = place_namer(vocab.PLACE_LOCALES[country])
            namer.reseed(derive_seed(self.seed, "geo", country))
            return GeoFrame(country, namer, home=False)
        return self.table_value("geo", make)


class Row:
    """Latent facts of one entity, each drawn once, on first use."""

    __slots__ = ("index", "values")

    def __init__(self, index: int):
        self.index = index
        self.values: dict[str, Any] = {}

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.values:
            self.values[key] = make()
        return self.values[key]


def make_context(locale: str, seed: int, *, hard: bool, cue_rate: float, catalogue: bool = False) -> TableContext:
    providers = providers_for(locale)
    providers.reseed(seed)
    rng = random.Random(seed)
    lang, _, region = locale.partition("_")
    country = region.upper() if region.upper() in vocab.COUNTRY_FACTS else "US"
    currency = vocab.COUNTRY_FACTS[country][1]
    if rng.random() < 0.1:  # some sites price in a foreign currency
        currency = rng.choice(("EUR", "USD", "GBP"))
    site = providers.fake.domain_name()
    return TableContext(rng=rng, providers=providers, locale=locale, lang=lang, country=country,
                        currency=currency, site=site, cue_rate=cue_rate, hard=hard, seed=seed,
                        catalogue=catalogue)


# ----------------------------------------------------------------------------- templates

_PLACEHOLDER = re.compile(r"\{(\w+)(?::([^}]*))?\}")


def _words(ctx: TableContext) -> str:
    words = ctx.fake.words(ctx.rng.randint(1, 3))
    return " ".join(words).capitalize()


def _x(ctx: TableContext) -> str:
    """A name core for places: a surname, a city, a first name or an adjective + noun."""
    pick = ctx.rng.random()
    if pick < 0.35:
        return ctx.fake.last_name()
    if pick < 0.6:
        return ctx.fake.city()
    if pick < 0.75:
        return ctx.fake.first_name()
    return f"{ctx.rng.choice(vocab.PLACE_ADJECTIVES)} {ctx.rng.choice(vocab.PLACE_NOUNS)}"


_ROMAN = ("II", "III", "IV", "V")


def plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "o", "u"):
        return noun[:-1] + "ies"
    return noun + "s"


def with_article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun
_ORDINALS = ("first", "second", "third", "fourth", "fifth")

# Placeholder → how to draw it. Capitalised names are for names and titles, lower-case ones
# for running text; each occurrence is drawn afresh.
RESOLVERS: dict[str, Callable[[TableContext], Any]] = {
    "City": lambda c: c.fake.city(), "city": lambda c: c.fake.city(),
    "First": lambda c: c.fake.first_name(), "first": lambda c: c.fake.first_name(),
    "Last": lambda c: c.fake.last_name(),
    "person": lambda c: f"{c.fake.first_name()} {c.fake.last_name()}",
    "Adj": lambda c: c.rng.choice(vocab.TITLE_ADJECTIVES), "Noun": lambda c: c.rng.choice(vocab.TITLE_NOUNS),
    "Adj2": lambda c: c.rng.choice(vocab.PLACE_ADJECTIVES),
    "Noun2": lambda c: c.rng.choice(vocab.PLACE_NOUNS),
    "X": _x, "Words": _words,
    "Nouns": lambda c: plural(c.rng.choice(vocab.TITLE_NOUNS)),
    "noun": lambda c: c.rng.choice(vocab.TITLE_NOUNS).lower(),
    "nouns": lambda c: plural(c.rng.choice(vocab.TITLE_NOUNS).lower()),
    "a_noun": lambda c: with_article(c.rng.choice(vocab.TITLE_NOUNS).lower()),
    "Genre": lambda c: c.rng.choice(vocab.MUSIC_GENRES), "genre": lambda c: c.rng.choice(vocab.MUSIC_GENRES),
    "Topic": lambda c: c.rng.choice(vocab.EVENT_TOPICS + vocab.MUSEUM_TOPICS),
    "Season": lambda c: c.rng.choice(vocab.SEASONS), "Mascot": lambda c: c.rng.choice(vocab.MASCOTS),
    "Work": lambda c: c.rng.choice(vocab.WORK_PERFORMED),
    "Venue": lambda c: fill(c, c.rng.choice(vocab.VENUE_PATTERNS)),
    "year": lambda c: c.rng.randint(1995, 2025), "n": lambda c: c.rng.randint(2, 9),
    "n2": lambda c: c.rng.randint(10, 99), "club_year": lambda c: c.rng.choice((1, 4, 5, 7, 9, 46, 96, 98)), "m": lambda c: c.rng.choice((10, 15, 20, 25, 30, 40, 45, 60)),
    "s": lambda c: c.rng.randint(1, 8), "hour": lambda c: c.rng.randint(17, 21),
    "temp": lambda c: c.rng.choice((160, 180, 190, 200, 220)),
    "roman": lambda c: c.rng.choice(_ROMAN), "ordinal": lambda c: c.rng.choice(_ORDINALS),
    "sentence": lambda c: c.fake.sentence(), "job": lambda c: c.fake.job(),
    "material": lambda c: c.rng.choice(vocab.MATERIALS).lower(),
    "colour": lambda c: c.providers.text.color().lower(),
    "dish": lambda c: c.providers.food.dish(), "veg": lambda c: c.providers.food.vegetable().lower(),
    "fruit": lambda c: c.providers.food.fruit().lower(), "spice": lambda c: c.providers.food.spices().lower(),
    "cuisine": lambda c: c.rng.choice(vocab.CUISINES),
    "title": lambda c: fill(c, c.rng.choice(vocab.TITLE_PATTERNS)),
    "artist": lambda c: f"{c.fake.first_name()} {c.fake.last_name()}",
    "Region": lambda c: c.geo.namer.state(), "Town": lambda c: c.geo.namer.city().strip(),
    "Saint": lambda c: c.rng.choice(vocab.SAINTS),
    "Ordinal": lambda c: c.rng.choice(vocab.ORDINAL_WORDS),
    **{key: (lambda pool: lambda c: c.rng.choice(pool))(pool)  # noqa: B023 (bound by the outer call)
       for key, pool in {**vocab.SAINTS_BY_LANG, **vocab.NOUNS_BY_LANG}.items()},
}


def fill(ctx: TableContext, pattern: str, **given: Any) -> str:
    """Fill `{Name}` / `{name:02d}` placeholders: `given` first, else a fresh draw."""

    def one(match: re.Match) -> str:
        name, spec = match.group(1), match.group(2)
        value = given[name] if name in given else RESOLVERS[name](ctx)
        return format(value, spec) if spec else str(value)

    return _PLACEHOLDER.sub(one, pattern)
