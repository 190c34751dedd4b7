"""How one latent value is written on the web: the format families of the benchmark.

Each family is a tuple of formatters `(ctx, value) -> str`, indexed by style; `PREFERRED_*`
name the styles a site of a given language would pick when it sticks to one. A column either
uses one style or, when it is heterogeneous, several (see `generator.plan_formats`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import date, datetime
from typing import Any

from faker.providers.currency import Provider as FakerCurrency
from faker.providers.date_time import Provider as FakerDateTime
from faker.providers.person import Provider as FakerPerson

from . import vocab
from .context import TableContext

Formatter = Callable[[TableContext, Any], str]


def as_is(ctx: TableContext, value: Any) -> str:
    return str(value)


def month_name(ctx: TableContext, month: int) -> str:
    return vocab.MONTHS.get(ctx.lang, vocab.MONTHS["en"])[month - 1]


def _en_month(month: int) -> str:
    return vocab.MONTHS["en"][month - 1]


def _iso(d: date) -> str:
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


# ----------------------------------------------------------------------------- dates

DATE_FORMATS: tuple[Formatter, ...] = (
    lambda c, d: _iso(d),
    lambda c, d: f"{d.day:02d}.{d.month:02d}.{d.year}",
    lambda c, d: f"{d.day:02d}/{d.month:02d}/{d.year}",
    lambda c, d: f"{d.month:02d}/{d.day:02d}/{d.year}",
    lambda c, d: f"{_en_month(d.month)} {d.day}, {d.year}",
    lambda c, d: f"{d.day} {month_name(c, d.month)} {d.year}",
    lambda c, d: f"{d.day} {month_name(c, d.month)[:3]} {d.year}",
    lambda c, d: f"{d.year}/{d.month:02d}/{d.day:02d}",
    lambda c, d: f"{d.month}/{d.day}/{d.year % 100:02d}",
    lambda c, d: f"{d.day:02d}-{d.month:02d}-{d.year}",
    lambda c, d: f"{d.day}. {month_name(c, d.month)} {d.year}",
    lambda c, d: f"{_en_month(d.month)[:3]} {d.day}, {d.year}",
)
# A release written as its year alone (film and record listings: "1994"); the date kinds that
# sites shorten so take DATE_FORMATS plus this one (`kinds.year_or_date_kind`).
YEAR_FORMAT: Formatter = lambda c, d: str(d.year)  # noqa: E731 (one formatter among lambdas)
PREFERRED_DATE = {"en_US": (0, 3, 4, 8, 11), "en_GB": (0, 2, 5, 6), "de": (0, 1, 10), "fr": (0, 2, 5),
                  "es": (0, 2, 5), "it": (0, 2, 5), "nl": (0, 9, 5)}


def _h12(h: int) -> tuple[int, str]:
    return (h % 12 or 12), ("AM" if h < 12 else "PM")


def _datetime_us(c: TableContext, t: datetime) -> str:
    h, ampm = _h12(t.hour)
    return f"{t.month:02d}/{t.day:02d}/{t.year} {h}:{t.minute:02d} {ampm}"


def _datetime_long(c: TableContext, t: datetime) -> str:
    h, ampm = _h12(t.hour)
    return f"{_en_month(t.month)} {t.day}, {t.year} {h}:{t.minute:02d} {ampm.lower()}"


DATETIME_FORMATS: tuple[Formatter, ...] = (
    lambda c, t: f"{_iso(t)}T{t.hour:02d}:{t.minute:02d}:00",
    lambda c, t: f"{_iso(t)}T{t.hour:02d}:{t.minute:02d}:00{c.facts[3]}",
    lambda c, t: f"{_iso(t)}T{t.hour:02d}:{t.minute:02d}Z",
    lambda c, t: f"{_iso(t)} {t.hour:02d}:{t.minute:02d}",
    lambda c, t: f"{t.day:02d}.{t.month:02d}.{t.year} {t.hour:02d}:{t.minute:02d}",
    _datetime_us,
    _datetime_long,
    lambda c, t: (f"{vocab.WEEKDAYS['en'][t.weekday()][:3]}, {t.day:02d} {_en_month(t.month)[:3]} "
                  f"{t.year} {t.hour:02d}:{t.minute:02d}:00 GMT"),
    lambda c, t: f"{t.day:02d}/{t.month:02d}/{t.year} {t.hour:02d}:{t.minute:02d}",
    lambda c, t: f"{_iso(t)}T{t.hour:02d}:{t.minute:02d}:00.000Z",
    lambda c, t: f"{t.day} {month_name(c, t.month)} {t.year}, {t.hour:02d}:{t.minute:02d}",
    lambda c, t: f"{t.day:02d}-{t.month:02d}-{t.year} {t.hour:02d}:{t.minute:02d}",
)
PREFERRED_DATETIME = {"en_US": (1, 5, 6, 0), "en_GB": (1, 8, 0, 3), "de": (1, 4, 0, 10),
                      "fr": (1, 8, 10, 0), "es": (1, 8, 10), "it": (1, 8, 10), "nl": (1, 11, 0, 10)}


# ----------------------------------------------------------------------------- times of day
# a time is (hour, minute)


def _time_12(c: TableContext, t: tuple[int, int]) -> str:
    h, ampm = _h12(t[0])
    return f"{h}:{t[1]:02d} {ampm}"


def _time_12_short(c: TableContext, t: tuple[int, int]) -> str:
    h, ampm = _h12(t[0])
    return f"{h} {ampm.lower()}" if t[1] == 0 else f"{h}:{t[1]:02d} {ampm.lower()}"


TIME_FORMATS: tuple[Formatter, ...] = (
    lambda c, t: f"{t[0]:02d}:{t[1]:02d}",
    lambda c, t: f"{t[0]:02d}:{t[1]:02d}:00",
    _time_12,
    _time_12_short,
    lambda c, t: f"{t[0]}h{t[1]:02d}",
    lambda c, t: f"{t[0]:02d}.{t[1]:02d}",
    lambda c, t: f"{t[0]}:{t[1]:02d} Uhr",
    lambda c, t: f"{t[0]:02d}:{t[1]:02d}:00{c.facts[3]}",
    lambda c, t: f"T{t[0]:02d}:{t[1]:02d}:00",
)
PREFERRED_TIME = {"en_US": (2, 3, 0), "en_GB": (0, 2), "de": (0, 6, 1), "fr": (4, 0),
                  "es": (0, 1), "it": (0, 5), "nl": (0, 5)}


# ----------------------------------------------------------------------------- durations
# a duration is a number of minutes (programme durations) or seconds (recordings)


def _hm(minutes: int) -> tuple[int, int]:
    return divmod(minutes, 60)


def _iso_minutes(c: TableContext, m: int) -> str:
    h, mm = _hm(m)
    return "PT" + (f"{h}H" if h else "") + (f"{mm}M" if mm or not h else "")


def _human_minutes(c: TableContext, m: int) -> str:
    h, mm = _hm(m)
    if not h:
        return f"{mm} min"
    return f"{h} h {mm} min" if mm else f"{h} h"


def _words_minutes(c: TableContext, m: int) -> str:
    h, mm = _hm(m)
    parts = []
    if h:
        parts.append(f"{h} hour" + ("s" if h > 1 else ""))
    if mm:
        parts.append(f"{mm} minutes")
    return " ".join(parts)


def _compact_minutes(c: TableContext, m: int) -> str:
    h, mm = _hm(m)
    return f"{h}h{mm:02d}" if h else f"{mm}m"


DURATION_FORMATS: tuple[Formatter, ...] = (
    _iso_minutes,
    lambda c, m: f"PT{m}M",
    _human_minutes,
    lambda c, m: f"{m} min",
    lambda c, m: f"{m // 60}:{m % 60:02d}",
    _words_minutes,
    _compact_minutes,
    lambda c, m: f"{m} mins",
)
PREFERRED_DURATION = {"en_US": (0, 3, 5), "en_GB": (0, 2, 3), "de": (0, 2, 3), "fr": (0, 6, 3)}


def _iso_seconds(c: TableContext, s: int) -> str:
    m, ss = divmod(s, 60)
    return f"PT{m}M{ss}S" if m else f"PT{ss}S"


TRACK_DURATION_FORMATS: tuple[Formatter, ...] = (
    _iso_seconds,
    lambda c, s: f"{s // 60}:{s % 60:02d}",
    lambda c, s: f"{s // 60:02d}:{s % 60:02d}",
    lambda c, s: f"{s // 60} min {s % 60} s",
    lambda c, s: f"0:{s // 60:02d}:{s % 60:02d}",
    lambda c, s: f"PT0H{s // 60}M{s % 60}S",
)


# ----------------------------------------------------------------------------- money
# an amount is a float; the currency is the table's


# Faker's ISO 4217 codes with English names, and its English language names, sorted.
WORLD_CURRENCIES: tuple[tuple[str, str], ...] = tuple(sorted(FakerCurrency.currencies))
_CURRENCY_NAMES = dict(WORLD_CURRENCIES)
WORLD_LANGUAGE_NAMES: tuple[str, ...] = tuple(sorted(FakerPerson.language_names))


def currency_symbol(code: str) -> str:
    for c, symbol, _ in vocab.CURRENCIES:
        if c == code:
            return symbol
    return code


def currency_name(code: str) -> str:
    for c, _, name in vocab.CURRENCIES:
        if c == code:
            return name
    return _CURRENCY_NAMES.get(code, code)


def group_digits(amount: float, decimals: int, thousands: str, point: str) -> str:
    text = f"{amount:,.{decimals}f}"  # "1,234.56"
    return text.replace(",", "\0").replace(".", point).replace("\0", thousands)


def _money_local(c: TableContext, a: float) -> str:
    sym = currency_symbol(c.currency)
    if c.lang == "en":
        return f"{sym}{group_digits(a, 2, ',', '.')}"
    if c.lang == "fr":
        return f"{group_digits(a, 2, ' ', ',')} {sym}"
    if c.lang in ("it", "nl"):
        return f"{sym} {group_digits(a, 2, '.', ',')}"
    return f"{group_digits(a, 2, '.', ',')} {sym}"


MONEY_FORMATS: tuple[Formatter, ...] = (
    _money_local,
    lambda c, a: f"{a:.2f}",
    lambda c, a: f"{a:.2f}".replace(".", ","),
    lambda c, a: f"{a:.2f} {c.currency}",
    lambda c, a: f"{c.currency} {group_digits(a, 2, ',', '.')}",
    lambda c, a: f"{currency_symbol(c.currency)}{a:.2f}",
    lambda c, a: f"{round(a)}" if a >= 20 else f"{a:.2f}",
    lambda c, a: f"{group_digits(a, 2, '.', ',')} {c.currency}",
)
PREFERRED_MONEY = {"en": (0, 1, 5), "de": (0, 7, 2), "fr": (0, 2), "es": (0, 2), "it": (0, 2), "nl": (0, 2)}


# A film's takings are whole US dollars, whatever the page's language (box-office sites report
# the studios' dollar figures): grouped the page's way, with the symbol or the code, or in millions.
GROSS_FORMATS: tuple[Formatter, ...] = (  # a gross is an int of dollars
    lambda c, g: f"${group_digits(g, 0, ',', '.')}",
    lambda c, g: f"{group_digits(g, 0, ' ', ',')} $",
    lambda c, g: f"{group_digits(g, 0, '.', ',')} $",
    lambda c, g: f"US${group_digits(g, 0, ',', '.')}",
    lambda c, g: f"USD {group_digits(g, 0, ',', '.')}",
    lambda c, g: f"${g / 1e6:.1f}M",
    lambda c, g: f"${g / 1e6:.1f} million",
    lambda c, g: f"{g} USD",
)
PREFERRED_GROSS = {"en": (0, 0, 3, 5, 6), "de": (2, 4, 7), "fr": (1, 4), "es": (2, 4), "it": (2, 4), "nl": (2, 4)}

# A share of critics' reviews that are positive, as review aggregators print it: a `Number`.
PERCENT_FORMATS: tuple[Formatter, ...] = (  # a percentage is an int 0-100
    lambda c, p: f"{p}%",
    lambda c, p: f"{p} %",
    lambda c, p: f"{p}/100",
)


# ----------------------------------------------------------------------------- coordinates
# a coordinate is (axis, degrees) with axis "lat" or "lon"


def _dms(c: TableContext, v: tuple[str, float]) -> str:
    axis, x = v
    hemi = ("N" if x >= 0 else "S") if axis == "lat" else ("E" if x >= 0 else "W")
    x = abs(x)
    d = int(x)
    m = int((x - d) * 60)
    s = (x - d - m / 60) * 3600
    return f"{d}°{m:02d}'{s:04.1f}\"{hemi}"


def _dm(c: TableContext, v: tuple[str, float]) -> str:
    axis, x = v
    hemi = ("N" if x >= 0 else "S") if axis == "lat" else ("E" if x >= 0 else "W")
    x = abs(x)
    d = int(x)
    return f"{d}° {(x - d) * 60:.3f}' {hemi}"


def _hemi_prefix(c: TableContext, v: tuple[str, float]) -> str:
    axis, x = v
    hemi = ("N" if x >= 0 else "S") if axis == "lat" else ("E" if x >= 0 else "W")
    return f"{hemi} {abs(x):.5f}"


def _rounded(c: TableContext, x: float) -> str:
    """Degrees rounded to the table's precision (2 to 5 places) without trailing zeros, as
    gazetteers print them ("24.433", "13,2652")."""
    places = c.table_value("coordinate_places", lambda: c.rng.choice((2, 3, 4, 4, 5)))
    return f"{x:.{places}f}".rstrip("0").rstrip(".")


COORDINATE_FORMATS: tuple[Formatter, ...] = (
    lambda c, v: f"{v[1]:.6f}",
    lambda c, v: f"{v[1]:.4f}",
    lambda c, v: f"{v[1]:.6f}".replace(".", ","),
    _dms,
    _dm,
    _hemi_prefix,
    lambda c, v: f"{v[1]:.8f}".rstrip("0"),
    lambda c, v: _rounded(c, v[1]),
    lambda c, v: _rounded(c, v[1]).replace(".", ","),
)
COORDINATE_CUE_FORMATS = (3, 4, 5)  # hemisphere letters tell latitude from longitude


# ----------------------------------------------------------------------------- telephone numbers
# a number is Faker's locale-formatted string


def national_digits(c: TableContext, number: str) -> str:
    """The national significant digits of a Faker number, without country code or extension."""
    main = re.split(r"x|ext", number)[0]
    digits = re.sub(r"\D", "", main)
    code = c.facts[0]
    stripped = main.lstrip()
    if stripped.startswith("+") and digits.startswith(code):
        digits = digits[len(code):]
    elif stripped.startswith("00" + code):
        digits = digits[2 + len(code):]
    elif code == "1" and len(digits) == 11 and digits.startswith("1"):
        digits = digits[1:]
    return digits.lstrip("0")


def _e164(c: TableContext, number: str) -> str:
    return f"+{c.facts[0]}{national_digits(c, number)}"


def _spaced_international(c: TableContext, number: str) -> str:
    d = national_digits(c, number)
    return f"+{c.facts[0]} {d[:3]} {d[3:6]} {d[6:]}".rstrip()


def _national(c: TableContext, number: str) -> str:
    d = national_digits(c, number)
    return d if c.facts[0] == "1" else "0" + d


def _dashed(c: TableContext, number: str) -> str:
    d = _national(c, number)
    return f"{d[:3]}-{d[3:6]}-{d[6:]}"


PHONE_FORMATS: tuple[Formatter, ...] = (
    lambda c, n: n,
    _e164,
    _spaced_international,
    _national,
    _dashed,
    lambda c, n: "tel:" + _e164(c, n),  # the URI scheme gives a telephone away
)
PHONE_CUE_FORMATS = (5,)


def bump_last_digit(number: str) -> str:
    """The same number with its last digit (before any extension) moved on by one.

    Offices number their fax line next to their telephone line; the pair then shares every
    digit but the last, which is what lets a table-reader tell the two columns apart.
    """
    main, sep, ext = number.partition("x")
    for i in range(len(main) - 1, -1, -1):
        if main[i].isdigit():
            return main[:i] + str((int(main[i]) + 1) % 10) + main[i + 1:] + sep + ext
    return number


# ----------------------------------------------------------------------------- quantities
# values in base units: grams, centimetres, kilocalories


def _num(x: float, decimals: int = 1) -> str:
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


MASS_FORMATS: tuple[Formatter, ...] = (
    lambda c, g: f"{_num(g, 0)} g" if g < 1000 else f"{_num(g / 1000, 2)} kg",
    lambda c, g: f"{_num(g / 1000, 3)} kg",
    lambda c, g: f"{_num(g / 28.3495, 1)} oz",
    lambda c, g: f"{_num(g, 0)}g" if g < 1000 else f"{_num(g / 1000, 2)}kg",
    lambda c, g: f"{_num(g / 453.592, 2)} lbs",
    lambda c, g: f"{_num(g, 0)} grams",
    lambda c, g: f"{_num(g / 1000, 2)} kg".replace(".", ","),
)
DISTANCE_FORMATS: tuple[Formatter, ...] = (
    lambda c, cm: f"{_num(cm, 1)} cm",
    lambda c, cm: f"{_num(cm / 100, 2)} m",
    lambda c, cm: f"{_num(cm / 2.54, 1)} in",
    lambda c, cm: f"{_num(cm * 10, 0)} mm",
    lambda c, cm: f"{_num(cm, 1)}cm",
    lambda c, cm: f"{_num(cm / 2.54, 1)}\"",
    lambda c, cm: f"{_num(cm, 1)} cm".replace(".", ","),
)
ENERGY_FORMATS: tuple[Formatter, ...] = (
    lambda c, k: f"{k} kcal",
    lambda c, k: f"{round(k * 4.184)} kJ",
    lambda c, k: f"{k} calories",
    lambda c, k: f"{k} Cal",
    lambda c, k: f"{k}kcal",
    lambda c, k: f"{round(k * 4.184)} kJ / {k} kcal",
)


# ----------------------------------------------------------------------------- enumerations
# a member is (short schema.org name, human spelling)


def _upper_snake(short: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", short).upper()


ENUM_FORMATS: tuple[Formatter, ...] = (
    lambda c, m: m[0],
    lambda c, m: f"https://schema.org/{m[0]}",
    lambda c, m: f"http://schema.org/{m[0]}",
    lambda c, m: m[1],
    lambda c, m: m[0].lower(),
    lambda c, m: f"schema:{m[0]}",
    lambda c, m: _upper_snake(m[0]),
)
PREFERRED_ENUM = (0, 1, 2)
DELIVERY_FORMATS: tuple[Formatter, ...] = (
    lambda c, m: m[0],
    lambda c, m: (f"http://purl.org/goodrelations/v1#{m[0]}" if m[0] in vocab.GOODRELATIONS_CARRIERS
                  else f"https://schema.org/{m[0]}"),
    lambda c, m: m[1],
)

_GENDER_WORDS = {"de": ("männlich", "weiblich"), "fr": ("homme", "femme"), "es": ("hombre", "mujer"),
                 "it": ("uomo", "donna"), "nl": ("man", "vrouw")}
GENDER_FORMATS: tuple[Formatter, ...] = (
    lambda c, m: m[0],
    lambda c, m: f"https://schema.org/{m[0]}",
    lambda c, m: m[1],
    lambda c, m: m[0][0],
    lambda c, m: _GENDER_WORDS.get(c.lang, ("male", "female"))[m[0] == "Female"],
    lambda c, m: f"http://schema.org/{m[0]}",
)
def _boolean_words(c: TableContext, m: tuple[str, str]) -> str:
    """Yes/no as this site writes it: one (true, false) pair per table, often in its language."""
    def pick() -> tuple[str, str]:
        lang = c.lang if c.lang in vocab.BOOLEAN_WORDS and c.rng.random() < 0.5 else "en"
        return c.rng.choice(vocab.BOOLEAN_WORDS[lang])
    return boolean_word(c, c.table_value("boolean_words", pick), m[0] == "True")


BOOLEAN_FORMATS: tuple[Formatter, ...] = (
    lambda c, m: m[0].lower(),
    lambda c, m: m[0],
    lambda c, m: m[1],
    lambda c, m: m[1].capitalize(),
    lambda c, m: "1" if m[0] == "True" else "0",
    lambda c, m: f"https://schema.org/{m[0]}",
    lambda c, m: m[0].upper(),
    _boolean_words,
)
def _local_weekday(c: TableContext, d: int) -> str:
    return vocab.WEEKDAYS.get(c.lang, vocab.WEEKDAYS["en"])[d]


def _local_weekday_short(c: TableContext, d: int) -> str:
    return vocab.WEEKDAY_ABBREVIATIONS.get(c.lang, vocab.WEEKDAY_ABBREVIATIONS["en"])[d]


DAY_FORMATS: tuple[Formatter, ...] = (  # a day is its weekday index, Monday = 0
    lambda c, d: vocab.WEEKDAYS["en"][d],
    lambda c, d: f"https://schema.org/{vocab.WEEKDAYS['en'][d]}",
    lambda c, d: f"http://schema.org/{vocab.WEEKDAYS['en'][d]}",
    lambda c, d: vocab.SCHEMA_DAYS[d],
    lambda c, d: vocab.WEEKDAYS["en"][d][:3],
    _local_weekday,
    _local_weekday_short,
    lambda c, d: _local_weekday(c, d).capitalize(),
    lambda c, d: vocab.WEEKDAYS["en"][d].upper(),
)
PREFERRED_DAY = {"en": (0, 4, 0, 1, 3), "de": (5, 6, 0, 1), "fr": (5, 6, 7, 0, 1), "es": (5, 6, 7, 0),
                 "it": (5, 6, 7, 0), "nl": (5, 6, 0, 1)}


# ----------------------------------------------------------------------------- opening hours
# hours are a tuple of (first_day, last_day, open (h, m), close (h, m)) spans


def _hhmm(t: tuple[int, int]) -> str:
    return f"{t[0]:02d}:{t[1]:02d}"


def _ampm(t: tuple[int, int]) -> str:
    h, ampm = _h12(t[0])
    return (f"{h}" if t[1] == 0 else f"{h}:{t[1]:02d}") + ampm.lower()


def _span_days(first: int, last: int) -> str:
    days = vocab.SCHEMA_DAYS
    return days[first] if first == last else f"{days[first]}-{days[last]}"


OPENING_HOURS_FORMATS: tuple[Formatter, ...] = (
    lambda c, spans: ", ".join(f"{_span_days(a, b)} {_hhmm(o)}-{_hhmm(cl)}" for a, b, o, cl in spans),
    lambda c, spans: " ".join(f"{','.join(vocab.SCHEMA_DAYS[a:b + 1])} {_hhmm(o)}-{_hhmm(cl)}"
                              for a, b, o, cl in spans),
    lambda c, spans: "; ".join(
        (f"{vocab.WEEKDAYS['en'][a]} - {vocab.WEEKDAYS['en'][b]}" if a != b else vocab.WEEKDAYS["en"][a])
        + f": {_ampm(o)} - {_ampm(cl)}" for a, b, o, cl in spans),
    lambda c, spans: " | ".join(f"{_span_days(a, b)}: {_hhmm(o)} - {_hhmm(cl)}" for a, b, o, cl in spans),
    lambda c, spans: ", ".join(f"{_span_days(a, b)} {o[0]}-{cl[0]}" + (" Uhr" if c.lang == "de" else "h")
                               for a, b, o, cl in spans),
)


# ----------------------------------------------------------------------------- names, places, codes, lists


def joined(*separators: str) -> tuple[Formatter, ...]:
    return tuple((lambda sep: lambda c, items: sep.join(items))(s) for s in separators)


PERSON_NAME_FORMATS: tuple[Formatter, ...] = (
    lambda c, n: f"{n[0]} {n[1]}",
    lambda c, n: f"{n[1]}, {n[0]}",
    lambda c, n: f"{n[0][0]}. {n[1]}",
)


def _unmangle(text: str) -> str:
    """Faker stores a few names as UTF-8 read as Latin-1 ("BogotÃ¡"): read them back."""
    try:
        return text.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return text


# Faker's 195 countries (English name, ISO alpha-2 and alpha-3, capital), sorted by code so
# that a seeded choice does not depend on Faker's list order.
WORLD_COUNTRIES = tuple(sorted((dataclasses.replace(c, name=_unmangle(c.name), capital=_unmangle(c.capital))
                                for c in FakerDateTime.countries), key=lambda c: c.alpha_2_code))
_COUNTRY_ROWS: dict[str, tuple[str, ...]] = {
    **{c.alpha_2_code: (c.alpha_2_code, c.alpha_3_code, *(c.name,) * 6) for c in WORLD_COUNTRIES},
    **{entry[0]: entry for entry in vocab.COUNTRIES},  # names in six languages where we have them
}


def country_row(code: str) -> tuple[str, ...]:
    """(alpha-2, alpha-3, English, German, French, Spanish, Italian, Dutch name) of a country;
    countries outside `vocab.COUNTRIES` go by their English name in every language."""
    return _COUNTRY_ROWS.get(code) or vocab.COUNTRIES[0]


def country_name(c: TableContext, code: str) -> str:
    return country_row(code)[vocab.COUNTRY_NAME_COLUMN.get(c.lang, 2)]


COUNTRY_FORMATS: tuple[Formatter, ...] = (
    lambda c, code: country_row(code)[2],
    lambda c, code: code,
    lambda c, code: country_row(code)[1],
    country_name,
    lambda c, code: country_name(c, code).upper(),
)


def address_line(c: TableContext, a: dict[str, str]) -> str:
    country = c.geo.country
    if country in ("US", "CA", "AU"):
        return f"{a['street']}, {a['city']}, {a['region_code'] if country == 'US' else a['region']} {a['postcode']}"
    if country == "GB":
        return f"{a['street']}, {a['city']} {a['postcode']}"
    return f"{a['street']}, {a['postcode']} {a['city']}"


def place_line(c: TableContext, a: dict[str, str]) -> str:
    """A one-line location without street: "City, Region, Country" (directories, gazetteers)."""
    return f"{a['city']}, {a['region']}, {country_name(c, c.geo.country)}"


ADDRESS_FORMATS: tuple[Formatter, ...] = (
    address_line,
    lambda c, a: f"{address_line(c, a)}, {country_name(c, c.geo.country)}",
    lambda c, a: address_line(c, a).replace(", ", " "),
    lambda c, a: f"{address_line(c, a)}, {c.geo.country}",
    place_line,
)


URL_FORMATS: tuple[Formatter, ...] = (
    lambda c, p: f"https://www.{c.site}/{p}",
    lambda c, p: f"http://{c.site}/{p}",
    lambda c, p: f"https://{c.site}/{p}/",
    lambda c, p: f"https://{c.site}/{p}.html",
    lambda c, p: f"/{p}",
)


IMAGE_FORMATS: tuple[Formatter, ...] = (
    lambda c, p: f"https://www.{c.site}/images/{p[0]}.jpg",
    lambda c, p: f"https://cdn.{c.site}/media/{p[1]}.png",
    lambda c, p: f"/uploads/{p[2]}/{p[0]}.jpg",
    lambda c, p: f"https://{c.site}/img/{p[1]}.webp?w=800",
    lambda c, p: f"http://www.{c.site}/photos/{p[0]}-large.jpeg",
)


def isbn10_from_13(isbn13_digits: str) -> str:
    body = isbn13_digits[3:12]
    total = sum((10 - i) * int(d) for i, d in enumerate(body))
    check = (11 - total % 11) % 11
    return body + ("X" if check == 10 else str(check))


ISBN_FORMATS: tuple[Formatter, ...] = (
    lambda c, s: s,
    lambda c, s: s.replace("-", ""),
    lambda c, s: isbn10_from_13(s.replace("-", "")) if s.startswith("978") else s.replace("-", ""),
    lambda c, s: f"ISBN {s}",
)


PRODUCT_ID_FORMATS: tuple[Formatter, ...] = (
    lambda c, p: f"SKU-{p[0]}",
    lambda c, p: str(p[0]),
    lambda c, p: f"{p[1]}-{p[0]}",
    lambda c, p: p[2],
    lambda c, p: f"{p[0]:08d}",
)


PRICE_RANGE_FORMATS: tuple[Formatter, ...] = (
    lambda c, p: currency_symbol(c.currency) * p[0] if len(currency_symbol(c.currency)) == 1 else "$" * p[0],
    lambda c, p: f"{currency_symbol(c.currency)}{p[1]}-{currency_symbol(c.currency)}{p[2]}",
    lambda c, p: f"{p[1]} - {p[2]} {currency_symbol(c.currency)}",
    lambda c, p: f"{c.currency} {p[1]}-{p[2]}",
    lambda c, p: "$" * p[0] + " - " + "$" * min(4, p[0] + 1),
    lambda c, p: f"{p[1]}-{p[2]} {c.currency}",
    lambda c, p: ("Inexpensive", "Moderate", "Expensive", "Very expensive")[p[0] - 1],
)


SALARY_FORMATS: tuple[Formatter, ...] = (
    lambda c, s: f"{currency_symbol(c.currency)}{s[0]:,} - {currency_symbol(c.currency)}{s[1]:,} per {s[2]}",
    lambda c, s: f"{s[0]}-{s[1]} {c.currency}/{s[2]}",
    lambda c, s: f"{c.currency} {s[0]:,} - {s[1]:,}",
    lambda c, s: f"{group_digits(s[0], 0, '.', ',')} € – {group_digits(s[1], 0, '.', ',')} € pro "
                 + ("Jahr" if s[2] == "year" else "Stunde"),
    lambda c, s: f"from {currency_symbol(c.currency)}{s[0]:,}/{s[2]}",
    # one amount, as staff lists and many boards write a pay: $120000, $120,000, 52.000 €, 120000 USD
    lambda c, s: f"{currency_symbol(c.currency)}{s[0]}",
    lambda c, s: f"{currency_symbol(c.currency)}{s[0]:,}",
    lambda c, s: f"{group_digits(s[0], 0, '.', ',')} {currency_symbol(c.currency)}",
    lambda c, s: f"{s[0]} {c.currency}",
)


def number_text(ctx: TableContext, x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x}"


RATING_FORMATS: tuple[Formatter, ...] = (
    lambda c, x: number_text(c, x),
    lambda c, x: number_text(c, x).replace(".", ","),
    lambda c, x: f"{x:.1f}" if isinstance(x, float) else f"{x}",
)


SCALE_FORMATS: tuple[Formatter, ...] = (lambda c, x: str(x), lambda c, x: f"{x}.0", lambda c, x: f"{x},0")


LIST_FORMATS: tuple[Formatter, ...] = (
    lambda c, xs: ", ".join(xs),
    lambda c, xs: "; ".join(xs),
    lambda c, xs: "[" + ", ".join(f'"{x}"' for x in xs) + "]",
    lambda c, xs: "\n".join(xs),
)


STEPS_FORMATS: tuple[Formatter, ...] = (
    lambda c, xs: " ".join(xs),
    lambda c, xs: " ".join(f"{i}. {x}" for i, x in enumerate(xs, 1)),
    lambda c, xs: " ".join(f"Step {i}: {x}" for i, x in enumerate(xs, 1)),
    lambda c, xs: "[" + ", ".join(f'"{x}"' for x in xs) + "]",
)


_REGIONS = {"en": "US", "de": "DE", "fr": "FR", "es": "ES", "it": "IT", "nl": "NL", "pt": "BR", "ja": "JP",
            "zh": "CN", "ru": "RU", "sv": "SE", "pl": "PL", "da": "DK", "ko": "KR"}


def language_entry(code: str) -> tuple[str, str, str, str]:
    return next(e for e in vocab.LANGUAGES if e[0] == code)


LANGUAGE_FORMATS: tuple[Formatter, ...] = (
    lambda c, code: code,
    lambda c, code: f"{code}-{c.country if code == c.lang else _REGIONS[code]}",
    lambda c, code: language_entry(code)[1],
    lambda c, code: language_entry(code)[2],
    lambda c, code: language_entry(code)[3],
    lambda c, code: code.upper(),
    lambda c, code: f"{code}_{c.country if code == c.lang else _REGIONS[code]}",
)


CURRENCY_FORMATS: tuple[Formatter, ...] = (
    lambda c, codes: ", ".join(codes),
    lambda c, codes: ", ".join(currency_symbol(x) for x in codes),
    lambda c, codes: ", ".join(currency_name(code) for code in codes),
    lambda c, codes: "/".join(codes),
    lambda c, codes: " ".join(x.lower() for x in codes),
)


def unit_text_format(i: int) -> Formatter:
    def fmt(c: TableContext, unit: tuple[str, str]) -> str:
        variants = vocab.UNIT_TEXT_VARIANTS[unit[1]]
        return variants[i % len(variants)]
    return fmt


# ----------------------------------------------------------------------------- plain numbers, areas, heights


def grouped(x: float, decimals: int, style: str) -> str:
    """A number with thousands grouped as a locale writes it: style "en" 1,234.5; "de" 1.234,5;
    "fr" 1 234,5 (narrow no-break space); "ch" 1'234.5; "space" 1 234.5; "plain" 1234.5."""
    thousands, point = {"en": (",", "."), "de": (".", ","), "fr": ("\u202f", ","), "ch": ("'", "."),
                        "space": (" ", "."), "plain": ("", ".")}[style]
    return group_digits(x, decimals, thousands, point)


