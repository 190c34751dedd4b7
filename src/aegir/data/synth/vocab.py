"""Small curated vocabularies for what Faker and mimesis do not have.

schema.org enumerations, calendar words in six languages, countries, languages, currencies,
units, diets, amenities, and the word pools and templates the name and text generators draw
from. Everything here is a tuple or a dict of tuples: the generator never iterates a set, so
its output does not depend on Python's string hash seed.
"""

from __future__ import annotations

from mimesis import datasets as mimesis_data

# ----------------------------------------------------------------------------- calendar

MONTHS: dict[str, tuple[str, ...]] = {
    "en": ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"),
    "de": ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September",
           "Oktober", "November", "Dezember"),
    "fr": ("janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre",
           "octobre", "novembre", "décembre"),
    "es": ("enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto",
           "septiembre", "octubre", "noviembre", "diciembre"),
    "it": ("gennaio", "febbraio", "marzo", "aprile", "maggio", "giugno", "luglio", "agosto",
           "settembre", "ottobre", "novembre", "dicembre"),
    "nl": ("januari", "februari", "maart", "april", "mei", "juni", "juli", "augustus",
           "september", "oktober", "november", "december"),
}

WEEKDAYS: dict[str, tuple[str, ...]] = {  # Monday first, as datetime.weekday() counts
    "en": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "de": ("Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag"),
    "fr": ("lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"),
    "es": ("lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo"),
    "it": ("lunedì", "martedì", "mercoledì", "giovedì", "venerdì", "sabato", "domenica"),
    "nl": ("maandag", "dinsdag", "woensdag", "donderdag", "vrijdag", "zaterdag", "zondag"),
}
SCHEMA_DAYS = ("Mo", "Tu", "We", "Th", "Fr", "Sa", "Su")  # schema.org openingHours day codes

# ----------------------------------------------------------------------------- schema.org enumerations
# Each member: (short schema.org name, human spelling).

ENUMS: dict[str, tuple[tuple[str, str], ...]] = {
    "ItemAvailability": (
        ("InStock", "In stock"), ("OutOfStock", "Out of stock"), ("PreOrder", "Pre-order"),
        ("BackOrder", "Back order"), ("Discontinued", "Discontinued"),
        ("LimitedAvailability", "Limited availability"), ("SoldOut", "Sold out"),
        ("OnlineOnly", "Online only"), ("InStoreOnly", "In store only"), ("PreSale", "Pre-sale"),
    ),
    "EventStatusType": (
        ("EventScheduled", "Scheduled"), ("EventCancelled", "Cancelled"),
        ("EventPostponed", "Postponed"), ("EventRescheduled", "Rescheduled"),
        ("EventMovedOnline", "Moved online"),
    ),
    "OfferItemCondition": (
        ("NewCondition", "New"), ("UsedCondition", "Used"),
        ("RefurbishedCondition", "Refurbished"), ("DamagedCondition", "Damaged"),
    ),
    "BookFormatType": (
        ("Hardcover", "Hardcover"), ("Paperback", "Paperback"), ("EBook", "E-book"),
        ("AudiobookFormat", "Audiobook"), ("GraphicNovel", "Graphic novel"),
    ),
    "GenderType": (("Male", "male"), ("Female", "female")),
    "EventAttendanceModeEnumeration": (
        ("OfflineEventAttendanceMode", "Offline"), ("OnlineEventAttendanceMode", "Online"),
        ("MixedEventAttendanceMode", "Mixed"),
    ),
    "RestrictedDiet": (
        ("DiabeticDiet", "Diabetic"), ("GlutenFreeDiet", "Gluten-free"), ("HalalDiet", "Halal"),
        ("HinduDiet", "Hindu"), ("KosherDiet", "Kosher"), ("LowCalorieDiet", "Low calorie"),
        ("LowFatDiet", "Low fat"), ("LowLactoseDiet", "Low lactose"), ("LowSaltDiet", "Low salt"),
        ("VeganDiet", "Vegan"), ("VegetarianDiet", "Vegetarian"),
    ),
    "DeliveryMethod": (
        ("DeliveryModeDirectDownload", "Direct download"), ("DeliveryModeFreight", "Freight"),
        ("DeliveryModeMail", "Mail"), ("DeliveryModeOwnFleet", "Own fleet"),
        ("DeliveryModePickUp", "Pick up"), ("OnSitePickup", "On-site pickup"),
        ("ParcelService", "Parcel service"), ("LockerDelivery", "Locker delivery"),
    ),
    "Boolean": (("True", "yes"), ("False", "no")),
}
GOODRELATIONS_CARRIERS = ("DHL", "UPS", "FederalExpress")  # http://purl.org/goodrelations/v1#DHL

# ----------------------------------------------------------------------------- places

# iso2, iso3, English, German, French, Spanish, Italian, Dutch
COUNTRIES: tuple[tuple[str, ...], ...] = (
    ("US", "USA", "United States", "Vereinigte Staaten", "États-Unis", "Estados Unidos", "Stati Uniti",
     "Verenigde Staten"),
    ("GB", "GBR", "United Kingdom", "Vereinigtes Königreich", "Royaume-Uni", "Reino Unido", "Regno Unito",
     "Verenigd Koninkrijk"),
    ("DE", "DEU", "Germany", "Deutschland", "Allemagne", "Alemania", "Germania", "Duitsland"),
    ("FR", "FRA", "France", "Frankreich", "France", "Francia", "Francia", "Frankrijk"),
    ("ES", "ESP", "Spain", "Spanien", "Espagne", "España", "Spagna", "Spanje"),
    ("IT", "ITA", "Italy", "Italien", "Italie", "Italia", "Italia", "Italië"),
    ("NL", "NLD", "Netherlands", "Niederlande", "Pays-Bas", "Países Bajos", "Paesi Bassi", "Nederland"),
    ("AT", "AUT", "Austria", "Österreich", "Autriche", "Austria", "Austria", "Oostenrijk"),
    ("CH", "CHE", "Switzerland", "Schweiz", "Suisse", "Suiza", "Svizzera", "Zwitserland"),
    ("BE", "BEL", "Belgium", "Belgien", "Belgique", "Bélgica", "Belgio", "België"),
    ("CA", "CAN", "Canada", "Kanada", "Canada", "Canadá", "Canada", "Canada"),
    ("AU", "AUS", "Australia", "Australien", "Australie", "Australia", "Australia", "Australië"),
    ("JP", "JPN", "Japan", "Japan", "Japon", "Japón", "Giappone", "Japan"),
    ("CN", "CHN", "China", "China", "Chine", "China", "Cina", "China"),
    ("BR", "BRA", "Brazil", "Brasilien", "Brésil", "Brasil", "Brasile", "Brazilië"),
    ("MX", "MEX", "Mexico", "Mexiko", "Mexique", "México", "Messico", "Mexico"),
    ("IN", "IND", "India", "Indien", "Inde", "India", "India", "India"),
    ("SE", "SWE", "Sweden", "Schweden", "Suède", "Suecia", "Svezia", "Zweden"),
    ("PT", "PRT", "Portugal", "Portugal", "Portugal", "Portugal", "Portogallo", "Portugal"),
    ("IE", "IRL", "Ireland", "Irland", "Irlande", "Irlanda", "Irlanda", "Ierland"),
    ("PL", "POL", "Poland", "Polen", "Pologne", "Polonia", "Polonia", "Polen"),
    ("DK", "DNK", "Denmark", "Dänemark", "Danemark", "Dinamarca", "Danimarca", "Denemarken"),
    ("NO", "NOR", "Norway", "Norwegen", "Norvège", "Noruega", "Norvegia", "Noorwegen"),
    ("GR", "GRC", "Greece", "Griechenland", "Grèce", "Grecia", "Grecia", "Griekenland"),
    ("KR", "KOR", "South Korea", "Südkorea", "Corée du Sud", "Corea del Sur", "Corea del Sud", "Zuid-Korea"),
    ("CZ", "CZE", "Czechia", "Tschechien", "Tchéquie", "Chequia", "Cechia", "Tsjechië"),
    ("FI", "FIN", "Finland", "Finnland", "Finlande", "Finlandia", "Finlandia", "Finland"),
    ("HU", "HUN", "Hungary", "Ungarn", "Hongrie", "Hungría", "Ungheria", "Hongarije"),
    ("HR", "HRV", "Croatia", "Kroatien", "Croatie", "Croacia", "Croazia", "Kroatië"),
    ("SK", "SVK", "Slovakia", "Slowakei", "Slovaquie", "Eslovaquia", "Slovacchia", "Slowakije"),
    ("EE", "EST", "Estonia", "Estland", "Estonie", "Estonia", "Estonia", "Estland"),
    ("IS", "ISL", "Iceland", "Island", "Islande", "Islandia", "Islanda", "IJsland"),
    ("TR", "TUR", "Turkey", "Türkei", "Turquie", "Turquía", "Turchia", "Turkije"),
    ("RU", "RUS", "Russia", "Russland", "Russie", "Rusia", "Russia", "Rusland"),
    ("UA", "UKR", "Ukraine", "Ukraine", "Ukraine", "Ucrania", "Ucraina", "Oekraïne"),
    ("KZ", "KAZ", "Kazakhstan", "Kasachstan", "Kazakhstan", "Kazajistán", "Kazakistan", "Kazachstan"),
    ("AZ", "AZE", "Azerbaijan", "Aserbaidschan", "Azerbaïdjan", "Azerbaiyán", "Azerbaigian", "Azerbeidzjan"),
    ("AE", "ARE", "United Arab Emirates", "Vereinigte Arabische Emirate", "Émirats arabes unis",
     "Emiratos Árabes Unidos", "Emirati Arabi Uniti", "Verenigde Arabische Emiraten"),
    ("EG", "EGY", "Egypt", "Ägypten", "Égypte", "Egipto", "Egitto", "Egypte"),
    ("MA", "MAR", "Morocco", "Marokko", "Maroc", "Marruecos", "Marocco", "Marokko"),
    ("DZ", "DZA", "Algeria", "Algerien", "Algérie", "Argelia", "Algeria", "Algerije"),
    ("SA", "SAU", "Saudi Arabia", "Saudi-Arabien", "Arabie saoudite", "Arabia Saudita", "Arabia Saudita",
     "Saoedi-Arabië"),
)
COUNTRY_NAME_COLUMN = {"en": 2, "de": 3, "fr": 4, "es": 5, "it": 6, "nl": 7}

