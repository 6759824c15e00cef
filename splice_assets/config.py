"""The settings of a synthesizer, grouped by stage and validated where they are built.

- ``MeasurementSettings``: what the one Gaussian measurement queries (L, k, the shares of Delta^2);
- ``ModelSettings``: the mixture fitted to it;
- ``PostProcessingSettings``: links, tilt, pairwise field and marginal matching applied after the fit.

The privacy parameters (epsilon, delta: a ``PrivacyLoss``; the ``Relation``) and the public seed belong to the
``Synthesizer`` itself. This is the one settings model of every entry point: ``Synthesizer(...)``, ``splice plan``,
``splice release`` and the Dagster ``release`` job's run config (``ReleaseConfig``, through ``ReleaseSettings``) build
it from their values, so each value is checked here, against its limit in ``splice_assets.limits`` (defined once),
and refused by every entry point with the same message, which quotes the bad value. ``fit_config`` is the one
mapping from these settings to the fitter's ``FitConfig``; its other fields are research switches, reachable only
through ``splice_assets.experimental`` (which no release path imports: an import-linter contract).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from splice_assets import limits
from splice_assets.defaults import DEFAULT_LEVEL_UNITS, DEFAULT_MAX_UNPARSEABLE_SHARE, default_pair_share
from splice_assets.fine_cells import (
    DEFAULT_FINE_BINS,
    DEFAULT_GRID_WEIGHT,
    DEFAULT_INTERVAL_WEIGHT,
    MAX_FINE_BINS,
    MAX_GRID_WEIGHT,
)
from splice_assets.layout import DEFAULT_NUMERIC_BINS as COARSE_BINS
from splice_assets.layout import DEFAULT_TARGET_TRIPLES
from splice_assets.limits import PrivacyLoss as PrivacyLoss
from splice_assets.limits import Relation as Relation
from splice_assets.limits import SettingsError as SettingsError
from splice_assets.model.settings import FitConfig, check_post_processing
from splice_assets.private.bounds import DEFAULT_BOUNDS_SHARE
from splice_assets.private.mechanism import (
    DEFAULT_COUNT_SHARE,
    DEFAULT_K,
    DEFAULT_MARGINAL_SHARE,
    DEFAULT_N_DIRECTIONS,
)

if TYPE_CHECKING:
    from splice_assets.schema import TableSchema


#: The limits of the fine tables' settings (their caps belong to the fine cell layout).
FINE_BINS = limits.Limit("fine_bins", 0, MAX_FINE_BINS, integer=True)
GRID_WEIGHT = limits.Limit("grid_weight", 1, MAX_GRID_WEIGHT, integer=True)
INTERVAL_WEIGHT = limits.Limit("interval_weight", 1, MAX_GRID_WEIGHT, integer=True)


@dataclass(frozen=True)
class MeasurementSettings:
    """The queries of the one Gaussian measurement. ``marginal_share`` of Delta^2 goes to the 1-way tables (every
    coordinate's, and a fine table of ``fine_bins`` cells or one per grid value for every numeric column, 0 = none;
    see ``fine_cells``; a per-value fine
    table counts as ``grid_weight`` tables and one of intervals as ``interval_weight``, their extra units added to
    the share out of the moments', so their cells get 1/sqrt(weight) of a coarse cell's noise and the other tables
    keep theirs), ``pair_share`` to
    the 2-way tables of every pair of coordinates from different columns (None: by the schema, more the more of its
    columns are discrete, ``defaults.default_pair_share``; ``for_schema``), the rest to the sliced Chebyshev moments
    (L directions, orders 1..k). The schema's target gets a 3-way table with every pair of other columns whose table
    has at most ``layout.MAX_TRIPLE_CELLS`` cells, at the pair weight, when they number at most ``target_triples``
    (0 = never; ``layout.triples_with_target``). With ``level_units`` (on: decisions 0064-0066) a coarse 1-way table
    of many cells counts as ``measurement.level_units`` tables, its extra units paid within the 1-way share (0066).
    ``workload``: the 3-way marginals that matter to the user (three column names each), each measured as a 3-way
    table counting ``layout.WORKLOAD_UNITS`` tables of the pair share (a quarter of a pair cell's noise), and fitted
    by the target's tilt (docs/decisions/0073)."""

    n_directions: int = DEFAULT_N_DIRECTIONS
    k: int = DEFAULT_K
    marginal_share: float = DEFAULT_MARGINAL_SHARE
    pair_share: float | None = None
    fine_bins: int = DEFAULT_FINE_BINS
    grid_weight: int = DEFAULT_GRID_WEIGHT
    interval_weight: int = DEFAULT_INTERVAL_WEIGHT
    target_triples: int = DEFAULT_TARGET_TRIPLES
    level_units: bool = DEFAULT_LEVEL_UNITS
    workload: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        limits.check_flag("level_units", self.level_units)
        object.__setattr__(self, "workload", workload_entries(self.workload))
        limits.N_DIRECTIONS.check(self.n_directions)
        limits.K.check(self.k)
        limits.MARGINAL_SHARE.check(self.marginal_share)
        if self.pair_share is not None:
            limits.PAIR_SHARE.check(self.pair_share)
        FINE_BINS.check(self.fine_bins)
        GRID_WEIGHT.check(self.grid_weight)
        INTERVAL_WEIGHT.check(self.interval_weight)
        limits.TARGET_TRIPLES.check(self.target_triples)
        if self.fine_bins % COARSE_BINS:
            raise SettingsError(f"fine_bins must be a multiple of {COARSE_BINS} (0 = none), got {self.fine_bins!r}")

    def for_schema(self, schema: TableSchema) -> MeasurementSettings:
        """These settings with the pair share resolved for ``schema`` (``defaults.default_pair_share`` where None)."""
        return self if self.pair_share is not None else dataclasses.replace(
            self, pair_share=default_pair_share(schema)
        )

    def check_relation(self, relation: Relation) -> None:
        """The moments need a share of Delta^2 left over (under add-remove the noisy count takes one too); a pair
        share left to the schema is checked once resolved."""
        count_share = DEFAULT_COUNT_SHARE if relation == Relation.ADD_REMOVE else 0.0
        if self.pair_share is not None and self.marginal_share + self.pair_share + count_share >= 1.0:
            raise SettingsError(
                f"marginal_share {self.marginal_share!r} + pair_share {self.pair_share!r} (+ the noisy count's "
                f"{count_share!r} under add-remove) must be < 1 (the moments need a share of the budget)"
            )


def workload_entries(workload: Any) -> tuple[tuple[str, str, str], ...]:
    """A workload as tuples of three distinct column names; lists (YAML, JSON, Dagster, ``a,b,c`` on the command
    line) are taken."""
    if isinstance(workload, str) or not isinstance(workload, (list, tuple)):
        raise SettingsError(f"workload must be a list of 3-way marginals (three column names each), got {workload!r}")
    entries = []
    for entry in workload:
        if isinstance(entry, str) or not isinstance(entry, (list, tuple)) or len(entry) != 3 or not all(
            isinstance(name, str) and name for name in entry
        ) or len(set(entry)) != 3:
            raise SettingsError(
                f"a workload entry is a 3-way marginal: three different column names, got {entry!r} (every 2-way "
                "table is measured already, at the pair weight)"
            )
        entries.append((entry[0], entry[1], entry[2]))
    return tuple(entries)


def check_workload(measurement: MeasurementSettings, schema: TableSchema) -> None:
    """Each workload entry names three modelled columns of ``schema`` (a datetime's parts, not the datetime), whose
    3-way table has at most ``layout.MAX_WORKLOAD_CELLS`` cells, and the 2-way tables are measured (the 3-way ones
    share their weight)."""
    from splice_assets.layout import MAX_WORKLOAD_CELLS, column_cells, layout_for

    if not measurement.workload:
        return
    if not measurement.for_schema(schema).pair_share:
        raise SettingsError(
            f"workload {[list(e) for e in measurement.workload]!r} needs the 2-way tables: pair_share is 0"
        )
    sizes = column_cells(layout_for(schema), COARSE_BINS)
    for entry in measurement.workload:
        for name in entry:
            if name not in sizes:
                parts = next((c.parts for c in schema.lowered if c.name == name), ())
                hint = (f"name its parts instead: {', '.join(parts)}" if parts
                        else f"the modelled columns are {', '.join(schema.column_names)}")
                raise SettingsError(f"workload entry {list(entry)!r}: {name!r} is not a modelled column; {hint}")
        cells = sizes[entry[0]] * sizes[entry[1]] * sizes[entry[2]]
        if cells > MAX_WORKLOAD_CELLS:
            raise SettingsError(
                f"workload entry {list(entry)!r} has {cells:,} cells, above {MAX_WORKLOAD_CELLS:,}: its counts would "
                "drown in the noise; name columns with fewer categories"
            )


@dataclass(frozen=True)
class ModelSettings:
    """The mixture: ``components`` (K), at most ``max_steps`` fitting steps, and up to ``joint_pairs`` column pairs
    modelled by one joint table per component where the noisy 2-way tables show a product start misfits."""

    components: int = FitConfig.K
    max_steps: int = FitConfig.max_steps
    joint_pairs: int = FitConfig.joint_pairs

    def __post_init__(self) -> None:
        limits.COMPONENTS.check(self.components)
        limits.MAX_STEPS.check(self.max_steps)
        limits.JOINT_PAIRS.check(self.joint_pairs)


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
        limits.LINK_LAMBDA.check(self.link_lambda)
        limits.TILT_CHI2.check(self.tilt_chi2)
        limits.FIELD_ITERATIONS.check(self.field_iterations)
        limits.FINE_THRESHOLD.check(self.fine_threshold)
        limits.check_flag("match_marginals", self.match_marginals)


@dataclass(frozen=True)
class SynthesizerSettings:
    """Everything a synthesizer is built from, validated together; public (it goes into the release)."""

    epsilon: float
    delta: float
    relation: Relation = Relation.REPLACE_ONE  # a plain string is taken (``Relation.parse``)
    seed: int = 0
    measurement: MeasurementSettings = field(default_factory=MeasurementSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    postprocessing: PostProcessingSettings = field(default_factory=PostProcessingSettings)
    bounds_share: float = DEFAULT_BOUNDS_SHARE
    max_unparseable_share: float = DEFAULT_MAX_UNPARSEABLE_SHARE

    def __post_init__(self) -> None:
        object.__setattr__(self, "relation", Relation.parse(self.relation))
        PrivacyLoss(self.epsilon, self.delta)
        limits.SEED.check(self.seed)
        self.measurement.check_relation(self.relation)
        limits.BOUNDS_SHARE.check(self.bounds_share)
        limits.MAX_UNPARSEABLE_SHARE.check(self.max_unparseable_share)
        fit_config(self)  # the fitter's own checks, at construction

    @property
    def privacy_loss(self) -> PrivacyLoss:
        return PrivacyLoss(self.epsilon, self.delta)

    def check_schema(self, schema: TableSchema) -> None:
        """The limits that need the schema: delta < 1/n_min, and a workload of its columns."""
        self.privacy_loss.check_n_min(schema.n_min)
        check_workload(self.measurement, schema)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SynthesizerSettings:
        """Settings saved by ``to_dict``. Older splices saved an ``expert`` mapping of research switches: an empty
        one is read as nothing; a non-empty one is refused, naming its keys (the product no longer fits with them).
        Measurement options removed in issue 66 (``REMOVED_MEASUREMENT_SETTINGS``) are read when off and refused when
        on, naming them."""
        data = dict(data)
        expert = data.pop("expert", None) or {}
        if expert:
            raise SettingsError(
                f"these saved settings carry research switches (expert) {sorted(expert)!r}, which the product no "
                "longer reads; fit such a variant with splice_assets.experimental"
            )
        measurement = dict(data.get("measurement", {}))
        for name, off in REMOVED_MEASUREMENT_SETTINGS.items():
            value = measurement.pop(name, off)
            if off is not None and value != off:
                raise SettingsError(
                    f"these saved settings turn on {name} = {value!r}, a measurement option removed in issue 66 "
                    "(docs/decisions/alternatives.md); refit with the release that wrote them"
                )
        return cls(
            **{k: v for k, v in data.items() if k not in ("measurement", "model", "postprocessing")},
            measurement=MeasurementSettings(**measurement),
            model=ModelSettings(**data.get("model", {})),
            postprocessing=PostProcessingSettings(**data.get("postprocessing", {})),
        )

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> SynthesizerSettings:
        """The settings from one flat mapping of their field names (``k``, ``components``, ``tilt_chi2``...: the
        names of ``ReleaseSettings``, ``ReleaseConfig`` and the CLI's options), by name; names of no settings field
        are ignored, missing ones take their defaults."""
        def pick(group: type[Any]) -> dict[str, Any]:
            return {f.name: values[f.name] for f in dataclasses.fields(group) if f.name in values}

        top = {k: v for k, v in pick(cls).items() if k not in _GROUPS}
        return cls(**top, measurement=MeasurementSettings(**pick(MeasurementSettings)),
                   model=ModelSettings(**pick(ModelSettings)),
                   postprocessing=PostProcessingSettings(**pick(PostProcessingSettings)))


_GROUPS = ("measurement", "model", "postprocessing")

#: Measurement settings removed in issue 66, with the value that meant off (None: read only with the others off):
#: pair selection (docs/decisions/alternatives.md) and the second fine table (docs/decisions/0017).
REMOVED_MEASUREMENT_SETTINGS: dict[str, float | None] = {"pairs_per_coordinate": 0, "selection_share": None,
                                                         "fine_split": 0}


def flat_setting_names() -> frozenset[str]:
    """The names ``SynthesizerSettings.from_flat`` reads."""
    groups = (SynthesizerSettings, MeasurementSettings, ModelSettings, PostProcessingSettings)
    return frozenset(f.name for group in groups for f in dataclasses.fields(group) if f.name not in _GROUPS)


def fit_config(settings: SynthesizerSettings, threads: int | None = 1) -> FitConfig:
    """The one mapping from the settings to the fitter's configuration (its other fields at their defaults)."""
    m, p = settings.model, settings.postprocessing
    config = FitConfig(
        K=m.components, max_steps=m.max_steps, joint_pairs=m.joint_pairs, seed=settings.seed,
        tilt_chi2=p.tilt_chi2, link_lambda=p.link_lambda, field_iterations=p.field_iterations, threads=threads,
        fine_threshold=p.fine_threshold,
    )
    check_post_processing(config)
    return config
