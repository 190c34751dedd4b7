"""How a raw value is written into a cell: the `format` column of `columns.csv`.

Each format is a function `(value, locale) → str`; a missing value (None, "", empty list)
becomes a missing cell (None) before any format sees it. Localised formats use babel's CLDR
data, so a German page writes "80.783.000" and "03.10.2025" where an American one writes
"80,783,000" and "Oct 3, 2025" — the formats a site of that locale publishes, fixed per
layout, never drawn at random. Conversions (feet → metres, pounds → kilograms) round to
whole units, as such pages do.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import cache
from typing import Any

from babel import Locale
from babel.dates import format_date
from babel.numbers import format_currency, format_decimal

FEET_TO_METRES = 0.3048
POUNDS_TO_KILOGRAMS = 0.45359237
MILES_TO_KILOMETRES = 1.609344


def _grouped(value: Any, locale: str) -> str:
    return format_decimal(value, format="#,##0", locale=locale)


def _one_decimal(value: Any, locale: str) -> str:
    """One decimal, the locale's decimal sign: 6.4 / 6,4."""
    return format_decimal(value, format="0.0", locale=locale)


def _coordinate(value: Any, locale: str) -> str:
    return format_decimal(value, format="0.0###", locale=locale)


def _date(value: Any) -> dt.date:
    if not isinstance(value, dt.date):
        raise TypeError(f"expected a date, got {value!r}")
    return value


def _language_names(codes: Any, locale: str) -> str:
    names = Locale.parse(locale).languages
    return ", ".join(names.get(code, code) for code in codes)


def _country_name(code: Any, locale: str) -> str:
    return Locale.parse(locale).territories.get(code, code)


def _address_line(parts: Any, locale: str) -> str:
    *place, country = parts
    return ", ".join([p for p in place if p] + [_country_name(country, locale)])


def _weekday_name(index: Any, locale: str) -> str:
    return Locale.parse(locale).days["format"]["wide"][index]  # CLDR: 0 = Monday


def _yes_no(value: Any, locale: str) -> str:
    return "Yes" if value else "No"


def _whole_amount(currency: str) -> Callable[[Any, str], str]:
    """A format that writes a whole amount of `currency` in the locale's currency pattern."""
    def write(value: Any, locale: str) -> str:
        pattern = Locale.parse(locale).currency_formats["standard"].pattern.split(";")[0].replace(".00", "")
        return format_currency(round(value), currency, format=pattern, locale=locale, currency_digits=False)
    return write


_usd = _whole_amount("USD")  # whole US dollars: $15,900 / 15.900 $ / 15 900 $US


def _english_name_as_local(table: Callable[[Locale], dict[str, str]]) -> Callable[[Any, str], str]:
    """A format that writes an English name (a country, a language, as a source spells it) in the
    locale's language through its CLDR code; a name CLDR does not know is written as given. The
    English name → code map is built once, at the first cell."""
    @cache
    def codes() -> dict[str, str]:
        return {name: code for code, name in table(Locale.parse("en")).items()}

    def write(value: Any, locale: str) -> str:
        code = codes().get(value)
        return table(Locale.parse(locale)).get(code, value) if code else str(value)
    return write


def _clock(minutes: Any, locale: str) -> str:
    """A race time given in minutes as a results page writes it: 16.083 → "0:16:05"."""
    seconds = round(float(minutes) * 60)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _time_in_words(minutes: Any, locale: str) -> str:
    """A race time given in minutes in words: 16.083 → "16 min 5 s", 204.617 → "3 h 24 min 37 s"."""
    seconds = round(float(minutes) * 60)
    hours, rest = divmod(seconds, 3600)
    return (f"{hours} h " if hours else "") + f"{rest // 60} min {rest % 60} s"


def _shillings_pence(value: Any, locale: str) -> str:
    """A sum in shillings as a British page of 1910 writes it: 18.4167 → 18s 5d, 24 → 24s
    (12 pence to the shilling, rounded to the penny)."""
    pence = round(float(value) * 12)
    shillings, rest = divmod(pence, 12)
    return f"{shillings}s {rest}d" if rest else f"{shillings}s"


GENDER_WORDS = {"en": ("male", "female"), "de": ("männlich", "weiblich"), "fr": ("homme", "femme")}
YES_NO_WORDS = {"en": ("Yes", "No"), "de": ("Ja", "Nein"), "fr": ("Oui", "Non")}