# per country: calling code, currency, (lat_min, lat_max, lon_min, lon_max), UTC offset in summer
COUNTRY_FACTS: dict[str, tuple[str, str, tuple[float, float, float, float], str]] = {
    "US": ("1", "USD", (25.5, 48.8, -123.0, -70.0), "-05:00"),
    "GB": ("44", "GBP", (50.2, 58.5, -5.5, 1.7), "+01:00"),
    "DE": ("49", "EUR", (47.4, 54.8, 6.0, 14.9), "+02:00"),
    "FR": ("33", "EUR", (42.5, 50.9, -4.4, 7.9), "+02:00"),
    "ES": ("34", "EUR", (36.2, 43.6, -8.9, 3.2), "+02:00"),
    "IT": ("39", "EUR", (37.0, 46.9, 6.7, 18.4), "+02:00"),
    "NL": ("31", "EUR", (50.8, 53.4, 3.5, 7.1), "+02:00"),
    "AT": ("43", "EUR", (46.5, 48.9, 9.6, 17.0), "+02:00"),
    "CH": ("41", "CHF", (45.9, 47.7, 6.1, 10.4), "+02:00"),
    "BE": ("32", "EUR", (49.6, 51.4, 2.6, 6.3), "+02:00"),
    "CA": ("1", "CAD", (43.0, 55.0, -123.0, -63.0), "-04:00"),
    "AU": ("61", "AUD", (-37.8, -12.5, 115.0, 153.0), "+10:00"),
    "PT": ("351", "EUR", (37.0, 42.0, -9.4, -6.3), "+01:00"),
    "IE": ("353", "EUR", (51.5, 55.3, -10.3, -6.0), "+01:00"),
    "PL": ("48", "PLN", (49.1, 54.7, 14.2, 24.1), "+02:00"),
    "SE": ("46", "SEK", (55.4, 67.8, 11.2, 23.8), "+02:00"),
    "DK": ("45", "DKK", (54.6, 57.7, 8.1, 12.6), "+02:00"),
    "NO": ("47", "NOK", (58.0, 69.5, 5.0, 30.0), "+02:00"),
    "BR": ("55", "BRL", (-30.0, -3.0, -60.0, -35.0), "-03:00"),
    "MX": ("52", "MXN", (15.0, 32.0, -115.0, -87.0), "-06:00"),
    "JP": ("81", "JPY", (31.0, 43.0, 130.0, 145.0), "+09:00"),
    "CN": ("86", "CNY", (22.0, 45.0, 100.0, 122.0), "+08:00"),
    "KR": ("82", "KRW", (34.5, 38.0, 126.0, 129.5), "+09:00"),
    "IN": ("91", "INR", (8.0, 32.0, 70.0, 90.0), "+05:30"),
    "GR": ("30", "EUR", (35.0, 41.5, 20.0, 28.0), "+03:00"),
    "CZ": ("420", "CZK", (48.6, 51.0, 12.1, 18.8), "+02:00"),
    "FI": ("358", "EUR", (59.8, 69.9, 20.6, 31.5), "+03:00"),
    "HU": ("36", "HUF", (45.8, 48.5, 16.1, 22.9), "+02:00"),
    "HR": ("385", "EUR", (42.4, 46.5, 13.5, 19.4), "+02:00"),
    "SK": ("421", "EUR", (47.8, 49.6, 16.8, 22.5), "+02:00"),
    "EE": ("372", "EUR", (57.5, 59.6, 21.8, 28.2), "+03:00"),
    "IS": ("354", "ISK", (63.4, 66.5, -24.5, -13.5), "+00:00"),
    "TR": ("90", "TRY", (36.0, 42.0, 26.0, 44.8), "+03:00"),
    "RU": ("7", "RUB", (43.0, 68.0, 28.0, 135.0), "+03:00"),
    "UA": ("380", "UAH", (44.4, 52.3, 22.2, 40.2), "+03:00"),
    "KZ": ("7", "KZT", (40.6, 55.4, 46.5, 87.3), "+05:00"),
    "AZ": ("994", "AZN", (38.4, 41.9, 44.8, 50.4), "+04:00"),
    "AE": ("971", "AED", (22.6, 26.1, 51.6, 56.4), "+04:00"),
    "EG": ("20", "EGP", (22.0, 31.6, 25.0, 35.0), "+03:00"),
    "MA": ("212", "MAD", (27.7, 35.9, -13.2, -1.0), "+01:00"),
    "DZ": ("213", "DZD", (19.0, 37.0, -8.6, 12.0), "+01:00"),
    "SA": ("966", "SAR", (16.4, 32.1, 34.5, 55.6), "+03:00"),
}

