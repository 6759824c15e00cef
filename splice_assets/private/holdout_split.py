"""The holdout split of a validated table into measured and held-out rows (sensitivity argued below).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splice_assets.limits import Relation

#: Streams of the public seed that key the holdout split's row hashes (the second breaks ties of the first).
_TAG_HOLDOUT = 0x401D


def row_keys(table: pd.DataFrame, seed: int, stream: int) -> np.ndarray:
    """A keyed 64-bit hash of each row's own values (SipHash keyed by the public seed): no other row enters it."""
    state = np.random.SeedSequence([int(seed), _TAG_HOLDOUT, stream]).generate_state(2, np.uint64)
    key = f"{int(state[0]) & 0xFFFF_FFFF:08x}{int(state[1]) & 0xFFFF_FFFF:08x}"
    keys: np.ndarray = pd.util.hash_pandas_object(table, index=False, hash_key=key).to_numpy(dtype=np.uint64)
    return keys


def key_threshold(fraction: float) -> np.uint64:
    """Keys below this are a ``fraction`` share of the 64-bit hash range (add-remove: those rows are held out)."""
    return np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))


def measured_size(n_rows: int, fraction: float) -> int:
    """How many of ``n_rows`` rows the split measures: n - round(fraction * n), exactly under replace-one (a size
    fixed by the public n). Under add-remove each row's membership is its own (``split_holdout``) and this is only
    the size the release is planned and priced for: nothing is refused on it (``validation.check_row_count``)."""
    return n_rows - int(round(fraction * n_rows))


def split_holdout(
    table: pd.DataFrame, fraction: float, seed: int, relation: Relation = Relation.REPLACE_ONE
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured rows, held-out rows) of a validated table. The holdout is never measured; it serves the internal
    report only.

    Sensitivity: the split must turn neighbouring inputs into neighbouring measured parts, whatever the row order.
    Every row gets a keyed hash of its own values under the public seed.
    - add-remove: a row is held out iff its hash falls below ``fraction`` of the hash range. Membership depends on
      that row alone, so adding or removing one input row adds or removes at most that row from the measured part.
    - replace-one: the measured part is the n - round(fraction * n) rows with the smallest hashes, a size fixed by
      the public n. Replacing one row removes one key from the order and inserts one, so the measured set loses at
      most one row and gains at most one: a replace-one neighbour with the same public size.
    Neither depends on the row order (a positional permutation would: under add-remove one row more re-shuffles
    every row, which moved the released statistics by 3 to 24 Delta). Identical rows hash alike, so which copy is
    held out does not change the measured multiset.
    """
    n = len(table)
    if fraction == 0 or n == 0:
        return table.reset_index(drop=True), table.iloc[:0].reset_index(drop=True)
    keys = row_keys(table, seed, 0)
    if relation == Relation.ADD_REMOVE:
        held = keys < key_threshold(fraction)
    else:
        order = np.lexsort((row_keys(table, seed, 1), keys))  # the second hash breaks (rare) ties of the first
        held = np.zeros(n, dtype=bool)
        held[order[n - int(round(fraction * n)):]] = True
    return table[~held].reset_index(drop=True), table[held].reset_index(drop=True)