def _gender(value: Any, locale: str) -> str:
    male, female = GENDER_WORDS[Locale.parse(locale).language]
    return {"male": male, "female": female}[value]


def _yes_no_local(value: Any, locale: str) -> str:
    yes, no = YES_NO_WORDS[Locale.parse(locale).language]
    return yes if value else no


FORMATS: dict[str, Callable[[Any, str], str]] = {
    "text": lambda v, loc: str(v),  # as the source writes it
    "integer": lambda v, loc: str(int(v)),  # digits only: 80783000
    "grouped": _grouped,  # digits grouped by locale: 80,783,000 / 80.783.000 / 80 783 000
    "coordinate": _coordinate,  # up to 4 decimals, locale's decimal sign: 52.5167 / 52,5167
    "feet": lambda v, loc: f"{_grouped(round(v), loc)} ft",
    "feet_as_metres": lambda v, loc: f"{_grouped(round(v * FEET_TO_METRES), loc)} m",
    "square_km": lambda v, loc: f"{_grouped(v, loc)} km²",
    "pounds": lambda v, loc: f"{_grouped(round(v), loc)} lbs",
    "minutes": lambda v, loc: f"{int(v)} min",  # a running time: 121 min
    "miles": lambda v, loc: f"{_one_decimal(v, loc)} mi",  # 2.5 mi
    "miles_as_km": lambda v, loc: f"{_one_decimal(v * MILES_TO_KILOMETRES, loc)} km",  # 4.0 km
    "race_time": _clock,  # minutes → 0:16:05
    "race_time_words": _time_in_words,  # minutes → 16 min 5 s
    "one_decimal": _one_decimal,  # 6.4 / 6,4
    "pounds_as_kg": lambda v, loc: f"{_grouped(round(v * POUNDS_TO_KILOGRAMS), loc)} kg",
    "date_iso": lambda v, loc: _date(v).isoformat(),  # 2025-10-03
    "date_short": lambda v, loc: format_date(_date(v), "short", locale=loc),  # 03.10.25 / 10/3/25
    "date_medium": lambda v, loc: format_date(_date(v), "medium", locale=loc),  # 03.10.2025 / Oct 3, 2025
    "date_long": lambda v, loc: format_date(_date(v), "long", locale=loc),  # 3. Oktober 2025
    "weekday": lambda v, loc: format_date(_date(v), "cccc", locale=loc),  # stand-alone: Freitag / Friday
    "weekday_short": lambda v, loc: format_date(_date(v), "ccc", locale=loc),  # Fr / Fri
    "weekday_name": _weekday_name,  # a CLDR day index (0 = Monday) as the locale's day name
    "country_name": _country_name,  # ISO 3166 alpha-2 → the locale's name of the country
    "address_line": _address_line,  # (city, region, country code) → "Leoti, Kansas, United States"
    "language_names": _language_names,  # ISO 639 codes → the locale's language names, joined
    "list": lambda v, loc: ", ".join(str(x) for x in v),
    "yes_no": _yes_no,
    "true_false": lambda v, loc: "true" if v else "false",
    "yes_no_local": _yes_no_local,  # Yes / Ja / Oui
    "usd": _usd,  # whole US dollars: $394,436,586 / 394.436.586 $
    "usd_cents": lambda v, loc: format_currency(v, "USD", locale=loc),  # $12.75 / 12,75 $
    "cad": _whole_amount("CAD"),  # whole Canadian dollars: $25,879 (en_CA) / 25 879 $ (fr_CA)
    "shillings_pence": _shillings_pence,  # 18.4167 shillings → 18s 5d
    "percent": lambda v, loc: f"{int(v)}%",
    "percent_one_decimal": lambda v, loc: f"{_one_decimal(v, loc)}%",  # 45.98 → 46.0%
    "two_decimals": lambda v, loc: format_decimal(v, format="0.00", locale=loc),  # 94.71 / 94,71
    "gender": _gender,  # "male" / "female" in the locale's language
    "country_from_name": _english_name_as_local(lambda loc: loc.territories),  # "United States" → États-Unis
    "language_from_name": _english_name_as_local(lambda loc: loc.languages),  # "English" → anglais
}


def format_cell(value: Any, fmt: str, locale: str) -> str | None:
    """`value` written in format `fmt` for `locale`; None (a missing cell) when it is missing."""
    if value is None or value == "" or (isinstance(value, (list, tuple)) and not value):
        return None
    return FORMATS[fmt](value, locale)