# Countries whose places (cities, regions, streets, postcodes) mimesis can name, by its locale.
# A table about places abroad draws them from here (see `context.GeoFrame`); the non-Latin
# scripts are rarer, as on the mostly Western sites the benchmark imitates.
PLACE_LOCALES: dict[str, str] = {
    "US": "en", "GB": "en-gb", "DE": "de", "FR": "fr", "ES": "es", "IT": "it", "NL": "nl",
    "AT": "de-at", "CH": "de-ch", "BE": "nl-be", "CA": "en-ca", "AU": "en-au", "BR": "pt-br",
    "MX": "es-mx", "SE": "sv", "PT": "pt", "PL": "pl", "DK": "da", "NO": "no", "CZ": "cs",
    "FI": "fi", "HU": "hu", "HR": "hr", "SK": "sk", "EE": "et", "IS": "is", "TR": "tr", "AZ": "az",
    "GR": "el", "RU": "ru", "UA": "uk", "KZ": "kk", "JP": "ja", "CN": "zh", "KR": "ko",
    "AE": "ar-ae", "EG": "ar-eg", "MA": "ar-ma", "DZ": "ar-dz", "SA": "ar-sa",
}
NON_LATIN_PLACES = ("GR", "RU", "UA", "KZ", "JP", "CN", "KR", "AE", "EG", "MA", "DZ", "SA")

# language code, English name, native name, ISO 639-2
LANGUAGES: tuple[tuple[str, str, str, str], ...] = (
    ("en", "English", "English", "eng"), ("de", "German", "Deutsch", "deu"),
    ("fr", "French", "Français", "fra"), ("es", "Spanish", "Español", "spa"),
    ("it", "Italian", "Italiano", "ita"), ("nl", "Dutch", "Nederlands", "nld"),
    ("pt", "Portuguese", "Português", "por"), ("ja", "Japanese", "日本語", "jpn"),
    ("zh", "Chinese", "中文", "zho"), ("ru", "Russian", "Русский", "rus"),
    ("sv", "Swedish", "Svenska", "swe"), ("pl", "Polish", "Polski", "pol"),
    ("da", "Danish", "Dansk", "dan"), ("ko", "Korean", "한국어", "kor"),
)

# code, symbol, English name
CURRENCIES: tuple[tuple[str, str, str], ...] = (
    ("EUR", "€", "Euro"), ("USD", "$", "US Dollar"), ("GBP", "£", "Pound Sterling"),
    ("CHF", "CHF", "Swiss Franc"), ("CAD", "CA$", "Canadian Dollar"),
    ("AUD", "A$", "Australian Dollar"), ("JPY", "¥", "Japanese Yen"), ("SEK", "kr", "Swedish Krona"),
    ("PLN", "zł", "Polish Złoty"), ("DKK", "kr.", "Danish Krone"), ("NOK", "kr", "Norwegian Krone"),
    ("BRL", "R$", "Brazilian Real"), ("MXN", "MX$", "Mexican Peso"), ("CNY", "CN¥", "Chinese Yuan"),
    ("KRW", "₩", "South Korean Won"), ("INR", "₹", "Indian Rupee"),
    ("CZK", "Kč", "Czech Koruna"), ("HUF", "Ft", "Hungarian Forint"), ("ISK", "kr", "Icelandic Króna"),
    ("TRY", "₺", "Turkish Lira"), ("RUB", "₽", "Russian Ruble"), ("UAH", "₴", "Ukrainian Hryvnia"),
    ("KZT", "₸", "Kazakhstani Tenge"), ("AZN", "₼", "Azerbaijani Manat"), ("AED", "AED", "UAE Dirham"),
    ("EGP", "E£", "Egyptian Pound"), ("MAD", "MAD", "Moroccan Dirham"), ("DZD", "DA", "Algerian Dinar"),
    ("SAR", "SAR", "Saudi Riyal"),
)

# ----------------------------------------------------------------------------- commerce

PAYMENT_METHODS = (
    "Cash", "Credit Card", "Visa", "Mastercard", "American Express", "PayPal", "Debit Card",
    "Invoice", "Bank transfer", "Apple Pay", "Google Pay", "Maestro", "Diners Club", "Cheque",
    "EC-Karte", "Carte Bleue", "iDEAL", "Sofortüberweisung", "Contactless",
)

UNITS: tuple[tuple[str, str], ...] = (  # UN/CEFACT common code, unit text
    ("C62", "piece"), ("H87", "piece"), ("EA", "each"), ("KGM", "kg"), ("GRM", "g"),
    ("LTR", "l"), ("MLT", "ml"), ("MTR", "m"), ("CMT", "cm"), ("MTK", "m²"), ("PR", "pair"),
    ("SET", "set"), ("XPK", "pack"), ("HUR", "hour"), ("DAY", "day"), ("MON", "month"),
)
UNIT_TEXT_VARIANTS = {  # other spellings of the same unit text seen on the web
    "piece": ("piece", "pcs", "Stück", "pièce", "per item", "unit"),
    "each": ("each", "ea."), "kg": ("kg", "kilogram", "Kilogramm"), "g": ("g", "gram", "Gramm"),
    "l": ("l", "litre", "liter", "Liter"), "ml": ("ml", "millilitre"), "m": ("m", "metre", "meter"),
    "cm": ("cm", "centimetre"), "m²": ("m²", "sqm", "square metre"), "pair": ("pair", "Paar"),
    "set": ("set", "Set"), "pack": ("pack", "package", "Packung"), "hour": ("hour", "per hour", "Stunde"),
    "day": ("day", "per day", "Tag"), "month": ("month", "per month", "Monat"),
}

PRODUCT_CATEGORIES = (
    "Electronics > Audio > Headphones", "Electronics > Computers > Laptops", "Electronics",
    "Home & Garden > Kitchen & Dining", "Home & Garden > Furniture", "Home & Garden",
    "Apparel & Accessories > Clothing > Shirts & Tops", "Apparel & Accessories > Shoes",
    "Clothing", "Shoes", "Toys & Games", "Sporting Goods > Outdoor Recreation", "Sports & Outdoors",
    "Health & Beauty > Personal Care", "Beauty", "Food, Beverages & Tobacco > Food Items",
    "Grocery", "Office Supplies", "Tools & Home Improvement", "Baby & Toddler", "Pet Supplies",
    "Jewelry", "Watches", "Luggage & Bags", "Cameras & Optics", "Books", "Music", "Garden",
)
PRODUCT_NOUNS = (
    "Wireless Headphones", "Bluetooth Speaker", "Running Shoes", "Backpack", "Coffee Maker",
    "Desk Lamp", "Office Chair", "Water Bottle", "Yoga Mat", "T-Shirt", "Hoodie", "Sneakers",
    "Smartwatch", "Laptop Sleeve", "USB-C Cable", "Power Bank", "Kitchen Knife", "Frying Pan",
    "Cutting Board", "Tea Kettle", "Sunglasses", "Leather Wallet", "Travel Mug", "Bed Sheet Set",
    "Throw Pillow", "Garden Hose", "Drill Driver", "Screwdriver Set", "Dog Leash", "Cat Tree",
    "Face Cream", "Shampoo", "Toothbrush", "Hair Dryer", "Action Camera", "Tripod", "Monitor",
    "Keyboard", "Mouse", "Gaming Headset", "Rain Jacket", "Wool Socks", "Ski Gloves", "Tent",
    "Sleeping Bag", "Blender", "Toaster", "Espresso Machine", "Board Game", "Puzzle",
)
FOOD_PRODUCT_WORDS = (  # shared by Product names and Recipe names in hard tables
    "Dark Chocolate", "Sea Salt Caramel", "Lemon", "Blueberry", "Almond", "Hazelnut",
    "Pumpkin Spice", "Cinnamon", "Vanilla", "Oat", "Banana", "Honey", "Matcha", "Coconut",
    "Raspberry", "Apple", "Peanut Butter", "Chili", "Garlic", "Tomato Basil", "Sourdough",
    "Spelt", "Walnut", "Maple", "Ginger", "Orange", "Pistachio", "Cherry", "Mango", "Rye",
)
FOOD_PRODUCT_TYPES = (
    "Cookies", "Brownies", "Granola", "Muffins", "Bread", "Cake", "Crackers", "Pesto",
    "Sauce", "Jam", "Ice Cream", "Bars", "Soup", "Pasta", "Tart", "Scones", "Biscuits",
    "Smoothie", "Chutney", "Pancakes",
)
MATERIALS = (
    "Cotton", "Organic cotton", "Polyester", "Leather", "Stainless steel", "Aluminium", "Wood",
    "Oak", "Bamboo", "Glass", "Ceramic", "Silicone", "Wool", "Merino wool", "Linen", "Nylon",
    "Plastic", "Recycled plastic", "Cast iron", "Silver", "Rubber", "Baumwolle", "Coton",
)
MODEL_PREFIXES = ("X", "Pro", "S", "Air", "Max", "Lite", "GT", "Z", "M", "Ultra", "Neo", "Q")
BRAND_SYLLABLES = (
    "ko", "ra", "vi", "zen", "lu", "mar", "no", "ta", "vo", "li", "sa", "tek", "fi", "da",
    "ori", "nex", "ka", "mi", "tro", "qua", "bel", "sol", "ar", "on", "ix", "el", "ve", "ro",
)
REVIEW_OPENERS = (
    "Great product", "Excellent value", "Absolutely love it", "Not worth the money",
    "Does what it says", "Would recommend", "Disappointed", "Five stars", "Fantastic",
    "Pretty good overall", "Terrible experience", "Exceeded my expectations", "Solid choice",
    "Could be better", "Perfect", "Highly recommended", "Okay for the price", "Loved every minute",
)
REVIEW_BODIES = (
    "Arrived quickly and well packaged.", "The quality is much better than I expected.",
    "Customer service was friendly and helpful.", "I have been using it for a month now.",
    "Would definitely buy again.", "It broke after two weeks.", "Great for the whole family.",
    "The staff were lovely and the location is perfect.", "A bit overpriced but worth it.",
    "Exactly as described.", "The second half drags a little.", "My kids loved it.",
    "Easy to follow and delicious.", "I read it in one sitting.", "Not as good as the first one.",
)

