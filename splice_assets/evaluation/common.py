"""What every metric module of ``evaluation/`` shares: seeded streams, subsampling, JSON-safe results.

Each metric draws from ``SeedSequence([seed, tag])`` with its own tag (see ``metrics``, "Seeds").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _rng(seed: int, tag: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), tag]))


def _subsample(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of min(n, m) rows drawn without replacement (all rows, in order, if n <= m)."""
    if n <= m:
        return np.arange(n)
    return np.sort(rng.choice(n, size=m, replace=False))


def _json_safe(value: Any) -> Any:
    """Recursively convert to JSON-safe builtins; NaN/inf become None."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        return x if math.isfinite(x) else None
    if value is None or isinstance(value, str):
        return value
    return str(value)
