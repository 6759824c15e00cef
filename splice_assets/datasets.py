"""Where the bundled demo dataset and the repository's public schemas live.

The demo table is Fair's affairs survey (6,366 rows, numeric and categorical columns), which ships inside
the statsmodels wheel: nothing is downloaded at run time.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

DEMO_DATASET = "fair_affairs"


def schema_dir() -> Path:
    """The folder of public schema files (``SPLICE_SCHEMA_DIR`` overrides the repository's ``schemas/``)."""
    override = os.environ.get("SPLICE_SCHEMA_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[1] / "schemas"


def schema_path(dataset: str, folder: Path | None = None) -> Path:
    """The schema file of a dataset by name, in ``folder`` (default: ``schema_dir()``); a clear error if there is
    none."""
    folder = schema_dir() if folder is None else folder
    path = folder / f"{dataset}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        raise FileNotFoundError(f"no schema for dataset {dataset!r} in {str(folder)!r}; known: {known}")
    return path


def demo_data_path() -> Path:
    """The bundled demo CSV inside the installed statsmodels package."""
    return Path(str(resources.files("statsmodels.datasets.fair").joinpath("fair.csv")))
