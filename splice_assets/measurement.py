"""The measurement artifact: noisy sliced moments plus the public facts needed to re-fit them.

Everything in a ``Measurement`` is either public (seed, L, k, n, scaling, relation, (epsilon, delta)) or the
output of the Gaussian mechanism (noisy moments, sigma), so it can be stored, shipped and re-fitted any
number of times at zero privacy cost. Saved as ``<stem>.npz`` (the moments) + ``<stem>.json`` (the rest).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .encoding import ScalingMode
from .moments import direction_scales, draw_directions

RELATION_REPLACE_ONE = "replace-one"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Measurement:
    """Noisy moments ``noisy_moments[j-1, l]`` ~ m_{j,l} + N(0, j * sigma^2), and their public context."""

    dataset: str
    schema_version: int
    seed: int
    n_directions: int
    k: int
    n: int
    d: int
    scaling: ScalingMode
    noisy_moments: np.ndarray
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    relation: str = RELATION_REPLACE_ONE
    ledger_entry_id: str | None = None

    def directions(self) -> np.ndarray:
        """The L unit directions, recomputed from the public seed."""
        return draw_directions(self.seed, self.n_directions, self.d)

    def scales(self) -> np.ndarray:
        """Public per-direction divisors (sqrt(d) or ||theta||_1)."""
        return direction_scales(self.directions(), self.scaling)

    def moment_noise_std(self) -> np.ndarray:
        """Noise standard deviation of each raw moment order j = 1..k: sigma * sqrt(j)."""
        return self.sigma * np.sqrt(np.arange(1, self.k + 1))

    def public_metadata(self) -> dict[str, Any]:
        meta = asdict(self)
        meta.pop("noisy_moments")
        meta["format_version"] = FORMAT_VERSION
        return meta

    def save(self, stem: str | Path) -> tuple[Path, Path]:
        stem = Path(stem)
        stem.parent.mkdir(parents=True, exist_ok=True)
        npz, meta = stem.with_suffix(".npz"), stem.with_suffix(".json")
        np.savez(npz, noisy_moments=self.noisy_moments)
        meta.write_text(json.dumps(self.public_metadata(), indent=2, sort_keys=True))
        return npz, meta

    @classmethod
    def load(cls, stem: str | Path) -> "Measurement":
        stem = Path(stem)
        meta = json.loads(stem.with_suffix(".json").read_text())
        if meta.pop("format_version", None) != FORMAT_VERSION:
            raise ValueError(f"measurement {str(stem)!r} has an unsupported format version")
        with np.load(stem.with_suffix(".npz")) as data:
            moments = data["noisy_moments"].astype(np.float64)
        if moments.shape != (meta["k"], meta["n_directions"]):
            raise ValueError(f"measurement {str(stem)!r}: moments shape {moments.shape} does not match k, L")
        return cls(noisy_moments=moments, **meta)