# ----------------------------------------------------------------------------- creative works

TITLE_ADJECTIVES = (
    "Silent", "Broken", "Golden", "Hidden", "Last", "Lost", "Secret", "Dark", "Bright", "Wild",
    "Little", "Endless", "Distant", "Crimson", "Quiet", "Burning", "Frozen", "Electric", "Velvet",
    "Savage", "Midnight", "Forgotten", "Eternal", "Restless", "Paper", "Glass", "Iron", "Hollow",
)
TITLE_NOUNS = (
    "River", "Garden", "House", "Shadow", "Heart", "Sea", "Storm", "Road", "Night", "Light",
    "City", "Mountain", "Dream", "Winter", "Summer", "Fire", "Moon", "Sky", "Island", "Girl",
    "Boy", "King", "Queen", "Stranger", "Forest", "Letter", "Promise", "Machine", "Kingdom",
    "Echo", "Empire", "Horizon", "Harbor", "Bridge", "Song", "Window", "Mirror", "Voyage",
    "Season", "Wolf", "Crown", "Orchard", "Tide", "Lantern", "Compass", "Memory", "Ghost",
)
TITLE_PATTERNS = (
    "The {Adj} {Noun}", "{Adj} {Noun}", "The {Noun}", "{Noun} of {Nouns}", "The {Noun} of {City}",
    "A {Noun} in {City}", "{First}'s {Noun}", "{Noun} and {Noun}", "{Adj} {Nouns}",
    "Beyond the {Noun}", "Under the {Adj} {Noun}", "{Noun}", "After the {Noun}",
    "The {Adj} {Noun} of {First} {Last}", "When the {Noun} Falls", "{City} {Nouns}",
)
BOOK_TITLE_CUES = (": A Novel", " (Paperback)", ": Stories", ", Vol. {n}", " (Book {n})", ": A Memoir")
MOVIE_TITLE_CUES = (" ({year})", " Part {roman}", " – Director's Cut", " {n}")
EPISODE_TITLE_CUES = ("Episode {n}", "Pilot", "Part {n}", "S{s:02d}E{n:02d} – {title}",
                      "Chapter {n}: {title}")
ALBUM_TITLE_CUES = (" (Deluxe Edition)", " (Live)", " (Remastered)", " EP", " – Greatest Hits",
                    " (Original Soundtrack)")
RECORDING_TITLE_CUES = (" (feat. {artist})", " (Radio Edit)", " - Remastered {year}", " (Acoustic)",
                        " (Live)", " [Extended Mix]")
ARTICLE_PATTERNS = (
    "How to {verb} your {noun}", "{n} ways to {verb} your {noun}", "Why {nouns} matter",
    "The complete guide to {nouns}", "What we learned from {nouns}", "{nouns} explained",
)
ARTICLE_VERBS = ("improve", "clean", "organise", "plan", "protect", "grow", "choose", "repair")
ARTICLE_NOUNS = ("garden", "kitchen", "budget", "website", "bike", "wardrobe", "holiday", "team")
SERIES_PATTERNS = ("The {Noun} Chronicles", "{Noun} Trilogy", "The {Adj} {Noun} Series",
                   "{City} {Nouns}", "{Adj} {Noun}", "The {Noun}")
BAND_PATTERNS = ("The {Adj} {Nouns}", "{Adj} {Noun}", "{Noun} {Noun}", "The {Nouns}",
                 "DJ {Last}", "{First} & the {Nouns}", "{Noun} Collective", "MC {First}")
WORK_PERFORMED = (
    "Hamlet", "Macbeth", "La Traviata", "The Magic Flute", "Carmen", "Swan Lake", "The Nutcracker",
    "Don Giovanni", "A Midsummer Night's Dream", "Les Misérables", "Romeo and Juliet", "Tosca",
    "The Marriage of Figaro", "Faust", "Aida", "Die Fledermaus", "Madama Butterfly", "Othello",
    "The Seagull", "Waiting for Godot", "Rigoletto", "La Bohème", "The Tempest", "King Lear",
)

BOOK_GENRES = ("Fiction", "Mystery", "Thriller", "Science Fiction", "Fantasy", "Romance",
               "Biography", "History", "Self-Help", "Children's Books", "Young Adult", "Poetry",
               "Crime", "Horror", "Literary Fiction", "Cookbooks", "Travel", "Non-fiction")
MOVIE_GENRES = ("Drama", "Comedy", "Action", "Thriller", "Horror", "Romance", "Documentary",
                "Animation", "Science Fiction", "Crime", "Adventure", "Family", "Fantasy", "War",
                "Western", "Musical", "Mystery")
MUSIC_GENRES = ("Rock", "Pop", "Jazz", "Hip-Hop", "Electronic", "Classical", "Country", "Blues",
                "Folk", "Metal", "Reggae", "Soul", "R&B", "Punk", "Indie", "Techno", "House", "Latin")
CREATIVE_WORK_GENRES = ("News", "Opinion", "Tutorial", "Review", "Interview", "Essay", "Guide",
                        "Podcast", "Report", "Photography", "Illustration")
CONTENT_RATINGS = ("G", "PG", "PG-13", "R", "NC-17", "TV-Y", "TV-G", "TV-PG", "TV-14", "TV-MA",
                   "FSK 0", "FSK 6", "FSK 12", "FSK 16", "FSK 18", "U", "12A", "15", "18",
                   "Tous publics", "-12", "-16", "MPAA PG-13", "Rated R")
EDITIONS = ("1st edition", "2nd edition", "3rd edition", "First Edition", "Second Edition",
            "Revised edition", "Anniversary edition", "2. Auflage", "Illustrated edition",
            "Collector's edition", "4th ed.", "Special edition")

# ----------------------------------------------------------------------------- people and organisations

