"""Empirical privacy: distance to closest record (INTERNAL: reads real rows; evidence, not a guarantee).

Synthetic rows are compared with equally sized subsamples of the real train and holdout rows on the cube
encoding (``encoding.encode``); ``metrics.fidelity_metrics`` reports it as ``privacy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from splice_assets.evaluation.common import _json_safe, _rng, _subsample
from splice_assets.private.encoding import encode
from splice_assets.schema import TableSchema

DCR_MAX_REFERENCE = 10_000
DCR_MAX_SYNTHETIC = 5_000
PRIVACY_NOTE = "empirical evidence, not a guarantee"

_TAG_DCR = 0xE7A1_0DC4  # the metric's own stream (see metrics, "Seeds")


@dataclass(frozen=True)
class DCRResult:
    """Distance to closest record (Euclidean on the cube encoding divided by sqrt(d)) -- {note}.

    ``share_closer_to_train`` counts ties as one half; with equally sized train and holdout references a
    generator that does not copy its training rows scores about 0.5. ``exact_match_*`` are the shares of
    synthetic rows at distance 0 from some train / holdout row.
    """

    median_to_train: float
    median_to_holdout: float
    share_closer_to_train: float
    exact_match_train: float
    exact_match_holdout: float
    n_reference: int
    n_synthetic: int
    note: str = PRIVACY_NOTE

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(self.__dict__)


DCRResult.__doc__ = (DCRResult.__doc__ or "").replace("{note}", PRIVACY_NOTE)


def nearest_distance(query: np.ndarray, reference: np.ndarray, chunk: int = 1_024) -> np.ndarray:
    """Euclidean distance from each query row to its nearest reference row (chunked matrix products).

    Squared distances below 1e-10 are reported as 0 (exact copies; the matrix-product form has rounding error).
    """
    ref_sq = (reference * reference).sum(1)
    out = np.empty(len(query))
    for start in range(0, len(query), chunk):
        q = query[start : start + chunk]
        d2 = (q * q).sum(1)[:, None] + ref_sq[None, :] - 2.0 * (q @ reference.T)
        best = d2.min(1)
        # The expansion |q|^2 + |r|^2 - 2 q.r cancels: squared distances below 1e-10 are exact copies.
        out[start : start + chunk] = np.sqrt(np.where(best < 1e-10, 0.0, best))
    return out


def distance_to_closest_record(
    train: pd.DataFrame,
    holdout: pd.DataFrame,
    synthetic: pd.DataFrame,
    schema: TableSchema,
    seed: int,
    max_reference: int = DCR_MAX_REFERENCE,
    max_synthetic: int = DCR_MAX_SYNTHETIC,
) -> DCRResult:
    """DCR synthetic->train vs synthetic->holdout; train and holdout are subsampled to the same size."""
    rng = _rng(seed, _TAG_DCR)
    m = min(len(train), len(holdout), max_reference)
    if m == 0 or len(synthetic) == 0:
        nan = float("nan")
        return DCRResult(nan, nan, nan, nan, nan, m, 0)
    xt = encode(train.iloc[_subsample(len(train), m, rng)], schema)
    xh = encode(holdout.iloc[_subsample(len(holdout), m, rng)], schema)
    xs = encode(synthetic.iloc[_subsample(len(synthetic), max_synthetic, rng)], schema)
    scale = math.sqrt(xt.shape[1])
    dt = nearest_distance(xs, xt) / scale
    dh = nearest_distance(xs, xh) / scale
    tol = 1e-9
    closer = np.where(np.abs(dt - dh) <= tol, 0.5, (dt < dh).astype(np.float64))
    return DCRResult(
        median_to_train=float(np.median(dt)),
        median_to_holdout=float(np.median(dh)),
        share_closer_to_train=float(closer.mean()),
        exact_match_train=float((dt <= tol).mean()),
        exact_match_holdout=float((dh <= tol).mean()),
        n_reference=m,
        n_synthetic=len(xs),
    )
