"""The public numeric scales and grids of the cube: a number in its bounds <-> [-1, 1] (``cube_of``, ``value_of``),
a category code <-> a grid point, and a decoded number at the schema's public precision. Moved here from ``layout``
(which re-exports them) so that the kinds, which sit under the schema, encode and decode without importing it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from splice_assets.schema import ColumnSpec


def _grid_position(index: np.ndarray, levels: int) -> np.ndarray:
    if levels == 1:
        return np.zeros(index.shape)
    return -1.0 + 2.0 * index / (levels - 1)


def _nearest_level(x: np.ndarray, levels: int) -> np.ndarray:
    if levels == 1:
        return np.zeros(x.shape, dtype=np.int64)
    pos = np.rint((np.clip(x, -1.0, 1.0) + 1.0) * (levels - 1) / 2.0)
    return pos.astype(np.int64)



#: ``logit`` scale: the offset a in log((u + a) / (1 - u + a)), u the value's position in its bounds. The bins next
#: to either bound then hold u <= 0.8% and the middle 40% of the range spans 3 of 16 bins.
LOGIT_OFFSET = 0.01


def cube_of(values: np.ndarray, lo: float, hi: float, scale: str = "linear", knots: tuple[float, ...] = ()
            ) -> np.ndarray:
    """Values in [lo, hi] -> [-1, 1], affine in v, in log(1 + v - lo) (``log``), in asinh(v) (``symlog``) or in
    log((u + a) / (1 - u + a)) with u = (v - lo) / (hi - lo) (``logit``): the public encoding of a numeric column.
    With ``knots`` (values, lo first and hi last) that position is then mapped piecewise linearly so that the knots
    land at equally spaced points of [-1, 1] (the coarse bins' edges when there are bins + 1 of them). Values
    outside the bounds map outside [-1, 1], under ``logit`` and with knots onto its ends; callers clip."""
    z = _scaled(np.asarray(values, dtype=np.float64), lo, hi, scale)
    return np.interp(z, *_knot_map(knots, lo, hi, scale)) if knots else z


def value_of(z: np.ndarray, lo: float, hi: float, scale: str = "linear", knots: tuple[float, ...] = ()
             ) -> np.ndarray:
    """Inverse of ``cube_of``."""
    if knots:
        z = np.interp(z, *_knot_map(knots, lo, hi, scale)[::-1])
    if scale == "log":
        return lo + np.expm1((z + 1.0) * math.log1p(hi - lo) / 2.0)
    if scale == "symlog":
        return np.sinh(math.asinh(lo) + (z + 1.0) * (math.asinh(hi) - math.asinh(lo)) / 2.0)
    if scale == "logit":
        a = LOGIT_OFFSET
        r = np.exp(np.asarray(z, dtype=np.float64) * math.log((1.0 + a) / a))
        return lo + (hi - lo) * np.clip((r * (1.0 + a) - a) / (1.0 + r), 0.0, 1.0)
    return lo + (z + 1.0) * (hi - lo) / 2.0


def _knot_map(knots: tuple[float, ...], lo: float, hi: float, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """The knots' positions on the scale, and the equally spaced points of [-1, 1] they map to."""
    return _scaled(np.asarray(knots, dtype=np.float64), lo, hi, scale), np.linspace(-1.0, 1.0, len(knots))


def bin_widths_on_scale(knots: tuple[float, ...], lo: float, hi: float, scale: str) -> np.ndarray:
    """The width on the column's scale of each bin between consecutive ``knots`` (lo first and hi last)."""
    return np.diff(_scaled(np.asarray(knots, dtype=np.float64), lo, hi, scale))


def _scaled(values: np.ndarray, lo: float, hi: float, scale: str) -> np.ndarray:
    """A value's position in [-1, 1] on the column's scale (``cube_of`` without knots)."""
    if scale == "log":
        return -1.0 + 2.0 * np.log1p(np.maximum(values - lo, 0.0)) / math.log1p(hi - lo)
    if scale == "symlog":
        return -1.0 + 2.0 * (np.arcsinh(values) - math.asinh(lo)) / (math.asinh(hi) - math.asinh(lo))
    if scale == "logit":
        u = np.clip((values - lo) / (hi - lo), 0.0, 1.0)
        a = LOGIT_OFFSET
        return np.log((u + a) / (1.0 - u + a)) / math.log((1.0 + a) / a)
    return -1.0 + 2.0 * (values - lo) / (hi - lo)


#: Relative tolerance (of the bounds' width) within which a value is at a declared exact value.
POINT_TOLERANCE = 1e-9
#: Relative half-width of a float32 rounding: a value written from float32 (0.6666666865348816) still is its point.
FLOAT32_TOLERANCE = 2.0**-24


#: Relative tolerance of a value read as float64: a decimal written with float64 digits (265.10000000000002) is it.
FLOAT64_TOLERANCE = 1e-9
#: Relative distance within which a value is a float32 number written with float64 digits (0.2000000029802322, 13
#: significant digits or more); a value computed in float64 lies that close to a float32 number with odds ~1e-5.
RENDERING_TOLERANCE = 1e-12


def float32_rendered(values: np.ndarray) -> np.ndarray:
    """Which ``values`` are float32 numbers written with float64 digits (NaN and 0 aside: 0 is exact anyway)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        single = values.astype(np.float32).astype(np.float64)
        return np.abs(values - single) <= RENDERING_TOLERANCE * np.abs(values)


def stands_for(values: np.ndarray, targets: np.ndarray, unit: float = 1.0) -> np.ndarray:
    """Whether each stored value is its target number within its storage precision: within ``FLOAT64_TOLERANCE`` of
    max(``unit``, |value|), or, for a float32 number written with float64 digits (``float32_rendered``), the target
    rounds to the same float32 (0.2000000029802322 is 0.2; 0.20000003, the next float32, is not). A per-value rule
    (public, no data read), used by ``decimals: auto`` and a decimal grid's ``values: auto`` candidates."""
    values = np.asarray(values, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    near = np.abs(values - targets) <= FLOAT64_TOLERANCE * np.maximum(unit, np.abs(values))
    with np.errstate(over="ignore", invalid="ignore"):
        same_single = values.astype(np.float32) == targets.astype(np.float32)
    return near | (float32_rendered(values) & same_single)


def at_point(values: np.ndarray, point: float, lo: float, hi: float) -> np.ndarray:
    """Which ``values`` are the declared exact value ``point``: within ``POINT_TOLERANCE`` of the bounds' width or
    ``FLOAT32_TOLERANCE`` of the point, whichever is wider (NaN never is)."""
    return np.abs(values - point) <= max(POINT_TOLERANCE * (hi - lo), FLOAT32_TOLERANCE * abs(point))


def step_range(lo: float, hi: float, step: float) -> tuple[int, int]:
    """First and last multiple of ``step`` (as multiples) inside [lo, hi], up to float rounding."""
    return math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)


def _on_public_precision(values: np.ndarray, spec: ColumnSpec) -> np.ndarray:
    """Values at the schema's public precision: a declared exact value (or candidate) exactly, others rounded to
    the ``step`` grid or to ``decimals`` (then clipped again, as rounding may step over a bound finer than the
    precision); then, on a ``float32`` column, every value to the float32 number nearest it inside the bounds."""
    assert spec.bounds is not None
    lo, hi = spec.bounds
    out = values
    if spec.step is not None:
        first, last = step_range(lo, hi, spec.step)
        out = np.clip(np.round(out / spec.step), first, last) * spec.step
    if spec.decimals is not None:
        out = np.clip(np.round(out, spec.decimals), lo, hi)
    for point in spec.exact_values + spec.candidates:  # after rounding: a top code off the step grid stays exact
        out = np.where(at_point(values, point, lo, hi), point, out)
    if spec.float32:
        single = np.asarray(out, dtype=np.float32)
        wide = single.astype(np.float64)  # compared in float64: a bound rounds to float32 too
        single = np.where(wide > hi, np.nextafter(single, np.float32(-np.inf)), single)
        single = np.where(wide < lo, np.nextafter(single, np.float32(np.inf)), single)
        out = single.astype(np.float64)
    return out