_GROUPING = {"en": "en", "de": "de", "fr": "fr", "es": "de", "it": "de", "nl": "de"}


def local_grouping(c: TableContext) -> str:
    return _GROUPING.get(c.lang, "en")


COUNT_FORMATS: tuple[Formatter, ...] = (  # a count is an int
    lambda c, n: str(n),
    lambda c, n: grouped(n, 0, local_grouping(c)),
    lambda c, n: grouped(n, 0, "en"),
    lambda c, n: grouped(n, 0, "space"),
    lambda c, n: grouped(n, 0, "de"),
    lambda c, n: grouped(n, 0, "fr"),
    lambda c, n: f"{n / 1e6:.1f} million" if n >= 1_000_000 else grouped(n, 0, "en"),
)
PREFERRED_COUNT = (0, 0, 1, 1, 2)


def decimal_local(c: TableContext, x: float, decimals: int = 1) -> str:
    text = f"{x:.{decimals}f}"
    return text.replace(".", ",") if _GROUPING.get(c.lang, "en") != "en" else text


FIGURE_FORMATS: tuple[Formatter, ...] = (  # a firm's figure in the header's unit, a float (`latents.figure`)
    lambda c, x: f"{x:.2f}",
    lambda c, x: decimal_local(c, x, 2),
    lambda c, x: f"{x:.1f}",
    lambda c, x: grouped(x, 2, "en"),
    lambda c, x: grouped(x, 1, local_grouping(c)),
    lambda c, x: grouped(x, 2, "de"),
)
PREFERRED_FIGURE = {"en": (0, 0, 2, 3), "de": (1, 5, 4), "fr": (1, 4)}


