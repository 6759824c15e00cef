"""The public quality summary of a release: what the noise allows, and how closely the model meets the noisy tables.

Computed from the noisy statistics, the public schema and the synthetic rows (post-processing of the noisy
statistics) only, never from real rows, so it may sit in the public bundle beside ``release.json``. The internal
report is where synthetic rows meet real ones.

Per column (its value coordinate's 1-way table of s cells, each with noise std t):
- ``noise_std_per_cell`` t, and ``noise_over_average_cell`` t / (1/s): how large the noise is beside a cell of
  average share (0.1 = a tenth of a typical cell; 1 or more = the table is mostly noise);
- ``expected_noise_tvd`` 0.5 s t sqrt(2/pi): the TVD the noise alone puts between the noisy table and the truth;
- ``cells_below_noise``: cells whose noisy share is below 2 t (indistinguishable from empty);
- ``model_tvd``: TVD between the synthetic rows' table and the noisy one (clipped at 0, renormalised). Near the
  expected noise TVD, the model meets the statistics as closely as the noise allows; far above it, it misses them;
- ``count_error_95``: 1.96 t n, the 95% error of one cell's count (the accuracy ``splice query`` gives a count of
  that cell exactly, in rows).

Per measured pair (``pair_tables``: the two columns, with a part's role where it is not the value): its cells, its
``expected_noise_tvd`` and ``model_tvd`` as above; every pair's cells share one noise std (``pair_noise_std_per_cell``,
``pair_count_error_95`` in rows).

Per 3-way table of the settings' workload (``workload_tables``): its cells, ``noise_std_per_cell`` (a quarter of a
pair cell's), ``expected_noise_tvd``, ``model_tvd`` and ``count_error_95`` as above.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from splice_assets.encoding import encode
from splice_assets.layout import (
    Coordinate,
    EncodingLayout,
    layout_for,
    marginal_cells,
    marginal_sizes,
    triple_cell_index,
)
from splice_assets.measurement import Measurement
from splice_assets.postprocess.fine_tables import below_noise
from splice_assets.private.validation import modelled_view
from splice_assets.queries import Z95
from splice_assets.schema import TableSchema

STATEMENT = (
    "Computed from the noisy statistics and the synthetic rows (post-processing) only, never from real rows. "
    "model_tvd compares the synthetic rows' 1-way (and 2-way) tables with the noisy ones; expected_noise_tvd is "
    "what the noise alone puts between a noisy table and the truth. A model_tvd near expected_noise_tvd fits as "
    "closely as the noise allows; several times above it, the model misses what the statistics say. "
    "noise_over_average_cell is the noise std of one cell over the share of an average cell."
)


def _tvd_to_noisy(counts: np.ndarray, noisy: np.ndarray) -> float:
    """TVD between a count table (normalised) and a noisy frequency table clipped at 0 and renormalised."""
    p = counts / max(counts.sum(), 1)
    q = np.clip(noisy, 0.0, None)
    q = q / q.sum() if q.sum() > 0 else q
    return float(0.5 * np.abs(p - q).sum())


def _cell_counts(
    x: np.ndarray, layout: EncodingLayout, pairs: tuple[tuple[int, int], ...], numeric_bins: int,
    chunk_rows: int = 65536,
) -> tuple[np.ndarray, np.ndarray]:
    """Counts of the (public) synthetic rows ``x`` per 1-way cell of every coordinate and per 2-way cell of every
    pair, each concatenated (the measurement's order), from the layout's cells (``layout.marginal_cells``)."""
    sizes = marginal_sizes(layout, numeric_bins)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    blocks = [sizes[a] * sizes[b] for a, b in pairs]
    pair_offsets = np.concatenate([[0], np.cumsum(blocks)[:-1]]).astype(np.int64)
    ones = np.zeros(int(sum(sizes)), dtype=np.int64)
    twos = np.zeros(int(sum(blocks)), dtype=np.int64)
    for start in range(0, len(x), chunk_rows):
        cells = marginal_cells(np.asarray(x[start : start + chunk_rows], dtype=np.float64), layout, numeric_bins)
        ones += np.bincount((cells + offsets).ravel(), minlength=ones.size)
        for (a, b), offset, size in zip(pairs, pair_offsets, blocks):
            twos[offset : offset + size] += np.bincount(cells[:, a] * sizes[b] + cells[:, b], minlength=size)
    return ones, twos


def _noise_tvd(cells: int, std: float) -> float:
    """E[0.5 sum |noise|] over ``cells`` cells of Gaussian noise with std ``std``."""
    return 0.5 * cells * std * math.sqrt(2.0 / math.pi)


def _round(value: float) -> float | None:
    return None if not math.isfinite(value) else float(f"{value:.4g}")


def quality_summary(measurement: Measurement, schema: TableSchema, synthetic: pd.DataFrame) -> dict[str, Any]:
    """The public quality summary (see the module docstring): per column and overall."""
    layout = layout_for(schema)
    sizes = marginal_sizes(layout, measurement.numeric_bins)
    stds1, std2 = measurement.table_noise_stds(), measurement.pair_noise_std()
    hidden = below_noise(measurement, schema)
    synthetic = modelled_view(synthetic, schema)
    x = encode(synthetic, schema) if len(synthetic) else np.zeros((0, layout.d))
    ones, twos = _cell_counts(x, layout, tuple(measurement.pairs), measurement.numeric_bins)
    columns: dict[str, Any] = {}
    one_way: list[tuple[float, float]] = []
    if measurement.marginal_sizes:
        counts = np.split(ones.astype(np.float64), np.cumsum(sizes)[:-1])
        for coordinate, noisy, synth, std1 in zip(layout.coordinates, measurement.marginals(), counts, stds1):
            if coordinate.role != "value":
                continue
            s = len(noisy)
            model, noise = _tvd_to_noisy(synth, noisy), _noise_tvd(s, std1)
            one_way.append((model, noise))
            columns[coordinate.column] = {
                "cells": s,
                "noise_std_per_cell": _round(std1),
                "noise_over_average_cell": _round(std1 * s),
                "expected_noise_tvd": _round(noise),
                "cells_below_noise": int((noisy < 2 * std1).sum()),
                "values_below_noise": hidden.get(coordinate.column, []),
                "model_tvd": _round(model),
                "count_error_95": _round(Z95 * std1 * measurement.n),
            }
    two_way: list[tuple[float, float]] = []
    pair_tables: dict[str, Any] = {}
    if measurement.pairs:
        counts2 = twos.astype(np.float64)
        cuts = np.cumsum(measurement.pair_sizes)[:-1]
        for pair, noisy, synth in zip(measurement.pairs, np.split(measurement.noisy_pairs, cuts),
                                      np.split(counts2, cuts)):
            two_way.append((_tvd_to_noisy(synth, noisy), _noise_tvd(len(noisy), std2)))
            name = " x ".join(_part_name(layout.coordinates[i]) for i in pair)
            pair_tables[name] = {"cells": len(noisy), "expected_noise_tvd": _round(two_way[-1][1]),
                                 "model_tvd": _round(two_way[-1][0])}

    workload_tables: dict[str, Any] = {}
    favoured = [j for j, units in enumerate(measurement.triple_units) if units > 1]
    if favoured:
        cells = marginal_cells(x, layout, measurement.numeric_bins)
        blocks = np.split(measurement.noisy_triples, np.cumsum(measurement.triple_sizes)[:-1])
        stds3 = measurement.triple_noise_stds()
        for j in favoured:
            triple, noisy, std3 = measurement.triples[j], blocks[j], float(stds3[j])
            synth3 = np.bincount(triple_cell_index(cells, sizes, triple), minlength=noisy.size).astype(np.float64)
            workload_tables[" x ".join(_part_name(layout.coordinates[i]) for i in triple)] = {
                "cells": len(noisy), "noise_std_per_cell": _round(std3),
                "expected_noise_tvd": _round(_noise_tvd(len(noisy), std3)),
                "model_tvd": _round(_tvd_to_noisy(synth3, noisy)),
                "count_error_95": _round(Z95 * std3 * measurement.n),
            }

    def mean(values: list[tuple[float, float]], i: int) -> float | None:
        return _round(float(np.mean([v[i] for v in values]))) if values else None

    return {
        "statement": STATEMENT,
        "model_tvd_1way": mean(one_way, 0),
        "expected_noise_tvd_1way": mean(one_way, 1),
        "model_tvd_2way": mean(two_way, 0),
        "expected_noise_tvd_2way": mean(two_way, 1),
        "pairs": len(two_way),
        "pair_noise_std_per_cell": _round(std2) if two_way else None,
        "pair_count_error_95": _round(Z95 * std2 * measurement.n) if two_way else None,
        "columns": columns,
        "pair_tables": pair_tables,
        "workload_tables": workload_tables,
    }


def _part_name(coordinate: Coordinate) -> str:
    """A coordinate as a reader names it: its column, with the part's role where it is not the value."""
    return coordinate.column if coordinate.role == "value" else f"{coordinate.column}.{coordinate.role}"
