"""PRIVATE rows into the cube: a validated table -> [-1, 1]^d by the schema's public layout.

The encoding itself is public (``splice_assets.encoding``, a function of the schema applied row by row; the
public quality summary encodes synthetic rows with it); here it is applied to private rows, which stay inside
``private/`` (in memory or the internal folder) until they are measured.
"""

from __future__ import annotations

import numpy as np

from splice_assets.encoding import category_codes as _category_codes
from splice_assets.encoding import encode, exact_levels
from splice_assets.layout import unit_ball_scale

__all__ = ["encode", "exact_levels", "to_unit_ball", "_category_codes"]


def to_unit_ball(x: np.ndarray) -> np.ndarray:
    """Divide cube coordinates by sqrt(d): then |theta^T x| <= 1 for every unit theta."""
    return x / unit_ball_scale(x.shape[1])