MEASURE_FORMATS: tuple[Formatter, ...] = (  # a unitless measurement, a float
    lambda c, x: _num(x, 1),
    lambda c, x: decimal_local(c, x),
    lambda c, x: f"{x:.2f}",
    lambda c, x: _num(x, 1).replace(".", ","),
)

AREA_FORMATS: tuple[Formatter, ...] = (  # an area is in square kilometres
    lambda c, a: f"{grouped(a, 0, local_grouping(c))} km²",
    lambda c, a: f"{grouped(a, 0, 'en')} km2",
    lambda c, a: f"{grouped(a / 2.58999, 0, 'en')} sq mi",
    lambda c, a: f"{grouped(a * 100, 0, local_grouping(c))} ha",
    lambda c, a: f"{_num(a, 1)} km²",
    lambda c, a: f"{grouped(a * 247.105, 0, 'en')} acres",
    lambda c, a: f"{grouped(a, 0, 'space')} km²",
)

ELEVATION_FORMATS: tuple[Formatter, ...] = (  # an elevation is in metres
    lambda c, m: f"{grouped(m, 0, local_grouping(c))} m",
    lambda c, m: f"{grouped(m * 3.28084, 0, 'en')} ft",
    lambda c, m: f"{round(m)}m",
    lambda c, m: f"{grouped(m * 3.28084, 0, 'plain')} feet",
    lambda c, m: f"{round(m)} m a.s.l.",
    lambda c, m: f"{grouped(m, 0, local_grouping(c))} m ü. NN" if c.lang == "de" else f"{round(m)} m",
)