CREDENTIALS = ("PhD", "MD", "MBA", "MSc", "MA", "BSc", "BA", "LLM", "DDS", "Dipl.-Ing.", "M.Sc.",
               "B.A.", "Ph.D.", "JD", "RN", "CPA")
EDUCATION_REQUIREMENTS = (
    "Bachelor's degree", "Master's degree", "High school diploma", "PhD in a relevant field",
    "Bachelor's degree in Computer Science", "Vocational training", "Associate degree",
    "Abgeschlossene Berufsausbildung", "Master in Business Administration", "Professional certificate",
    "Diploma in Nursing", "Bachelor's degree or equivalent experience", "Licence professionnelle",
)
EXPERIENCE_REQUIREMENTS = (
    "{n}+ years of experience in {field}", "At least {n} years of relevant experience",
    "Minimum {n} years experience", "{n} years of professional experience in {field}",
    "Experience in {field} preferred", "No experience required",
    "{n}-{m} years of experience", "Mindestens {n} Jahre Berufserfahrung",
)
EXPERIENCE_FIELDS = ("software development", "sales", "customer service", "project management",
                     "accounting", "logistics", "nursing", "marketing", "retail", "data analysis",
                     "hospitality", "construction", "teaching")
EMPLOYMENT_TYPES = ("FULL_TIME", "PART_TIME", "CONTRACTOR", "TEMPORARY", "INTERN", "VOLUNTEER",
                    "PER_DIEM", "Full-time", "Part-time", "Contract", "Temporary", "Internship",
                    "Vollzeit", "Teilzeit", "CDI", "Tiempo completo")
# The units of an organisation, as staff lists, job boards and directories name them: words that
# are capitalised like places and are no place.
DEPARTMENTS = ("Engineering", "Sales", "Marketing", "Finance", "Human Resources", "HR", "Legal",
               "Operations", "Customer Support", "Customer Service", "Research and Development",
               "R&D", "IT", "Information Technology", "Procurement", "Purchasing", "Logistics",
               "Quality Assurance", "Product Management", "Design", "Administration", "Accounting",
               "Public Relations", "Communications", "Facilities", "Security", "Compliance",
               "Business Development", "Data Science", "Supply Chain", "Manufacturing", "Production",
               "Training", "Controlling", "Strategy", "Executive Office", "Treasury", "Audit",
               "Vertrieb", "Einkauf", "Buchhaltung", "Personalabteilung", "Entwicklung", "Verwaltung",
               "Kundendienst", "Ventes", "Comptabilité", "Ressources humaines", "Direction juridique",
               "Ventas", "Contabilidad", "Recursos Humanos", "Vendite", "Amministrazione",
               "Inkoop", "Verkoop", "Klantenservice")
WORK_HOURS = ("40 hours per week", "Mon-Fri, 9:00-17:00", "38.5 h/week", "Full-time (40h)",
              "Shift work", "20 hours per week", "Flexible hours", "8am - 5pm", "Monday to Friday",
              "Night shifts", "Weekends only", "37,5 Std./Woche", "35 heures", "Rotating shifts",
              "9:00 - 18:00", "32-40 hours per week")
OCCUPATION_CODES = ("15-1252.00", "29-1141.00", "41-2031.00", "43-4051.00", "11-2021.00",
                    "13-2011.00", "53-3032.00", "35-2014.00", "25-2021.00", "47-2061.00",
                    "15-1211.00", "27-1024.00", "49-3023.00", "13-1111.00")
SPORT_TEAM_PATTERNS = ("FC {City}", "{City} United", "{City} {Mascot}", "SV {City}",
                       "Real {City}", "AC {City}", "{City} Rovers", "Sporting {City}",
                       "{City} City", "VfB {City}", "Olympique {City}", "{City} Athletic")
# Clubs as football leagues write them: a club's legal prefix and often its founding year, a
# name of its own before the town, or the town alone with its club suffix.
CLUB_PATTERNS = ("1. FC {City}", "Borussia {City}", "Eintracht {City}", "Fortuna {City}", "VfL {City}",
                 "SC {City}", "TSV {City}", "FSV {City}", "SpVgg {City}", "{City} {club_year:02d}",
                 "FC {City} {club_year:02d}", "SV {City} {club_year:02d}", "TSG {City}", "Union {City}",
                 "Dynamo {City}", "Rot-Weiss {City}", "Atlético {City}", "Racing {City}", "Stade {City}",
                 "AS {City}", "Inter {City}", "{City} Wanderers", "{City} Town", "{City} Albion", "{City} FC",
                 "{City} SC", "Hertha {City}", "Alemannia {City}", "Kickers {City}", "Arminia {City}")
MASCOTS = ("Tigers", "Lions", "Eagles", "Bears", "Wolves", "Sharks", "Hawks", "Bulls",
           "Rangers", "Panthers", "Giants", "Pirates", "Falcons", "Warriors", "Dragons")
SPORTS_EVENT_PATTERNS = ("{home} vs {away}", "{home} vs. {away}", "{home} - {away}", "{home} v {away}",
                         "{City} Marathon {year}", "{City} Grand Prix {year}", "{home} : {away}")
EVENT_PATTERNS = ("{City} Jazz Festival {year}", "{Adj} Nights: {Genre} Live", "{First} {Last} Live",
                  "{Genre} Night at {Venue}", "Workshop: {Topic}", "{City} Food Festival",
                  "An Evening with {First} {Last}", "{Work}", "{City} Book Fair {year}",
                  "Summer Concert Series", "{Topic} Conference {year}", "{Genre} Open Air {year}")
NEUTRAL_EVENT_PATTERNS = ("{Season} Classic {year}", "{City} Open {year}", "{City} Cup {year}",
                          "{Season} Series {year}", "The {City} Challenge", "{City} Derby",
                          "{Season} Showcase {year}", "{City} Championship {year}", "{Adj} {Noun} {year}")
EVENT_TOPICS = ("Photography", "Web Design", "Pottery", "Wine Tasting", "Data Science", "Yoga",
                "Creative Writing", "Sustainability", "Marketing", "Leadership", "Cooking")
SEASONS = ("Spring", "Summer", "Autumn", "Winter", "Midsummer", "Harvest")

# ----------------------------------------------------------------------------- venues and businesses

HOTEL_PATTERNS = ("Hotel {X}", "{X} Hotel", "{X} Inn", "{X} Resort & Spa", "B&B {X}", "Hostel {X}",
                  "{X} Suites", "Grand Hotel {X}", "{X} Boutique Hotel", "Hotel Garni {X}", "{X} Lodge")
RESTAURANT_PATTERNS = ("Ristorante {X}", "{X} Bistro", "Trattoria {X}", "{X} Grill", "{X} Sushi Bar",
                       "Café {X}", "Brasserie {X}", "Pizzeria {X}", "{X} Steakhouse", "{X} Kitchen",
                       "Taverna {X}", "{X} Burger Bar", "Restaurant {X}")
MUSEUM_PATTERNS = ("{X} Museum", "Museum of {Topic}", "Musée {X}", "{X} Art Gallery", "Kunsthalle {X}",
                   "{City} Museum of Natural History", "Museo {X}", "{X} Heritage Centre",
                   "{City} Historical Museum", "National Museum of {Topic}")
MUSEUM_TOPICS = ("Modern Art", "Natural History", "Science", "Photography", "Design", "Maritime History",
                 "Archaeology", "Transport", "Childhood", "Fine Arts", "Contemporary Art", "Technology")
BUSINESS_PATTERNS = ("{Last} Plumbing", "{Last} & Sons", "{X} Dental Care", "{Last} Hair Studio",
                     "{X} Auto Repair", "{Last} Bakery", "{X} Dry Cleaning", "{Last} Law Firm",
                     "{X} Pharmacy", "{Last} Electric", "{X} Florist", "{X} Fitness",
                     "{Last} Immobilien", "{X} Optician", "{Last} Accounting")
