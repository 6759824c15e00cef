"""The settings of a synthesizer, grouped by stage and validated where they are built.

- ``MeasurementSettings``: what the one Gaussian measurement queries (L, k, the shares of Delta^2);
- ``ModelSettings``: the mixture fitted to it;
- ``PostProcessingSettings``: links, tilt, pairwise field and marginal matching applied after the fit.

The privacy parameters (epsilon, delta, relation) and the public seed belong to the ``Synthesizer`` itself. Every
message quotes the bad value. ``fit_config`` is the one mapping from these settings to the fitter's
``FitConfig``; ``expert`` reaches the remaining ``FitConfig`` fields for research and benchmarks only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from splice_assets.defaults import DEFAULT_LEVEL_UNITS, default_pair_share
from splice_assets.layout import DEFAULT_NUMERIC_BINS as COARSE_BINS
from splice_assets.layout import DEFAULT_TARGET_TRIPLES
from splice_assets.measurement import RELATION_ADD_REMOVE, RELATIONS
from splice_assets.model.fit import FitConfig
from splice_assets.private import preflight
from splice_assets.private.bounds import DEFAULT_BOUNDS_SHARE
from splice_assets.private.mechanism import (
    DEFAULT_COUNT_SHARE,
    DEFAULT_K,
    DEFAULT_MARGINAL_SHARE,
    DEFAULT_N_DIRECTIONS,
    DEFAULT_PAIR_SHARE,
)
from splice_assets.private.pair_selection import DEFAULT_PAIRS_PER_COORDINATE, DEFAULT_SELECTION_SHARE
from splice_assets.private.validation import DEFAULT_MAX_UNPARSEABLE_SHARE
from splice_assets.resolution import (
    DEFAULT_FINE_BINS,
    DEFAULT_FINE_SPLIT,
    DEFAULT_GRID_WEIGHT,
    DEFAULT_INTERVAL_WEIGHT,
    MAX_FINE_BINS,
    MAX_FINE_SPLIT,
    MAX_GRID_WEIGHT,
)

if TYPE_CHECKING:
    from splice_assets.schema import TableSchema


def _integer(name: str, value: object, least: int, most: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least or (most is not None and value > most):
        bound = f">= {least}" if most is None else f"in [{least}, {most}]"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")


def _number(name: str, value: object, low: float, high: float, high_open: bool = True, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not isinstance(value, (int, float)) or not (  # isinstance again: narrows for mypy
        (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
    ):
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must be a number in {left}{low:g}, {high:g}{right}, got {value!r}")


@dataclass(frozen=True)
class MeasurementSettings:
    """The queries of the one Gaussian measurement. ``marginal_share`` of Delta^2 goes to the 1-way tables (every
    coordinate's, and a fine table of ``fine_bins`` cells or one per grid value for every numeric column, 0 = none,
    with a finer table of ``fine_split`` cells per fine interval, 0 = none; see ``resolution``; a per-value fine
    table counts as ``grid_weight`` tables and one of intervals as ``interval_weight``, their extra units added to
    the share out of the moments', so their cells get 1/sqrt(weight) of a coarse cell's noise and the other tables
    keep theirs), ``pair_share`` to
    the 2-way tables of every pair of coordinates from different columns (None: by the schema, more the more of its
    columns are discrete, ``defaults.default_pair_share``; ``for_schema``), the rest to the sliced Chebyshev moments
    (L directions, orders 1..k). Where the pairs outnumber ``pairs_per_coordinate`` x d (0 = never), that many are
    chosen by noisy dependence scores, which take ``selection_share`` out of the pair share (``pair_selection``);
    otherwise the schema's target gets a 3-way table with every pair of other columns whose table has at most
    ``layout.MAX_TRIPLE_CELLS`` cells, at the pair weight, when they number at most ``target_triples`` (0 = never;
    ``layout.triples_with_target``). With ``level_units`` (on: decisions 0064-0066) a coarse 1-way table of many cells
    counts as ``measurement.level_units`` tables, its extra units paid within the 1-way share (0066)."""

    n_directions: int = DEFAULT_N_DIRECTIONS
    k: int = DEFAULT_K
    marginal_share: float = DEFAULT_MARGINAL_SHARE
    pair_share: float | None = None
    fine_bins: int = DEFAULT_FINE_BINS
    fine_split: int = DEFAULT_FINE_SPLIT
    grid_weight: int = DEFAULT_GRID_WEIGHT
    interval_weight: int = DEFAULT_INTERVAL_WEIGHT
    pairs_per_coordinate: float = DEFAULT_PAIRS_PER_COORDINATE
    selection_share: float = DEFAULT_SELECTION_SHARE
    target_triples: int = DEFAULT_TARGET_TRIPLES
    level_units: bool = DEFAULT_LEVEL_UNITS

    def __post_init__(self) -> None:
        if not isinstance(self.level_units, bool):
            raise ValueError(f"level_units must be true or false, got {self.level_units!r}")
        _integer("n_directions (L)", self.n_directions, 1, preflight.MAX_DIRECTIONS)
        _integer("k", self.k, 1, preflight.MAX_K)
        _number("marginal_share", self.marginal_share, 0.0, 1.0)
        if self.pair_share is not None:
            _number("pair_share", self.pair_share, 0.0, 1.0)
        _integer("fine_bins", self.fine_bins, 0, MAX_FINE_BINS)
        _integer("fine_split", self.fine_split, 0, MAX_FINE_SPLIT)
        _integer("grid_weight", self.grid_weight, 1, MAX_GRID_WEIGHT)
        _integer("interval_weight", self.interval_weight, 1, MAX_GRID_WEIGHT)
        _number("pairs_per_coordinate", self.pairs_per_coordinate, 0.0, math.inf)
        _number("selection_share", self.selection_share, 0.0, 1.0, low_open=True)
        _integer("target_triples", self.target_triples, 0)
        least_pair_share = DEFAULT_PAIR_SHARE if self.pair_share is None else self.pair_share
        if least_pair_share > 0 and self.selection_share >= least_pair_share:
            raise ValueError(
                f"selection_share must be below pair_share {least_pair_share!r} (it is taken out of it), "
                f"got {self.selection_share!r}"
            )
        if self.fine_bins % COARSE_BINS:
            raise ValueError(f"fine_bins must be a multiple of {COARSE_BINS} (0 = none), got {self.fine_bins!r}")

    def for_schema(self, schema: TableSchema) -> MeasurementSettings:
        """These settings with the pair share resolved for ``schema`` (``defaults.default_pair_share`` where None)."""
        return self if self.pair_share is not None else dataclasses.replace(
            self, pair_share=default_pair_share(schema)
        )

    def check_relation(self, relation: str) -> None:
        """The moments need a share of Delta^2 left over (under add-remove the noisy count takes one too); a pair
        share left to the schema is checked once resolved."""
        count_share = DEFAULT_COUNT_SHARE if relation == RELATION_ADD_REMOVE else 0.0
        if self.pair_share is not None and self.marginal_share + self.pair_share + count_share >= 1.0:
            raise ValueError(
                f"marginal_share {self.marginal_share!r} + pair_share {self.pair_share!r} (+ the noisy count's "
                f"{count_share!r} under add-remove) must be < 1 (the moments need a share of the budget)"
            )


@dataclass(frozen=True)
class ModelSettings:
    """The mixture: ``components`` (K), at most ``max_steps`` fitting steps, and up to ``joint_pairs`` column pairs
    modelled by one joint table per component where the noisy 2-way tables show a product start misfits."""

    components: int = FitConfig.K
    max_steps: int = FitConfig.max_steps
    joint_pairs: int = FitConfig.joint_pairs

    def __post_init__(self) -> None:
        _integer("components (K)", self.components, 1, preflight.MAX_COMPONENTS)
        _integer("max_steps", self.max_steps, 1)
        _integer("joint_pairs", self.joint_pairs, 0)


@dataclass(frozen=True)
class PostProcessingSettings:
    """After the fit (no privacy cost): ``link_lambda`` redraws near-functional targets from their noisy 2-way
    table (0 = off), ``tilt_chi2`` tilts the model toward the noisy tables until chi^2 per cell reaches it (0 =
    off), ``field_iterations`` fits the pairwise field (0 = off), ``match_marginals`` re-maps sampled columns
    onto the noisy 1-way tables, and ``fine_threshold`` reads fine cells at or below that many noise std as empty."""

    link_lambda: float = FitConfig.link_lambda
    tilt_chi2: float = FitConfig.tilt_chi2
    field_iterations: int = FitConfig.field_iterations
    match_marginals: bool = True
    fine_threshold: float = FitConfig.fine_threshold

    def __post_init__(self) -> None:
        _number("link_lambda", self.link_lambda, 0.0, 1.0, high_open=False)
        _number("tilt_chi2", self.tilt_chi2, 0.0, math.inf)
        _integer("field_iterations", self.field_iterations, 0)
        _number("fine_threshold", self.fine_threshold, 0.0, math.inf)
        if not isinstance(self.match_marginals, bool):
            raise ValueError(f"match_marginals must be true or false, got {self.match_marginals!r}")


@dataclass(frozen=True)
class SynthesizerSettings:
    """Everything a synthesizer is built from, validated together; public (it goes into the release)."""

    epsilon: float
    delta: float
    relation: str = "replace-one"
    seed: int = 0
    measurement: MeasurementSettings = field(default_factory=MeasurementSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    postprocessing: PostProcessingSettings = field(default_factory=PostProcessingSettings)
    bounds_share: float = DEFAULT_BOUNDS_SHARE
    max_unparseable_share: float = DEFAULT_MAX_UNPARSEABLE_SHARE
    expert: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        preflight.check_settings(self.epsilon, self.delta)
        _integer("seed", self.seed, 0)
        self.measurement.check_relation(self.relation)
        _number("bounds_share", self.bounds_share, 0.0, 1.0, low_open=True)
        _number("max_unparseable_share", self.max_unparseable_share, 0.0, 1.0, high_open=False)
        known = {f.name for f in dataclasses.fields(FitConfig)}
        unknown = sorted(set(self.expert) - known)
        if unknown:
            raise ValueError(f"expert settings must be FitConfig fields, got {unknown!r}")
        fit_config(self)  # the fitter's own checks, at construction

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"expert": dict(self.expert)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SynthesizerSettings:
        data = dict(data)
        return cls(
            **{k: v for k, v in data.items() if k not in ("measurement", "model", "postprocessing")},
            measurement=MeasurementSettings(**data.get("measurement", {})),
            model=ModelSettings(**data.get("model", {})),
            postprocessing=PostProcessingSettings(**data.get("postprocessing", {})),
        )


def fit_config(settings: SynthesizerSettings, threads: int | None = 1) -> FitConfig:
    """The one mapping from the settings to the fitter's configuration (``expert`` fields last)."""
    from splice_assets.postprocess.chain import check_post_processing

    m, p = settings.model, settings.postprocessing
    config = FitConfig(
        K=m.components, max_steps=m.max_steps, joint_pairs=m.joint_pairs, seed=settings.seed,
        tilt_chi2=p.tilt_chi2, link_lambda=p.link_lambda, field_iterations=p.field_iterations, threads=threads,
        fine_threshold=p.fine_threshold,
    )
    config = dataclasses.replace(config, **settings.expert)
    check_post_processing(config)
    return config
