"""Compile the numba kernels once, when the package is installed: ``python -m splice_assets.warmup``.

numba keeps compiled kernels beside the package (``cache=True``), and a fresh install has none, so the first release
on it compiled them: 36.5 CPU s for the first release of the demo table on a fresh checkout against 19.9 s for the
next (``python -m bench.release_cpu --against HEAD``, first-run column). The install step runs this instead: one fit
and sample of the bundled demo table through the library, without a ledger; it writes nothing but numba's cache.
A table whose kernels need other types (wider cells, another sampling path) compiles those at its first release.
"""

from __future__ import annotations

import pandas as pd

from splice_assets.api import Synthesizer
from splice_assets.datasets import DEMO_DATASET, demo_data_path, schema_path
from splice_assets.schema import load_schema


def main() -> None:
    table = pd.read_csv(demo_data_path())
    Synthesizer(load_schema(schema_path(DEMO_DATASET)), epsilon=1.0, delta=1e-9).fit(table, ledger=None).sample()
    print("splice: numba kernels compiled and cached")


if __name__ == "__main__":
    main()
