"""What the steps of the DP estimate of a schema's ``auto`` entries share: public grids and shares (``private.bounds``).

The log grid of the bounds histograms (``COARSE``, one bucket per decade; ``FINE``, five per decade), the z at which a
decade is in the data, the share of the noisy rows an estimate may clip, and the value counts the candidate and knot
steps both hand on. Its own module so that ``bounds`` and the modules of its steps import it without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LogGrid:
    """Buckets of a public log grid: negatives (outermost first), 0 alone, positives; ``per_decade`` per decade of
    |v| over [1e-3, 1e9]. Each bucket covers [lower, upper], open on the side toward zero."""

    per_decade: int

    @property
    def magnitudes(self) -> np.ndarray:
        return np.geomspace(1e-3, 1e9, 12 * self.per_decade + 1)

    @property
    def zero(self) -> int:
        return len(self.magnitudes)

    @property
    def size(self) -> int:
        return 2 * len(self.magnitudes) + 1

    @property
    def lower(self) -> np.ndarray:
        inner = np.concatenate([[0.0], self.magnitudes[:-1]])
        return np.concatenate([-self.magnitudes[::-1], [0.0], inner])

    @property
    def upper(self) -> np.ndarray:
        inner = np.concatenate([[0.0], self.magnitudes[:-1]])
        return np.concatenate([-inner[::-1], [0.0], self.magnitudes])

    def inside(self, lower: float, upper: float) -> np.ndarray:
        """Indices, ascending in value, of this grid's buckets within [lower, upper] (0's own only for [0, 0])."""
        within = (self.lower >= lower) & (self.upper <= upper)
        within[self.zero] = lower == upper == 0.0
        return np.flatnonzero(within)

    def bucket_of(self, values: np.ndarray) -> np.ndarray:
        """Bucket of each value (NaN -> -1, counted nowhere); values beyond 1e9 fall in the outermost bucket."""
        magnitudes = self.magnitudes
        step = np.searchsorted(magnitudes, np.minimum(np.abs(values), magnitudes[-1]), side="left")
        index = np.where(values > 0, self.zero + 1 + step, self.zero - 1 - step)
        index = np.where(values == 0, self.zero, index)
        return np.where(np.isnan(values), -1, index)


COARSE, FINE = LogGrid(1), LogGrid(5)
#: A decade is in the data when its noisy count exceeds COARSE_Z noise standard deviations.
COARSE_Z = 4.0
#: An end moves inward only while the noisy mass it clips stays within this share of the noisy row count.
CLIP_SHARE = 0.01

#: PRIVATE: a column's exact counts of its candidates (index, count), the candidates held by at least one row.
ValueCounts = tuple[np.ndarray, np.ndarray]
