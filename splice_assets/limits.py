"""The limits of a release's settings, each defined once, with the message that quotes a bad value.

Every entry point (``Synthesizer``, ``splice plan``, ``splice release``, the Dagster ``release`` job's run config)
checks its settings through ``splice_assets.config``, which checks them here, so a value refused by one is refused by
all with the same text. The module imports only the standard library: the private layer (the mechanism, the ledger)
and the CLI's option declarations read it without loading numpy or the accountant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from numbers import Integral, Real
from pathlib import Path


class SettingsError(ValueError):
    """A setting outside its limit; the message names the setting and quotes the value."""


class Relation(StrEnum):
    """The neighbouring relation of the guarantee. A ``str`` enum: it compares equal to, formats as and is stored as
    its value (``"replace-one"``), so JSON, ledger rows and string comparisons keep working."""

    #: Neighbouring tables differ by replacing one row; n is public and every statistic is a frequency.
    REPLACE_ONE = "replace-one"
    #: Neighbouring tables differ by adding or removing one row; n is private (a noisy count is released).
    ADD_REMOVE = "add-remove"

    def __repr__(self) -> str:  # messages quote the value as the user wrote it
        return repr(self.value)

    @classmethod
    def parse(cls, value: object) -> Relation:
        """``value`` as a relation, or a ``SettingsError`` quoting it."""
        try:
            return cls(value)  # type: ignore[arg-type]  # any value: refused below with its repr
        except (ValueError, TypeError):
            raise SettingsError(f"relation must be one of {RELATIONS}, got {value!r}") from None


#: The relations' values, as the CLI and the run config take them.
RELATIONS: tuple[str, ...] = tuple(r.value for r in Relation)


@dataclass(frozen=True)
class Limit:
    """The range of one numeric setting: ``check`` refuses a value outside it (or of the wrong type) with one
    message, ``text`` says the range (for help texts and docs)."""

    name: str
    low: float
    high: float = math.inf
    integer: bool = False
    low_open: bool = False
    high_open: bool = False

    @property
    def text(self) -> str:
        if self.integer:
            if math.isinf(self.high):
                return f"an integer {'>' if self.low_open else '>='} {int(self.low)}"
            return f"an integer in [{int(self.low)}, {int(self.high)}]"
        left, right = "(" if self.low_open else "[", ")" if self.high_open or math.isinf(self.high) else "]"
        return f"a number in {left}{self.low:g}, {self.high:g}{right}"

    def contains(self, value: object) -> bool:
        if isinstance(value, bool):
            return False
        if self.integer:
            if not isinstance(value, Integral):
                return False
        elif not isinstance(value, Real) or not math.isfinite(value):
            return False
        number = float(value) if not isinstance(value, Integral) else int(value)
        above = self.low < number if self.low_open else self.low <= number
        below = number < self.high if self.high_open else number <= self.high
        return above and below

    def check(self, value: object) -> None:
        if not self.contains(value):
            raise SettingsError(f"{self.name} must be {self.text}, got {value!r}")


# -- the product's caps ----------------------------------------------------------------------------------------------

#: Above this epsilon a release protects nothing worth the name, and the PLD accountant's grid grows with it:
#: composing one release with a pure-epsilon part took 2.5 s / 0.3 GB at epsilon 10, 6.7 s / 0.4 GB at 20,
#: 20 s / 0.8 GB at 50 (epsilon = 10^6 asked for 150 GiB).
MAX_EPSILON = 20.0
#: The model divides by m! for m <= k (171! overflows a float); past 64 the moments carry only noise.
MAX_K = 64
MAX_DIRECTIONS = 8192
MAX_COMPONENTS = 500
#: The most synthetic rows one release samples in memory (``splice sample`` has the same cap).
MAX_SYNTHETIC_ROWS = 10_000_000
#: The holdout is a share of the rows below this: the rest is measured.
MAX_HOLDOUT_FRACTION = 0.9

# -- the limits, one per setting ---------------------------------------------------------------------------------

EPSILON = Limit("epsilon", 0.0, MAX_EPSILON, low_open=True)
DELTA = Limit("delta", 0.0, 1.0, low_open=True, high_open=True)
SEED = Limit("seed", 0, integer=True)
# the measurement
N_DIRECTIONS = Limit("n_directions (L)", 1, MAX_DIRECTIONS, integer=True)
K = Limit("k", 1, MAX_K, integer=True)
MARGINAL_SHARE = Limit("marginal_share", 0.0, 1.0, high_open=True)
PAIR_SHARE = Limit("pair_share", 0.0, 1.0, high_open=True)
TARGET_TRIPLES = Limit("target_triples", 0, integer=True)
BOUNDS_SHARE = Limit("bounds_share", 0.0, 1.0, low_open=True, high_open=True)
MAX_UNPARSEABLE_SHARE = Limit("max_unparseable_share", 0.0, 1.0)
# the model
COMPONENTS = Limit("components (K)", 1, MAX_COMPONENTS, integer=True)
MAX_STEPS = Limit("max_steps", 1, integer=True)
JOINT_PAIRS = Limit("joint_pairs", 0, integer=True)
# post-processing
LINK_LAMBDA = Limit("link_lambda", 0.0, 1.0)
TILT_CHI2 = Limit("tilt_chi2", 0.0)
FIELD_ITERATIONS = Limit("field_iterations", 0, integer=True)
FINE_THRESHOLD = Limit("fine_threshold", 0.0)
# the release
N_SYNTHETIC = Limit("n_synthetic", 0, MAX_SYNTHETIC_ROWS, integer=True)
HOLDOUT_FRACTION = Limit("holdout_fraction", 0.0, MAX_HOLDOUT_FRACTION, high_open=True)


def check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise SettingsError(f"{name} must be true or false, got {value!r}")


def check_n_min(n_min: object) -> None:
    if isinstance(n_min, bool) or not isinstance(n_min, Integral) or n_min < 1:
        raise SettingsError(f"n_min must be an integer >= 1, got {n_min!r}")


def check_delta_for(delta: float, n_min: int, name: str = "delta") -> None:
    """delta < 1/n_min: the guarantee must stay meaningful at the schema's public lower bound on the rows (a
    release's delta, and a dataset's lifetime delta)."""
    check_n_min(n_min)
    if not delta < 1.0 / n_min:
        raise SettingsError(f"{name} must be < 1/n_min = {1.0 / n_min:g} (n_min={n_min}), got {delta!r}")


def check_rows_for(n: object, n_min: int) -> None:
    """A public row count is at least the schema's n_min."""
    if isinstance(n, bool) or not isinstance(n, Integral) or n < n_min:
        raise SettingsError(f"row count n must be an integer >= the schema's n_min = {n_min}, got {n!r}")


def check_dataset_name(value: str) -> None:
    """The name picks the schema file and the release folder (<artifact dir>/<dataset>/): a path would move both."""
    if not isinstance(value, str) or value in {"", ".", ".."} or Path(value).name != value:
        raise SettingsError(f"dataset must be a schema name (schemas/<dataset>.yaml), not a path, got {value!r}")


@dataclass(frozen=True)
class PrivacyLoss:
    """The (epsilon, delta) of one release, each within its limit; ``check_n_min`` adds delta < 1/n_min."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        EPSILON.check(self.epsilon)
        DELTA.check(self.delta)

    def check_n_min(self, n_min: int) -> None:
        check_delta_for(self.delta, n_min)
