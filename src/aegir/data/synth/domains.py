"""The 17 SOTAB domains: for each, its subject and the properties a table of it may carry.

A `Prop` is one possible column: its CPA label (the schema.org property) and one or more
(CTA label, value kind) variants. Labels are `None` where no SOTAB label fits the values
honestly (a given name is no CTA type; `baseSalary` is no CPA label). Flags steer the
corner-case tables: `cta_lookalike` columns have values that another CTA label's columns
could have (a fax number looks like a telephone number, a brand like a company),
`cpa_lookalike` columns share their type with a sibling property (startDate/endDate,
author/director), `signature` columns reveal the domain, `partners` are drawn together,
`requires` must be present for the column to appear at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import DESCRIPTIONS, OTHER_SUBJECTS, SUBJECTS, K, Kind


@dataclass(frozen=True)
class Prop:
    key: str  # unique within its domain; the CPA label when there is one
    cpa: str | None
    variants: tuple[tuple[str | None, Kind], ...]  # (CTA label, kind) choices
    weight: float = 1.0  # relative chance of being picked for a table
    cta_lookalike: bool = False  # its values could carry another CTA label (favoured in corner cases)
    cpa_lookalike: bool = False  # a sibling property has values of the same type (favoured too)
    signature: bool = False  # names a property only this domain has: the table's domain shows
    partners: tuple[str, ...] = ()  # keys drawn alongside it in corner-case tables
    requires: tuple[str, ...] = ()  # keys that must be present for it to appear
    variant_key: str | None = None  # props sharing it pick the same variant index per table


BOTH = {"cta_lookalike": True, "cpa_lookalike": True}  # a lookalike in its type and in its property


def P(cpa: str | None, cta: str | None, kind: str | Kind, *, key: str | None = None, **flags) -> Prop:
    kind = K[kind] if isinstance(kind, str) else kind
    return Prop(key=key or cpa or kind.name, cpa=cpa, variants=((cta, kind),), **flags)


def V(cpa: str, variants: tuple[tuple[str | None, str], ...], **flags) -> Prop:
    return Prop(key=cpa, cpa=cpa, variants=tuple((cta, K[kind]) for cta, kind in variants), **flags)


@dataclass(frozen=True)
class SubjectVariant:
    """Another entity a domain's sites list, whose column 0 is not a `<Domain>/name`: a table of
    countries, of postcodes, of organisations, of teams. Without these, column 0 would always
    carry a `*/name` label, a position that gives the label away. Or a list of another shape
    whose subject keeps the domain's label: a gazetteer of towns, named as addresses name their
    localities. Never in corner cases."""

    cta: str  # CTA label of the subject column
    subject: Kind
    share: float  # share of the domain's tables (outside corner cases) that list this entity
    props: tuple[Prop, ...]  # the columns such a table may have


@dataclass(frozen=True)
class Domain:
    name: str
    subject: Kind
    props: tuple[Prop, ...]
    variants: tuple[SubjectVariant, ...] = ()

    @property
    def subject_cta(self) -> str:
        return f"{self.name}/name"

    def prop(self, key: str) -> Prop:
        return next(p for p in self.props if p.key == key)


# ----------------------------------------------------------------------------- shared groups
# The lookalike flags mark columns a single-column reader confuses with a column of another
# label. Columns whose values give their label away (URLs, e-mails, latitude vs longitude
# inside one country, opening vs closing times) are not marked.


def address_props(weight: float = 1.0) -> tuple[Prop, ...]:
    return (
        P("address", "PostalAddress", "address", weight=weight),
        P("streetAddress", "streetAddress", "street", weight=weight),
        P("addressLocality", "addressLocality", "city", weight=weight, cpa_lookalike=True),
        P("addressRegion", "addressRegion", "region", weight=0.6 * weight),
        P("postalCode", "postalCode", "postcode", weight=weight),
        P("addressCountry", "Country", "country", weight=0.6 * weight, **BOTH),
    )


def contact_props(fax: float = 0.5) -> tuple[Prop, ...]:
    return (
        P("telephone", "telephone", "telephone", weight=1.5, **BOTH,
          partners=("faxNumber",)),
        P("faxNumber", "faxNumber", "fax", weight=fax, **BOTH,
          requires=("telephone",)),
        P("email", "email", "email"),
        P("url", "URL", "url"),
        P("image", "Photograph", "image"),
    )


def web_props(image: float = 1.0) -> tuple[Prop, ...]:
    return P("url", "URL", "url"), P("image", "Photograph", "image", weight=image)


def geo_props(weight: float = 1.0) -> tuple[Prop, ...]:
    return (
        P("latitude", "CoordinateAT", "latitude", weight=weight, partners=("longitude",)),
        P("longitude", "CoordinateAT", "longitude", weight=weight, partners=("latitude",)),
    )


def rating_props(weight: float = 0.6) -> tuple[Prop, ...]:
    return (
        P("ratingValue", "Number", "rating_value", weight=weight, cpa_lookalike=True,
          partners=("bestRating", "worstRating")),
        P("bestRating", "Number", "best_rating", weight=weight * 0.6, cpa_lookalike=True,
          partners=("ratingValue", "worstRating")),
        P("worstRating", "Number", "worst_rating", weight=weight * 0.5, cpa_lookalike=True,
          partners=("bestRating", "ratingValue")),
    )


def offer_props(price_kind: str, weight: float = 1.0, valid_from: str = "valid_from") -> tuple[Prop, ...]:
    return (
        P("price", "price", price_kind, weight=weight, cta_lookalike=True),
        P("priceCurrency", "currency", "currency", weight=0.6 * weight),
        P("availability", "ItemAvailability", "availability", weight=0.6 * weight),
        P("validFrom", "DateTime", valid_from, weight=0.3 * weight,
          cpa_lookalike=valid_from == "ticket_sale"),  # tickets go on sale before the start
    )


def opening_props() -> tuple[Prop, ...]:
    return (
        P("openingHours", "openingHours", "opening_hours"),
        P("dayOfWeek", "DayOfWeek", "day_of_week", weight=0.5, partners=("opens", "closes")),
        P("opens", "Time", "opens", weight=0.5, partners=("closes",)),
        P("closes", "Time", "closes", weight=0.5, partners=("opens",)),
    )


def code(weight: float, key: str = "identifier", kind: str = "identifier") -> Prop:
    """A code with no CPA property in the set (an IATA code, a branch code, a catalogue number)."""
    return P(None, "IdentifierAT", kind, key=key, weight=weight)


def fact(key: str, cta: str | None, kind: str, weight: float) -> Prop:
    """A fact a directory lists with no CPA property in the set (population, founding year,
    whether pets are allowed): CTA-labelled only."""
    return P(None, cta, kind, key=key, weight=weight)


def registry_props() -> tuple[Prop, ...]:
    """What gazetteers and directories list about places (codes, sizes, heights, currencies)."""
    return (
        code(1.0, kind="place_code"), code(0.4, "globalLocationNumber", "identifier_b"),
        fact("population", "Number", "population", 0.8), fact("elevation", "Distance", "elevation", 0.5),
        fact("area", "QuantitativeValue", "area", 0.4), fact("publicAccess", "Boolean", "boolean", 0.3),
        fact("foundingYear", "Number", "founding_year", 0.3),
        fact("additionalType", "category", "place_category", 0.3),
        fact("currency", "currency", "local_currency", 0.2),
        fact("knowsLanguage", "Language", "spoken_languages", 0.2),
        fact("timeZone", None, "time_zone", 0.3),
    )


def description(domain: str, cta: str | None, **flags) -> Prop:
    return P("description", cta, DESCRIPTIONS[domain], cta_lookalike=cta is not None, **flags)


def person(cpa: str, weight: float = 1.0, **flags) -> Prop:
    return P(cpa, "Person/name", "person", weight=weight, cpa_lookalike=True, **flags)


def language(cpa: str = "inLanguage", kind: str = "language", weight: float = 1.0) -> Prop:
    return P(cpa, "Language", kind, weight=weight, **BOTH)


WHEN = (  # an event's start and end: both dates or both date-times, per table
    V("startDate", (("DateTime", "start_datetime"), ("Date", "start_date")), weight=1.5, cpa_lookalike=True,
      partners=("endDate",), variant_key="when"),
    V("endDate", (("DateTime", "end_datetime"), ("Date", "end_date")), cpa_lookalike=True,
      partners=("startDate",), variant_key="when"),
)
PUBLISHED = P("datePublished", "Date", "published")
CREATED = P("dateCreated", "Date", "created", weight=0.5, cpa_lookalike=True, partners=("datePublished",))


# ----------------------------------------------------------------------------- other subjects
# The relation of column 0 to a column is its CPA label only where schema.org has one (a
# postcode area's locality is its addressLocality; a country's capital has no property in the set).

COUNTRY_TABLE = SubjectVariant("Country", OTHER_SUBJECTS["country"], 0.2, (
    fact("capital", "addressLocality", "capital", 1.5), fact("alpha2", "Country", "country_code_2", 0.8),
    fact("alpha3", "Country", "country_code_3", 0.6), fact("population", "Number", "country_population", 1.2),
    fact("area", "QuantitativeValue", "country_area", 0.8), fact("currency", "currency", "country_currency", 0.8),
    fact("languages", "Language", "spoken_languages", 0.8), fact("isoNumeric", "IdentifierAT", "identifier", 0.4),
    fact("timeZone", None, "time_zone", 0.3), P("url", "URL", "url", weight=0.4),
))
POSTCODE_TABLE = SubjectVariant("postalCode", OTHER_SUBJECTS["postcode"], 0.15, (
    P("addressLocality", "addressLocality", "city", weight=1.5), P("addressRegion", "addressRegion", "region"),
    P("addressCountry", "Country", "country", weight=0.5), *geo_props(0.8),
    fact("additionalType", "category", "place_category", 0.4), fact("population", "Number", "population", 0.4),
    fact("timeZone", None, "time_zone", 0.3),
))
ORGANISATION_TABLE = SubjectVariant("Organization", OTHER_SUBJECTS["organisation"], 0.3, (
    *address_props(0.7), P("telephone", "telephone", "telephone"), P("email", "email", "email", weight=0.6),
    P("url", "URL", "url"), code(1.0), code(0.5, "taxID", "identifier_b"),
    fact("foundingYear", "Number", "founding_year", 0.5), fact("numberOfEmployees", "Number", "employees", 0.5),
    fact("additionalType", "category", "org_category", 0.5),
    # a ranking's or a report's figures: bare amounts whose unit is in the header, profits signed
    fact("revenue", "Number", "figure_revenue", 0.4), fact("profit", "Number", "figure_profit", 0.35),
    fact("marketValue", "Number", "figure_market_value", 0.25), fact("assets", "Number", "figure_assets", 0.2),
))
# the towns of one country or region with their sizes and positions (a gazetteer page)
TOWN_TABLE = SubjectVariant("Place/name", OTHER_SUBJECTS["town"], 0.25, (
    P("addressCountry", "Country", "country", weight=1.2), fact("population", "Number", "population", 1.5),
    *geo_props(1.5), P("addressRegion", "addressRegion", "region", weight=0.6), code(0.6),
    P("postalCode", "postalCode", "postcode", weight=0.3), fact("elevation", "Distance", "elevation", 0.3),
    fact("area", "QuantitativeValue", "area", 0.3), fact("timeZone", None, "time_zone", 0.5),
    P("url", "URL", "url", weight=0.3),
))
TEAM_TABLE = SubjectVariant("SportsTeam", OTHER_SUBJECTS["team"], 0.2, (
    P("location", "addressLocality", "team_city", weight=1.5), P("addressRegion", "addressRegion", "region"),
    fact("venue", "Place/name", "team_venue", 0.6), fact("foundingYear", "Number", "founding_year", 0.8),
    fact("championships", "Number", "small_number", 0.5), code(0.6, kind="place_code"),
    P("url", "URL", "url", weight=0.5),
))
# a league table: the season's standings, one team per row (position, games, wins, draws,
# losses, goals, difference, points), as football sites print them
STANDINGS_TABLE = SubjectVariant("SportsTeam", OTHER_SUBJECTS["team"], 0.12, (
    fact("position", "Number", "standing_position", 1.2), fact("played", "Number", "standing_played", 1.5),
    fact("won", "Number", "standing_won", 1.5), fact("drawn", "Number", "standing_drawn", 1.5),
    fact("lost", "Number", "standing_lost", 1.5), fact("goals", None, "goals", 1.0),
    fact("goalDifference", "Number", "goal_difference", 0.8), fact("points", "Number", "standing_points", 1.5),
    P("location", "addressLocality", "team_city", weight=0.2),
))


# ----------------------------------------------------------------------------- the domains

DOMAINS: dict[str, Domain] = {d.name: d for d in (
    Domain("Book", SUBJECTS["Book"], (
        person("author", 2),
        P("isbn", "IdentifierAT", "isbn", weight=1.5, signature=True, **BOTH),
        P("bookFormat", "BookFormatType", "book_format", signature=True),
        P("numberOfPages", "Number", "pages", signature=True, cpa_lookalike=True),
        P("bookEdition", None, "edition", weight=0.5, signature=True),
        PUBLISHED, P("publisher", "Organization", "publisher", cpa_lookalike=True), language(),
        description("Book", "Book/description"), P("genre", "category", "book_genre", cpa_lookalike=True),
        P("copyrightYear", "Number", "copyright_year", weight=0.4),
        P("partOfSeries", "CreativeWorkSeries", "series", weight=0.4, **BOTH),
        P("review", "Review", "review", weight=0.4), *rating_props(),
        *offer_props("book_price", 0.7), *web_props(),
        code(0.3), fact("abridged", "Boolean", "boolean", 0.2),
    )),
    Domain("CreativeWork", SUBJECTS["CreativeWork"], (
        person("author", 2), PUBLISHED, CREATED,
        P("headline", None, "headline", signature=True), P("text", None, "article_text", signature=True),
        description("CreativeWork", None), P("genre", "category", "work_genre", cpa_lookalike=True),
        language(), P("publisher", "Organization", "publisher", cpa_lookalike=True),
        P("copyrightYear", "Number", "copyright_year", weight=0.5), *web_props(),
        code(0.3), fact("wordCount", "Number", "employees", 0.3),
    )),
    Domain("Event", SUBJECTS["Event"], (
        *WHEN,
        V("location", (("Place/name", "venue"), ("PostalAddress", "address"),
                       ("addressLocality", "event_city")),
          weight=1.5, **BOTH),
        P("eventStatus", "EventStatusType", "event_status"),
        P("eventAttendanceMode", "EventAttendanceModeEnumeration", "attendance_mode", weight=0.7),
        P("organizer", "Organization", "organizer", cpa_lookalike=True),
        person("performer", signature=True),
        P(None, "CreativeWork", "work_performed", key="workPerformed", weight=0.5, signature=True,
          cta_lookalike=True),
        P(None, "Boolean", "boolean", key="isAccessibleForFree", weight=0.3),
        description("Event", "Event/description"),
        *offer_props("ticket_price", valid_from="ticket_sale"), *web_props(),
        fact("eventDay", "DayOfWeek", "event_weekday", 0.5), fact("maximumAttendeeCapacity", "Number", "capacity", 0.3),
        code(0.3),
    )),
    Domain("Hotel", SUBJECTS["Hotel"], (
        *address_props(), *contact_props(fax=0.7), *geo_props(),
        P("checkInTime", "Time", "check_in", signature=True, partners=("checkoutTime",)),
        P("checkoutTime", "Time", "check_out", signature=True, partners=("checkInTime",)),
        P("amenityFeature", "LocationFeatureSpecification", "amenities", signature=True),
        P("priceRange", "priceRange", "price_range", **BOTH),
        P("paymentAccepted", "paymentAccepted", "payment", weight=0.5),
        P("currenciesAccepted", "currency", "currencies", weight=0.4),
        language("availableLanguage", "languages", 0.5),
        P(None, "QuantitativeValue", "floor_size", key="floorSize", weight=0.4, signature=True),
        description("Hotel", "Hotel/description"), *rating_props(),
        fact("numberOfRooms", "Number", "rooms", 0.5), fact("petsAllowed", "Boolean", "boolean", 0.3),
        code(0.3), fact("yearBuilt", "Number", "founding_year", 0.2),
    )),
    Domain("JobPosting", SUBJECTS["JobPosting"], (
        P("hiringOrganization", "Organization", "organisation", weight=2, signature=True, cpa_lookalike=True),
        P("datePosted", "Date", "posted", weight=1.5, cpa_lookalike=True, partners=("validThrough",)),
        V("validThrough", (("DateTime", "valid_through"), ("Date", "valid_through_date")), cpa_lookalike=True,
          partners=("datePosted",)),
        P("employmentType", "category", "employment_type", signature=True),
        P(None, "category", "department", key="department", weight=0.5),
        description("JobPosting", "JobPosting/description"),
        P(None, "MonetaryAmount", "salary", key="baseSalary", signature=True, cta_lookalike=True),
        P(None, "workHours", "work_hours", key="workHours", weight=0.6),
        P(None, "EducationalOccupationalCredential", "education", key="educationRequirements", weight=0.6),
        P(None, "OccupationalExperienceRequirements", "experience", key="experienceRequirements", weight=0.6),
        P(None, "CategoryCode", "occupation_code", key="occupationalCategory", weight=0.4),
        P("addressLocality", "addressLocality", "city", cpa_lookalike=True),
        P("addressRegion", "addressRegion", "region", weight=0.5),
        P("postalCode", "postalCode", "postcode", weight=0.5),
        P("streetAddress", "streetAddress", "street", weight=0.5),
        P("addressCountry", "Country", "country", weight=0.5, **BOTH), *web_props(0.5),
        code(0.5), fact("jobLocationType", "Boolean", "boolean", 0.3), fact("totalJobOpenings", "Number", "small_number", 0.2),
    )),
    Domain("LocalBusiness", SUBJECTS["LocalBusiness"], (
        *address_props(), *contact_props(fax=0.8), *geo_props(), *opening_props(),
        P("priceRange", "priceRange", "price_range", weight=0.6, **BOTH),
        P("paymentAccepted", "paymentAccepted", "payment", weight=0.6),
        P("currenciesAccepted", "currency", "currencies", weight=0.4),
        description("LocalBusiness", None, signature=True), *rating_props(0.4),
        code(0.5), fact("numberOfEmployees", "Number", "employees", 0.3), fact("foundingYear", "Number", "founding_year", 0.3),
        fact("additionalType", "category", "org_category", 0.3), fact("smokingAllowed", "Boolean", "boolean", 0.2),
    ), (ORGANISATION_TABLE,)),
    Domain("Movie", SUBJECTS["Movie"], (
        person("director", 1.5, signature=True), person("actor", 1.5), person("author", 0.4),
        P("datePublished", "Date", "release"), CREATED,
        P("duration", "Duration", "movie_duration", cpa_lookalike=True),
        P("genre", "category", "movie_genre", cpa_lookalike=True),
        P("contentRating", "Rating", "content_rating", signature=True),
        P("productionCompany", "Organization", "production_company", signature=True, cpa_lookalike=True),
        P("countryOfOrigin", "Country", "origin_country", **BOTH), language(),
        description("Movie", "Movie/description"), P("review", "Review", "review", weight=0.4),
        *rating_props(), *web_props(),
        code(0.4), fact("isFamilyFriendly", "Boolean", "boolean", 0.2),
    )),
    Domain("Museum", SUBJECTS["Museum"], (
        *address_props(), *contact_props(fax=0.6), *geo_props(), *opening_props(),
        P("price", "price", "admission_price", weight=0.5, cpa_lookalike=True),
        P("priceRange", "priceRange", "price_range", weight=0.3, **BOTH),
        P(None, "Boolean", "boolean", key="isAccessibleForFree", weight=0.5, signature=True),
        description("Museum", None, signature=True),
        fact("foundingYear", "Number", "founding_year", 0.4), fact("visitors", "Number", "visitors", 0.4), code(0.3),
    )),
    Domain("MusicAlbum", SUBJECTS["MusicAlbum"], (
        P("byArtist", "MusicArtistAT", "artist", weight=2, signature=True, **BOTH),
        P("numTracks", "Number", "tracks", signature=True, cpa_lookalike=True),
        P("track", "MusicRecording/name", "track", signature=True, **BOTH),
        PUBLISHED, P("genre", "category", "music_genre", cpa_lookalike=True),
        P("publisher", "Organization", "publisher", weight=0.5, cpa_lookalike=True),
        P("copyrightYear", "Number", "copyright_year", weight=0.4),
        description("MusicAlbum", None, weight=0.4), *rating_props(0.3), *web_props(),
        code(0.3),
    )),
    Domain("MusicRecording", SUBJECTS["MusicRecording"], (
        P("byArtist", "MusicArtistAT", "artist", weight=2, **BOTH),
        P("inAlbum", "MusicAlbum/name", "album", weight=1.5, signature=True, **BOTH),
        P("duration", "Duration", "track_duration"),
        PUBLISHED, P("genre", "category", "music_genre", cpa_lookalike=True),
        P(None, "IdentifierAT", "isrc", key="isrcCode", weight=0.4, signature=True),
        description("MusicRecording", None, weight=0.4), *web_props(0.5),
        fact("position", "Number", "small_number", 0.3),
    )),
    Domain("Person", SUBJECTS["Person"], (
        P("givenName", None, "given_name", signature=True, cpa_lookalike=True, partners=("familyName",)),
        P("familyName", None, "family_name", signature=True, cpa_lookalike=True, partners=("givenName",)),
        P("birthDate", "Date", "birth_date"),
        P("deathDate", "Date", "death_date", weight=0.5, cpa_lookalike=True, partners=("birthDate",)),
        P("birthPlace", "addressLocality", "birth_place", cpa_lookalike=True),
        P("nationality", "Country", "nationality", **BOTH),
        P("gender", "GenderType", "gender", signature=True),
        P("jobTitle", None, "job"), P(None, "category", "department", key="department", weight=0.3),
        P("honorificSuffix", "EducationalOccupationalCredential", "credential", weight=0.4),
        P("alumniOf", "Organization", "university", weight=0.6),
        P("weight", "weight", "person_weight", weight=0.3, cta_lookalike=True),
        P(None, "Distance", "height", key="height", weight=0.3),
        P("email", "email", "email"),
        P("telephone", "telephone", "telephone", weight=0.6, **BOTH,
          partners=("faxNumber",)),
        P("faxNumber", "faxNumber", "fax", weight=0.2, **BOTH,
          requires=("telephone",)),
        P("address", "PostalAddress", "address", weight=0.5), description("Person", None, weight=0.5),
        *web_props(),
        code(0.4), fact("active", "Boolean", "boolean", 0.3),
    )),
    Domain("Place", SUBJECTS["Place"], (
        *geo_props(2.5), *address_props(0.8),  # places are mostly pinned on a map
        P("telephone", "telephone", "telephone", weight=0.5, cta_lookalike=True),
        P("openingHours", "openingHours", "opening_hours", weight=0.5),
        description("Place", None, signature=True), *web_props(),
        *registry_props(),
    ), (COUNTRY_TABLE, POSTCODE_TABLE, TOWN_TABLE)),
    Domain("Product", SUBJECTS["Product"], (
        P("brand", "Brand", "brand", weight=1.5, **BOTH),
        P("gtin", "IdentifierAT", "gtin", signature=True, **BOTH),
        P("productID", "IdentifierAT", "product_id", **BOTH),
        P("model", "ProductModel", "model", signature=True),
        P("manufacturer", "Organization", "organisation", weight=0.6, cpa_lookalike=True),
        P("color", None, "colour", weight=0.6), P("material", None, "material", weight=0.4),
        P("weight", "weight", "product_weight", **BOTH),
        P("measurements", "Distance", "length", weight=0.4),
        V("category", (("category", "category"), ("CategoryCode", "category_code")), **BOTH),
        description("Product", "Product/description"),
        *offer_props("product_price", 1.5),
        P("itemCondition", "OfferItemCondition", "item_condition", signature=True),
        P("availableDeliveryMethod", "DeliveryMethod", "delivery", weight=0.4, signature=True),
        P("unitCode", "unitCode", "unit_code", weight=0.3, signature=True),
        P("unitText", "unitText", "unit_text", weight=0.3, signature=True),
        P("countryOfOrigin", "Country", "origin_country", weight=0.4, **BOTH),
        P("releaseDate", "Date", "release_date", weight=0.4),
        P("review", "Review", "review", weight=0.5), *rating_props(), *web_props(),
        fact("modelYear", "Number", "model_year", 0.4), fact("fuelEfficiency", "Number", "measure", 0.3),
        fact("packSize", "Number", "small_number", 0.3), fact("isFamilyFriendly", "Boolean", "boolean", 0.2),
    )),
    Domain("Recipe", SUBJECTS["Recipe"], (
        person("author"),
        P("prepTime", "Duration", "prep_time", cpa_lookalike=True, partners=("cookTime", "totalTime")),
        P("cookTime", "Duration", "cook_time", cpa_lookalike=True, partners=("prepTime", "totalTime")),
        P("totalTime", "Duration", "total_time", cpa_lookalike=True, partners=("prepTime", "cookTime")),
        P("recipeIngredient", "ItemList", "ingredients", weight=1.5, signature=True),
        P("recipeInstructions", "ItemList", "instructions", signature=True),
        P("recipeCategory", "category", "recipe_category", cpa_lookalike=True),
        P("recipeCuisine", "category", "cuisine", cpa_lookalike=True),
        P("nutrition", "Energy", "energy", signature=True),
        P("suitableForDiet", "RestrictedDiet", "diet", weight=0.5),
        P("servingSize", "Mass", "serving_mass", weight=0.6, **BOTH),
        P("cookingMethod", "category", "cooking_method", weight=0.4, cpa_lookalike=True),
        P(None, "QuantitativeValue", "recipe_yield", key="recipeYield", weight=0.6, signature=True),
        PUBLISHED, description("Recipe", "Recipe/description"), P("review", "Review", "review", weight=0.4),
        *rating_props(), *web_props(),
        fact("ratingCount", "Number", "employees", 0.3),
    )),
    Domain("Restaurant", SUBJECTS["Restaurant"], (
        *address_props(), *contact_props(fax=0.6), *geo_props(),
        P("servesCuisine", "category", "cuisine", weight=1.5, signature=True, cpa_lookalike=True),
        P("priceRange", "priceRange", "price_range", weight=1.2, **BOTH),
        P("openingHours", "openingHours", "opening_hours"),
        P("paymentAccepted", "paymentAccepted", "payment", weight=0.5),
        P("currenciesAccepted", "currency", "currencies", weight=0.3),
        P(None, "Boolean", "boolean", key="acceptsReservations", weight=0.5, signature=True),
        description("Restaurant", None, signature=True), *rating_props(),
        fact("seats", "Number", "seats", 0.4), code(0.2), fact("foundingYear", "Number", "founding_year", 0.2),
    )),
    Domain("SportsEvent", SUBJECTS["SportsEvent"], (
        P("homeTeam", "SportsTeam", "home_team", weight=1.5, signature=True, cpa_lookalike=True,
          partners=("awayTeam", "location")),
        P("awayTeam", "SportsTeam", "away_team", weight=1.5, signature=True, cpa_lookalike=True,
          partners=("homeTeam", "location")),
        *WHEN,
        V("location", (("Place/name", "home_venue"), ("addressLocality", "home_city")), **BOTH),
        P("eventStatus", "EventStatusType", "event_status", weight=0.6),
        P("eventAttendanceMode", "EventAttendanceModeEnumeration", "attendance_mode", weight=0.3),
        P("organizer", "Organization", "organizer", weight=0.5, cpa_lookalike=True),
        description("SportsEvent", None, weight=0.5),
        *offer_props("ticket_price", 0.7, valid_from="ticket_sale"), *web_props(0.5),
        fact("eventDay", "DayOfWeek", "event_weekday", 0.4), fact("attendance", "Number", "capacity", 0.5), code(0.3),
    ), (TEAM_TABLE, STANDINGS_TABLE)),
    Domain("TVEpisode", SUBJECTS["TVEpisode"], (
        P("episodeNumber", "Number", "episode_number", weight=1.5, signature=True, cpa_lookalike=True),
        P("partOfSeries", "CreativeWorkSeries", "series", weight=1.5, signature=True, **BOTH),
        PUBLISHED, person("actor"), person("director", 0.6),
        P("duration", "Duration", "episode_duration", cpa_lookalike=True),
        P("contentRating", "Rating", "content_rating", weight=0.5), language(weight=0.5),
        description("TVEpisode", None, weight=0.6), *web_props(),
        fact("seasonNumber", "Number", "small_number", 0.5), code(0.3),
    )),
)}

# Columns only the specialists' own tables (`specialist_train`) carry: knowledge one expert holds
# and the primary never reads, which Phase 3 must pass on through its seams (as the real product
# catalogues are for `commerce`). A film's worldwide takings (`MonetaryAmount`; no CPA property in
# the set names it) and its critics' score in percent (`Number`).
EXPERT_ONLY_PROPS: dict[str, tuple[Prop, ...]] = {
    "Movie": (fact("boxOffice", "MonetaryAmount", "gross", 2.0), fact("criticScore", "Number", "percent_score", 1.0)),
}

DOMAIN_NAMES: tuple[str, ...] = tuple(DOMAINS)
