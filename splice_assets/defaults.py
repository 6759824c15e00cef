"""Public names and defaults shared by the library and the ``splice`` CLI.

This module imports only ``limits`` (itself the standard library only), so the CLI can declare its options (and
print ``--help``) without loading numpy, SQLAlchemy or the accountant. The library modules that own these values
re-export them from here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from splice_assets.limits import RELATIONS as RELATIONS
from splice_assets.limits import Relation

if TYPE_CHECKING:
    from splice_assets.schema import TableSchema

#: Neighbouring tables differ by replacing one row; n is public and every statistic is a frequency.
RELATION_REPLACE_ONE = Relation.REPLACE_ONE
#: Neighbouring tables differ by adding or removing one row; n is private, so the mechanism releases noisy sums and a
#: noisy count, and frequencies are their post-processing (``pooled_row_count``, then a division).
RELATION_ADD_REMOVE = Relation.ADD_REMOVE

# Shares of Delta^2 for the noisy 1-way marginals and for the 2-way marginals of every coordinate pair from different
# columns; the moments keep the rest (0.35): better than 1-way only, than pairs with a discrete coordinate only, and
# than 0.25 / 0.45 (docs/decisions/0002-shares-of-sensitivity.md, docs/decisions/alternatives.md).
DEFAULT_MARGINAL_SHARE = 0.15
DEFAULT_PAIR_SHARE = 0.5
# The moments carry the numeric dependence the tables' bins do not (0002: California's TSTR falls with their share);
# on discrete columns they repeat what the tables hold. So the pairs' share grows with the share of discrete columns,
# from DEFAULT_PAIR_SHARE on an all-numeric table to DISCRETE_PAIR_SHARE on an all-discrete one (decision 0060).
DISCRETE_PAIR_SHARE = 0.75
#: Whether a 1-way table of many cells counts as more than one table in Delta^2 (``measurement.level_units``): on.
#: A column of many levels loses much of its 1-way TVD; the extra units are paid within the
#: 1-way share, so the moments and pairs keep their noise (decisions 0064-0066).
DEFAULT_LEVEL_UNITS = True
# Directions and moment order. With the 2-way marginals carrying the categorical structure, L = 256 fits as well as
# 512 at half the measure and fit cost (docs/decisions/0003-directions-and-order.md).
DEFAULT_N_DIRECTIONS = 256
DEFAULT_K = 16

#: Above this share of a column's non-empty cells that are not numbers (numeric kinds) or not declared categories
#: (discrete kinds without ``other``), the column is refused: that many misses mean the input or the schema's kind
#: is wrong, and imputing them would release a column made of imputations.
DEFAULT_MAX_UNPARSEABLE_SHARE = 0.05
#: Share of the input rows a release holds out for its internal report; they are never measured.
DEFAULT_HOLDOUT_FRACTION = 0.2
#: The most rows the fixed-point sums of ``private.statistics`` hold; under add-remove it stands in for the private n
#: in the floating-point slack of the sensitivity.
MAX_ROWS = 2**31 - 1

#: The ledger mechanism of a release's DP estimate of its schema's ``auto`` entries (``private.bounds``): the
#: readers of the ledger (``splice releases``, ``show``, ``budget``) tell a release's parts apart by it.
ESTIMATE_MECHANISM = "gaussian/dp-bounds-histogram"
#: A release's public files of its noisy draws, stored as soon as each is drawn (before its ledger entry is
#: committed): what ``splice ledger resolve`` checks for a dead run's estimate and measurement entries.
ESTIMATE_FILE, MEASUREMENT_FILE = "estimate.json", "measurement.json"


def default_pair_share(schema: TableSchema) -> float:
    """The pair share a measurement takes by default on ``schema``: DEFAULT_PAIR_SHARE plus the share of its
    columns that are discrete times DISCRETE_PAIR_SHARE - DEFAULT_PAIR_SHARE (public: the schema's kinds), to 4
    decimals."""
    discrete = sum(spec.is_discrete for spec in schema.columns) / max(len(schema.columns), 1)
    return round(DEFAULT_PAIR_SHARE + (DISCRETE_PAIR_SHARE - DEFAULT_PAIR_SHARE) * discrete, 4)


def dagster_home() -> Path:
    """``$DAGSTER_HOME``, else the repository's ``dagster_home/`` (git-ignored), whatever the working directory: the
    one rule by which the CLI, Dagster, the ledger and MLflow find the embedded state."""
    return Path(os.environ.get("DAGSTER_HOME") or Path(__file__).resolve().parents[1] / "dagster_home")