PLACE_PATTERNS = ("{X} Park", "Lake {X}", "Mount {X}", "{X} Beach", "{X} Square", "{City} Old Town",
                  "{X} Castle", "{X} Bridge", "{X} Waterfall", "{City} Botanical Garden",
                  "{X} Nature Reserve", "{X} Lighthouse", "{City} Harbour")
VENUE_PATTERNS = ("{City} Arena", "Stadthalle {City}", "The {Adj} Room", "{X} Theatre", "{City} Concert Hall",
                  "{X} Club", "{City} Convention Center", "Olympiahalle", "{X} Stadium", "Town Hall {City}",
                  "{X} Hall", "Philharmonie {City}", "{X} Amphitheatre")
# Names with no clue to the kind of place: shared by Hotel, Restaurant, LocalBusiness, Museum,
# Place (and event venues) in hard tables, so only the rest of the table tells them apart.
NEUTRAL_PLACE_PATTERNS = ("The {Adj2} {Noun2}", "{Last}'s", "Villa {First}", "Casa {Last}",
                          "{City} {Noun2}", "Le Petit {Noun2}", "{Last} House", "Chez {First}",
                          "{Noun2} & {Noun2}", "The Old {Noun2}", "{Adj2} {Noun2}", "{X}",
                          "La {Noun2}", "{First} & {First}", "The {Noun2} at {City}")
PLACE_ADJECTIVES = ("Golden", "Old", "Royal", "Blue", "Green", "Little", "Grand", "Red", "White",
                    "Silver", "Black", "Rose", "Crown", "Sunny", "Stone", "Northern", "Hidden")
PLACE_NOUNS = ("Lion", "Mill", "Anchor", "Garden", "Oak", "Harbour", "Bell", "Swan", "Rose",
               "Stag", "Lantern", "Orchard", "Courtyard", "Corner", "Market", "Terrace", "Fountain",
               "Tower", "Cellar", "Meadow", "Kitchen", "Gate", "Dock", "Vine", "Star", "Palace")

AMENITIES = ("Free WiFi", "Swimming pool", "Spa", "Fitness center", "Free parking", "Restaurant",
             "Bar", "Room service", "Air conditioning", "Pet friendly", "Airport shuttle",
             "24-hour front desk", "Non-smoking rooms", "Sauna", "Breakfast included", "Garden",
             "Terrace", "Laundry service", "Family rooms", "EV charging station", "Elevator",
             "Kostenloses WLAN", "Parking gratuit", "Wheelchair accessible", "Beach access")
CUISINES = ("Italian", "French", "Mexican", "Thai", "Japanese", "Chinese", "Indian", "Greek",
            "Spanish", "Turkish", "Lebanese", "Vietnamese", "American", "Mediterranean", "German",
            "Korean", "Peruvian", "Moroccan", "Vegetarian", "Seafood", "Sushi", "Pizza", "Tapas",
            "Steakhouse", "Fusion", "Brazilian", "Ethiopian")
RECIPE_CATEGORIES = ("Dessert", "Main course", "Appetizer", "Breakfast", "Side dish", "Salad",
                     "Soup", "Snack", "Drinks", "Baking", "Dinner", "Lunch", "Brunch", "Starter",
                     "Sauce", "Bread")
COOKING_METHODS = ("Baking", "Grilling", "Frying", "Roasting", "Steaming", "Boiling", "Slow cooking",
                   "Sautéing", "Braising", "Poaching", "No-cook", "Stir-frying", "Barbecue", "Smoking")
RECIPE_ADJECTIVES = ("Easy", "Quick", "Classic", "Homemade", "Vegan", "Healthy", "Creamy", "Spicy",
                     "Grandma's", "One-Pot", "Crispy", "Simple", "Best Ever", "Gluten-Free", "Rustic")
INGREDIENT_AMOUNTS = ("200 g", "100 g", "250 g", "1 cup", "2 cups", "1/2 cup", "1 tbsp", "2 tbsp",
                      "1 tsp", "1/2 tsp", "3", "2", "1", "400 ml", "150 ml", "1 pinch", "500 g",
                      "2 cloves", "1 can", "50 g", "75 g", "1 handful")
INSTRUCTION_STEPS = (
    "Preheat the oven to {temp} °C.", "Chop the {veg} finely.", "Mix the flour and sugar in a bowl.",
    "Add the eggs one at a time.", "Bring a large pot of salted water to the boil.",
    "Fry the onions until golden.", "Stir in the {spice} and cook for 2 minutes.",
    "Bake for {m} minutes until golden brown.", "Season with salt and pepper.",
    "Simmer gently for {m} minutes.", "Let it cool before serving.", "Whisk the cream until stiff.",
    "Serve with fresh {fruit}.", "Knead the dough for 10 minutes.", "Grease a baking tin.",
    "Blend until smooth.", "Drain and set aside.", "Garnish with herbs.",
)

# ----------------------------------------------------------------------------- description templates
# {name} is the row's subject, {city} a city; domain templates carry clues to the domain,
# neutral ones are shared by every domain whose description has a CTA label.

