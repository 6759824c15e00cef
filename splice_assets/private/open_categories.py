"""The DP selection of an open categorical domain, ``categories: auto``: Gaussian thresholding (``private.bounds``).

A categorical column with ``categories: auto`` (an open domain: its values are not public, so no dense draw exists)
gets its frequent values by Gaussian thresholding (``select_categories``): each row adds 1 to the count of its
cleaned value's canonical key (``category_key``; a missing cell, a declared category and ``other`` count nowhere);
every held key gets N(0, sigma^2), and a key whose noisy count clears ``category_threshold`` is kept, at most the
column's public ``max_categories`` (the largest noisy counts), written sorted. Sensitivity: a row is in one
partition per column, so under add-remove one count moves by 1 (and at most one partition appears), under
replace-one two counts move by 1 each (and a partition may appear on each side): the ``values_columns`` term of
``estimate_sensitivity`` for every such column. The partition held by one side only is where the dense argument
fails: the threshold is set so that the probability that a key held by one row passes is at most ``delta_sel /
columns`` (``SELECTION_DELTA_SHARE`` of the release's delta; doubled under replace-one, one such key on each
side), checked against OpenDP's privacy map of ``make_gaussian_threshold`` (Rogers 2023). The estimate's noise
multiplier is then raised so that the release's Gaussian parts compose to (epsilon, delta - delta_sel)
(``planning.selection_split``); the selection adds delta_sel: (epsilon, delta) in all. docs/privacy.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from splice_assets.kinds.fields import OpenCategories, category_key, open_entry
from splice_assets.measurement import RELATION_REPLACE_ONE
from splice_assets.schema import ColumnSpec

if TYPE_CHECKING:
    import pandas as pd

#: PRIVATE: a ``categories: auto`` column's exact counts of the keys its rows hold (declared ones excluded).
KeyCounts = dict[str, int]


def _one_sided_partitions(relation: str) -> int:
    """Partitions of a column that one neighbour holds and the other does not: one under add-remove (the row's
    new key), one on each side under replace-one (counted twice, as OpenDP's l0 distance of 2 does)."""
    return 2 if relation == RELATION_REPLACE_ONE else 1


def threshold_delta(sigma: float, threshold: float, relation: str) -> float:
    """OpenDP's privacy map of ``make_gaussian_threshold`` (noise std ``sigma``, keys kept above ``threshold``) at
    one column's neighbour distance (l0 partitions, l2 and l-inf of the counts): its delta, the probability that a
    key held by one row (on either side) passes. Public: sigma, the threshold and the relation."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    l0 = _one_sided_partitions(relation)
    measurement = dp.m.make_gaussian_threshold(
        dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=float, nan=False)),
        dp.l02inf_distance(dp.absolute_distance(T=float)), scale=float(sigma), threshold=float(threshold))
    return float(measurement.map((l0, math.sqrt(float(l0)), 1.0))[1])  # type: ignore[no-untyped-call]


def category_threshold(sigma: float, column_delta: float, relation: str) -> float:
    """The threshold (rows) above which a key's noisy count (std ``sigma``) is kept: a key held by one row passes
    with probability at most ``column_delta`` / l0 (``_one_sided_partitions``): tau = 1 + sigma z, with
    Phi(-z) = column_delta / l0; raised until OpenDP's map (``threshold_delta``) agrees it spends at most
    ``column_delta``."""
    if not (0.0 < column_delta < 1.0 and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"a category threshold needs sigma > 0 and a delta in (0, 1), got {sigma!r}, "
                         f"{column_delta!r}")
    tau = 1.0 - sigma * NormalDist().inv_cdf(column_delta / _one_sided_partitions(relation))
    while threshold_delta(sigma, tau, relation) > column_delta:
        tau += 1e-6 * sigma
    return tau


def exact_category_counts(raw: pd.DataFrame, columns: Sequence[ColumnSpec]) -> list[KeyCounts]:
    """PRIVATE: per ``categories: auto`` column, the exact count of each canonical key (``category_key``) its raw
    cells hold; a missing or over-long cell, a declared category and ``other`` count nowhere. A row adds 1 to at most
    one key per column. Counts of disjoint parts add up key by key."""
    from splice_assets.kinds.cells import UNSEEN, cell_codes

    out: list[KeyCounts] = []
    for spec in columns:
        series = raw[spec.name].reset_index(drop=True)
        codes = cell_codes(series, spec.category_index())
        counts: dict[str, int] = {}
        for value in series[codes == UNSEEN]:
            key = category_key(value)
            counts[key] = counts.get(key, 0) + 1
        out.append(counts)
    return out


def select_categories(counts: Sequence[KeyCounts], columns: Sequence[ColumnSpec], sigma: float, threshold: float
                      ) -> dict[str, tuple[str, ...]]:
    """Gaussian thresholding of every ``categories: auto`` column's key counts: each held key's count plus N(0,
    sigma^2) (OpenDP's float-safe sampler, ``mechanism.gaussian_noise``, OS entropy), kept above ``threshold``, the
    column's ``max_categories`` largest, written sorted. Only the kept keys leave; no noisy count is kept.

    A key no row holds is never looked at (the domain is open, so it cannot be noised): that is the one-sided
    partition whose passing ``category_threshold`` charges as delta; every other key is a coordinate of the Gaussian
    whose sensitivity ``estimate_sensitivity`` counts (module docstring, docs/privacy.md)."""
    from splice_assets.private import mechanism

    found: dict[str, tuple[str, ...]] = {}
    for spec, held in zip(columns, counts):
        opened = open_entry(spec.categories)
        assert opened is not None
        keys = sorted(held)
        noisy = mechanism.gaussian_noise(np.array([held[k] for k in keys], dtype=np.float64), sigma) if keys \
            else np.zeros(0)
        passed = np.flatnonzero(noisy > threshold)
        ranked = passed[np.argsort(-noisy[passed], kind="stable")][:opened.max_categories]
        found[spec.name] = tuple(sorted(keys[i] for i in ranked))
    return found


def _with_categories(spec: ColumnSpec, found: Sequence[str]) -> ColumnSpec:
    """An open column resolved: its ``auto`` entry replaced by the selected keys (a plain list)."""
    assert spec.categories is not None
    declared = {category_key(c) for c in spec.categories if not isinstance(c, OpenCategories)}
    kept = [k for k in found if k not in declared]
    categories: list[Any] = []
    for c in spec.categories:
        categories.extend(kept if isinstance(c, OpenCategories) else [c])
    return dataclasses.replace(spec, categories=tuple(categories))