# ----------------------------------------------------------------------------- booleans and codes


def boolean_word(c: TableContext, pair: tuple[str, str], value: bool) -> str:
    return pair[0] if value else pair[1]


def identifier_from_style(c: TableContext, style: str, prefix: str = "") -> str:
    """A code of `style` (see `vocab.IDENTIFIER_STYLES`): A a letter, 9 a digit, X either, CC
    the table's country code (as in a BIC), P the next letter of `prefix` (one the column fixes)."""
    letters, digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789"
    style = style.replace("CC", c.country)
    fixed = iter(prefix)
    out = []
    for ch in style:
        if ch == "P":
            out.append(next(fixed, "X"))
        elif ch == "A":
            out.append(c.rng.choice(letters))
        elif ch == "9":
            out.append(c.rng.choice(digits))
        elif ch == "X":
            out.append(c.rng.choice(letters + digits))
        else:
            out.append(ch)
    return "".join(out)


CURRENCY_CODE_FORMATS: tuple[Formatter, ...] = (  # one ISO 4217 code per cell
    lambda c, code: code,
    lambda c, code: code.lower(),
    lambda c, code: f"{code} ({currency_symbol(code)})" if currency_symbol(code) != code else code,
    lambda c, code: currency_symbol(code),
    lambda c, code: currency_name(code),
)