DESCRIPTION_TEMPLATES: dict[str, tuple[str, ...]] = {
    "Book": ("In this gripping novel, {first} returns to {city} to uncover a family secret.",
             "The bestselling author's new book: {sentence}",
             "A collection of {n} short stories about love and loss.",
             "This beautifully illustrated book tells the story of {a_noun} and its people.",
             "Now in paperback: the acclaimed memoir of a life in {city}.",
             "A page-turner from the first chapter. {sentence}"),
    "Movie": ("In this film, {first} travels to {city} and faces {noun}.",
              "Directed by {person}, this award-winning drama follows a family in {city}.",
              "Starring {person}. {sentence}", "A thrilling action movie set in {city}.",
              "The critically acclaimed film about {noun}, now on Blu-ray.",
              "Oscar-nominated documentary about the {noun} of {city}."),
    "Event": ("Join us for an unforgettable evening in {city}! Doors open at {hour}:00.",
              "Tickets are available at the box office. {sentence}",
              "Live music, food trucks and more at this year's festival in {city}.",
              "A hands-on workshop for beginners. Bring your own laptop.",
              "The annual concert returns to {city} with a brand-new programme.",
              "Registration required. Limited seats available."),
    "Hotel": ("Our {n}-star hotel in the heart of {city} offers {n2} elegant rooms and a spa.",
              "Comfortable rooms with free WiFi, breakfast buffet and parking. {sentence}",
              "Family-run guesthouse close to the beach. Check-in from 15:00.",
              "Stay in style: modern suites, rooftop bar and 24-hour reception.",
              "A charming boutique hotel with {n2} rooms, just minutes from {city} station."),
    "JobPosting": ("We are looking for a motivated {job} to join our team in {city}.",
                   "Responsibilities: {sentence} Requirements: {n}+ years of experience.",
                   "As a {job} you will support our customers and work in an agile team.",
                   "Full-time position with competitive salary and 30 days of paid vacation.",
                   "Join a fast-growing company! Apply now with your CV and cover letter."),
    "Product": ("Made of {material}. {sentence}",
                "Features: long battery life, fast charging, {n}-year warranty.",
                "This {colour} {noun} is perfect for everyday use. Dishwasher safe.",
                "Lightweight and durable. Dimensions: {n}{n2} x {n2}0 cm.",
                "Our best-selling model, now with improved {noun}. Free shipping on all orders."),
    "Recipe": ("This easy recipe is ready in {m} minutes. {sentence}",
               "A delicious {dish} the whole family will love. Serve warm.",
               "My grandmother's recipe for {dish}, perfect for a weekend brunch.",
               "Quick weeknight dinner: {dish} with fresh {veg} and {spice}.",
               "Bake it the day before and keep it in the fridge."),
    "CreativeWork": ("An essay on {noun} and the city of {city}.",
                     "Photo series documenting {nouns} across Europe.",
                     "In this article we explain {nouns} step by step.",
                     "Interview with {person} about {noun}."),
    "Person": ("{job} based in {city}.", "Born in {city}, {first} has worked as a {job} for {n} years.",
               "Award-winning {job} and author.", "{first} is a {job} and lives in {city}."),
    "Restaurant": ("Authentic {cuisine} cuisine in the heart of {city}. Reservations recommended.",
                   "Our chef serves seasonal dishes made with local produce. Lunch menu on weekdays.",
                   "Wood-fired pizza, homemade pasta and a great wine list.",
                   "Cosy {cuisine} restaurant with a summer terrace."),
    "LocalBusiness": ("Your local plumber in {city}: fast, reliable and fair prices.",
                      "Family business since {year}. Repairs, installation and maintenance.",
                      "Opticians and eye tests in {city}. Walk-ins welcome.",
                      "Professional dry cleaning and tailoring services.",
                      "Hair salon and barber shop in {city}."),
    "Museum": ("The museum's collection includes over {n2}00 paintings and sculptures.",
               "Permanent exhibition on the history of {city}. Guided tours on Sundays.",
               "Discover {n} centuries of art and design. Free admission on the first Sunday of the month.",
               "Interactive science exhibits for children and adults.",
               "Temporary exhibition: {nouns} in modern art."),
    "Place": ("A scenic spot with views over {city} and the valley.",
              "Historic square in the old town of {city}.",
              "Popular hiking destination with a {n} km loop trail.",
              "Sandy beach with lifeguards in summer.",
              "The medieval castle overlooks the river and the town of {city}."),
    "SportsEvent": ("Kick-off at {hour}:00. Season tickets are valid.", "Matchday {n} of the league season.",
                    "The derby returns to {city}! Tickets on sale now.",
                    "{n} km race through the streets of {city}."),
    "TVEpisode": ("In this episode, {first} discovers a secret about the {noun}.",
                  "Season finale: the team faces its biggest challenge yet.",
                  "{first} and {person} travel to {city}.", "The detectives investigate a murder in {city}."),
    "MusicAlbum": ("The band's {ordinal} studio album, recorded in {city}.",
                   "Includes the hit single '{title}'.",
                   "Remastered edition with {n} bonus tracks.",
                   "Debut album of the {genre} trio from {city}."),
    "MusicRecording": ("Lead single from the album '{title}'.", "Recorded live in {city}.",
                       "{genre} track produced by {person}.", "Acoustic version of the {year} hit."),
}
NEUTRAL_DESCRIPTIONS = (  # no domain clue: shared by Book, Event, Hotel, JobPosting, Movie, Product, Recipe
    "A perfect choice for the whole family. {sentence}",
    "Discover something new in {city}. {sentence}",
    "Rich, warm and full of surprises. {sentence}",
    "{sentence} {sentence}",
    "Available now. {sentence}",
    "A true classic, loved by many. {sentence}",
    "Simple, honest and beautifully made.",
    "Everything you need for a great weekend in {city}.",
    "A fresh take on a timeless favourite.",
    "The story of {first}, {a_noun} and {a_noun}. {sentence}",
    "Limited availability. Book early to avoid disappointment.",
    "Ideal for beginners and experts alike.",
)

# ----------------------------------------------------------------------------- named days, places, codes
# Named days recur every year in every country (holidays, observances, feast days): their
# names look like nothing else, in the site's own language. Patterns, not a list of any
# country's real public holidays.

SAINTS = ("Stephen", "Patrick", "George", "Andrew", "David", "Joseph", "John", "Nicholas",
          "Martin", "Lucy", "Valentine", "Michael", "Anne", "Peter and Paul", "Catherine")
OBSERVANCE_PATTERNS: dict[str, tuple[str, ...]] = {
    "en": ("{Saint}'s Day", "Feast of {Saint}", "National {Noun} Day", "{Season} Bank Holiday",
           "International {Topic} Day", "{City} Day", "Day of the {Noun}", "{Ordinal} Day of {Season}",
           "Remembrance of the {Noun}", "{Noun} Festival", "Founders' Day", "Heritage Day",
           "Independence Day", "Labour Day", "New Year's Day", "Boxing Day", "Good Friday"),
    "de": ("Tag der {NounDe}", "Sankt {SaintDe}", "{SaintDe}stag", "{City}er Stadtfest",
           "Fest der {NounDe}", "Gedenktag der {NounDe}", "Neujahr", "Karfreitag", "Ostermontag",
           "Pfingstmontag", "Fronleichnam", "Buß- und Bettag", "Heilige Drei Könige"),
    "fr": ("Fête de la {NounFr}", "Fête de {SaintFr}", "Journée de la {NounFr}", "Saint-{SaintFr}",
           "Jour de l'an", "Lundi de Pâques", "Fête du Travail", "Assomption", "Toussaint",
           "Fête des {NounsFr}"),
    "es": ("Día de {SaintEs}", "Día de la {NounEs}", "Fiesta de {SaintEs}", "Fiesta de la {NounEs}",
           "Año Nuevo", "Viernes Santo", "Jueves Santo", "Día de Reyes", "Fiesta Nacional"),
    "it": ("Festa di {SaintIt}", "Festa della {NounIt}", "Giornata della {NounIt}", "Capodanno",
           "Pasquetta", "Ferragosto", "Ognissanti", "Santo Stefano"),
    "nl": ("{SaintNl}dag", "Dag van de {NounNl}", "Feest van {SaintNl}", "Nieuwjaarsdag",
           "Tweede Paasdag", "Hemelvaartsdag", "Tweede Pinksterdag"),
}
SAINTS_BY_LANG = {
    "SaintDe": ("Martin", "Nikolaus", "Stephan", "Georg", "Josef", "Michael", "Florian", "Leopold"),
    "SaintFr": ("Jean", "Martin", "Nicolas", "Étienne", "Joseph", "Michel", "Catherine", "Louis"),
    "SaintEs": ("San José", "San Juan", "Santiago", "San Isidro", "San Pedro", "Santa Lucía", "San Fermín"),
    "SaintIt": ("San Giuseppe", "San Giovanni", "San Marco", "Sant'Ambrogio", "San Gennaro", "Santa Lucia"),
    "SaintNl": ("Sint-Maarten", "Sinterklaas", "Sint-Jan", "Sint-Joris", "Koningin", "Bevrijdings"),
}
NOUNS_BY_LANG = {
    "NounDe": ("Arbeit", "Einheit", "Verfassung", "Befreiung", "Republik", "Jugend", "Umwelt"),
    "NounFr": ("Musique", "Victoire", "Libération", "République", "Fédération", "Jeunesse"),
    "NounsFr": ("Mères", "Pères", "Vendanges", "Lumières"),
    "NounEs": ("Constitución", "Independencia", "Hispanidad", "Madre", "Virgen", "Revolución"),
    "NounIt": ("Liberazione", "Repubblica", "Unità", "Donna", "Mamma"),
    "NounNl": ("Arbeid", "Bevrijding", "Koning", "Veteranen", "Dieren"),
}
ORDINAL_WORDS = ("First", "Second", "Third", "Last")

# Transport hubs and settlements: a place table lists airports, stations, towns or regions.
HUB_PATTERNS = ("{Town} Airport", "{Town} International Airport", "{Town} Regional Airport",
                "{Town} Air Base", "{Town} Municipal Airport", "{Town} Airfield", "Aéroport de {Town}",
                "Flughafen {Town}", "Aeropuerto de {Town}", "{Town} Central Station", "{Town} Hbf",
                "Gare de {Town}", "Port of {Town}", "{Town} Heliport", "{Town}-{Town} Airport",
                "{Last} Field", "{Town} {Last} Airport")
SETTLEMENT_PATTERNS = ("{Town}", "{Town}", "{Town}", "{Town}", "{Region}", "{Town} ({Region})", "Greater {Town}",
                       "{Town} County", "{Town} District", "{Town} Township", "Bad {Town}",
                       "{Town}-sur-Mer", "{Town} Springs", "Port {Town}", "{Town} Heights", "{Town} City")
INSTITUTION_PATTERNS = ("Bank of {Region}", "{Town} Savings Bank", "{Last} Bank", "Sparkasse {Town}",
                        "Volksbank {Town}", "Banca {Last}", "Caisse d'Epargne {Region}", "{Last} Credit Union",
                        "University of {Town}", "{Town} General Hospital", "{Town} City Council",
                        "{Region} Tourism Board", "{Last} Foundation", "Institute of {Topic}",
                        "{Town} Chamber of Commerce", "{Last} Group", "{Last} Holdings",
                        "{Region} Transport Authority", "Banco {Last}", "Raiffeisenbank {Town}")

# Identifiers: how sites and registries write codes. Each style is (pattern, case); in a
# pattern, A is an upper-case letter, 9 a digit, X a letter or digit, other characters stay.
IDENTIFIER_STYLES: tuple[str, ...] = (
    "AAA", "AAAA", "AA", "AAAAAA99", "AAAAAA99XXX", "AAAAAAXX", "999", "9999", "99999", "999999",
    "9999999", "99999999", "A9999", "AA-9999", "AAA-999", "A99-999", "AA999999", "99-9999999",
    "AAA999", "X9X9X9", "ID-999999", "REF/9999/999", "tt9999999", "9999-9999", "AA/99/9999",
    "A-99999", "99999-AAA", "XXXXXXXX", "999.999.999", "AA99 AAA", "AAAACCXX", "AAAACCXXXXX",
)
# Codes that gazetteers and leagues give places and teams: IATA-like three letters, ICAO-like
# four letters whose first one or two a whole table shares (P: one letter fixed per column), a
# team's short name. Letters-only codes are what a region abbreviation looks like, so a model
# must learn them from the column's length and company, not from their alphabet.
PLACE_CODE_STYLES: tuple[str, ...] = ("AAA", "AAA", "AAA", "PAAA", "PPAA", "AAAA", "P999", "AA9", "AAAAA")
# Brands the world knows (cars, electronics, clothing, food and drink, sport, household),
# beside the invented and company-derived names of `latents.brand`.
REAL_BRANDS: tuple[str, ...] = (
    "Ford", "Chevrolet", "Toyota", "Honda", "Nissan", "Volkswagen", "BMW", "Mercedes-Benz", "Audi",
    "Opel", "Peugeot", "Renault", "Citroën", "Fiat", "Volvo", "Saab", "Mazda", "Subaru", "Hyundai",
    "Kia", "Skoda", "Seat", "Dodge", "Buick", "Pontiac", "Plymouth", "Cadillac", "Chrysler", "Jeep",
    "Porsche", "Ferrari", "Lancia", "Mitsubishi", "Suzuki", "Datsun", "Triumph", "Dacia", "Tesla",
    "Apple", "Samsung", "Sony", "LG", "Philips", "Panasonic", "Bosch", "Siemens", "Miele", "Dyson",
    "Lenovo", "Dell", "HP", "Asus", "Acer", "Canon", "Nikon", "Fujifilm", "Logitech", "Xiaomi",
    "Huawei", "Nokia", "Garmin", "Braun", "Nike", "Adidas", "Puma", "Reebok", "Asics", "Levi's",
    "Zara", "H&M", "Uniqlo", "Gucci", "Prada", "Lacoste", "Tommy Hilfiger", "Hugo Boss", "Ikea",
    "Lego", "Mattel", "Hasbro", "Nestlé", "Danone", "Kellogg's", "Heinz", "Barilla", "Lindt",
    "Haribo", "Milka", "Coca-Cola", "Pepsi", "Heineken", "Carlsberg", "Guinness", "Nespresso",
    "L'Oréal", "Nivea", "Dove", "Colgate", "Gillette", "Duracell", "Tefal", "Whirlpool",
    "Electrolux", "Black & Decker", "Makita", "Stihl", "Yamaha", "Fender", "Casio", "Rolex", "Swatch",
)

# Real products, by catalogue: the knowledge only the specialists' split (`specialist_train`)
# weaves into its Product tables (latents.catalogue_item), so that the expert of products knows
# names the primary never reads. mimesis ships them (a `train` source, aegir.data.source_roles).
CATALOGUES: dict[str, tuple[str, ...]] = {
    "cars": tuple(mimesis_data.CARS),
    "aircraft": tuple(mimesis_data.AIRPLANES),
    "graphics": tuple(mimesis_data.GRAPHICS),
    "drives": tuple(mimesis_data.HDD_SSD),
    "phones": tuple(mimesis_data.PHONE_MODELS),
}
CATALOGUE_WEIGHTS: tuple[float, ...] = (0.6, 0.15, 0.1, 0.1, 0.05)
# Makers whose name is more than its first word, longest first (the rest of a name is its model).
CATALOGUE_MAKERS: tuple[str, ...] = tuple(sorted(
    {*mimesis_data.AUTO_MANUFACTURERS, "Western Digital", "McDonnell Douglas", "British Aerospace",
     "De Havilland Canada", "Pilatus Britten-Norman"}, key=lambda m: (-len(m), m)))

# Booleans as sites write them, per language: (true, false) pairs.
BOOLEAN_WORDS: dict[str, tuple[tuple[str, str], ...]] = {
    "en": (("Yes", "No"), ("yes", "no"), ("Y", "N"), ("true", "false"), ("True", "False"),
           ("TRUE", "FALSE"), ("1", "0"), ("✓", "✗"), ("on", "off"), ("YES", "NO")),
    "de": (("Ja", "Nein"), ("ja", "nein"), ("J", "N"), ("wahr", "falsch")),
    "fr": (("Oui", "Non"), ("oui", "non"), ("O", "N"), ("vrai", "faux")),
    "es": (("Sí", "No"), ("sí", "no"), ("S", "N"), ("verdadero", "falso")),
    "it": (("Sì", "No"), ("sì", "no"), ("S", "N"), ("vero", "falso")),
    "nl": (("Ja", "Nee"), ("ja", "nee"), ("J", "N"), ("waar", "onwaar")),
}

# Localised weekday abbreviations (Monday first) beside the full names in WEEKDAYS.
WEEKDAY_ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "en": ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"),
    "de": ("Mo", "Di", "Mi", "Do", "Fr", "Sa", "So"),
    "fr": ("lun.", "mar.", "mer.", "jeu.", "ven.", "sam.", "dim."),
    "es": ("lun", "mar", "mié", "jue", "vie", "sáb", "dom"),
    "it": ("lun", "mar", "mer", "gio", "ven", "sab", "dom"),
    "nl": ("ma", "di", "wo", "do", "vr", "za", "zo"),
}

# Category vocabularies of registries and directories (a type, a class, a status).
PLACE_CATEGORIES = ("City", "Town", "Village", "Municipality", "Capital", "Suburb", "Hamlet",
                    "Borough", "County seat", "Island", "Region", "Province", "State", "Territory",
                    "Stadt", "Gemeinde", "Commune", "Ville", "Municipio")
ORGANISATION_CATEGORIES = ("Bank", "Savings bank", "Credit union", "Cooperative", "Public company",
                           "Private company", "Non-profit", "Foundation", "GmbH", "AG", "SA", "Ltd",
                           "LLC", "Branch", "Head office", "Subsidiary", "Government agency")
