"""The settings of one release, as a plain frozen value: what the Dagster run config and the CLI produce, what
``release.json`` records (minus the input's path) and what a refit reads back.

The library's settings (epsilon, delta, relation, k, L, K, the shares, post-processing) are those of the one
settings model (``splice_assets.config``), under the same flat names, defaults and limits: ``synthesizer_settings``
builds it by name (``SynthesizerSettings.from_flat``) and validates it on construction. The release adds where the
data is and what the release does with it (``RELEASE_ONLY``), each checked against its limit in
``splice_assets.limits``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from splice_assets import limits
from splice_assets.config import (
    MeasurementSettings,
    ModelSettings,
    PostProcessingSettings,
    Relation,
    SynthesizerSettings,
    workload_entries,
)
from splice_assets.datasets import DEMO_DATASET, demo_data_path
from splice_assets.defaults import DEFAULT_HOLDOUT_FRACTION, DEFAULT_MAX_UNPARSEABLE_SHARE
from splice_assets.private.bounds import DEFAULT_BOUNDS_SHARE
from splice_assets.schema import TableSchema

if TYPE_CHECKING:  # the api (torch) loads when a synthesizer is built: `splice release` checks the settings and
    # its input before that (``release.input_check``)
    from splice_assets.api import Synthesizer

#: The release's own settings, beside the library's.
RELEASE_ONLY = frozenset({"dataset", "schema_version", "input_path", "n_synthetic", "holdout_fraction"})


@dataclass(frozen=True)
class ReleaseSettings:
    """The validated config as a plain frozen value carried along the asset chain (public). Every field not in
    ``RELEASE_ONLY`` is a field of the library's settings model, with its default."""

    dataset: str = DEMO_DATASET
    schema_version: int | None = None
    input_path: str = ""
    epsilon: float = 1.0
    delta: float = 1e-9
    k: int = MeasurementSettings.k
    n_directions: int = MeasurementSettings.n_directions
    components: int = ModelSettings.components
    max_steps: int = ModelSettings.max_steps
    n_synthetic: int = 0  # 0: as many as measured
    seed: int = 0
    holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION
    bounds_share: float = DEFAULT_BOUNDS_SHARE
    match_marginals: bool = PostProcessingSettings.match_marginals
    marginal_share: float = MeasurementSettings.marginal_share
    pair_share: float | None = None  # None: by the schema (defaults.default_pair_share)
    tilt_chi2: float = PostProcessingSettings.tilt_chi2
    link_lambda: float = PostProcessingSettings.link_lambda
    joint_pairs: int = ModelSettings.joint_pairs
    field_iterations: int = PostProcessingSettings.field_iterations
    relation: Relation = Relation.REPLACE_ONE  # a plain string is taken (``Relation.parse``)
    max_unparseable_share: float = DEFAULT_MAX_UNPARSEABLE_SHARE
    workload: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        limits.check_dataset_name(self.dataset)
        object.__setattr__(self, "workload", workload_entries(self.workload))  # release.json holds lists
        object.__setattr__(self, "relation", Relation.parse(self.relation))
        limits.N_SYNTHETIC.check(self.n_synthetic)
        limits.HOLDOUT_FRACTION.check(self.holdout_fraction)
        self.synthesizer_settings()  # every library limit, with the library's message

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> ReleaseSettings:
        """The settings of a release from its public ``parameters`` (release.json): unknown keys are ignored,
        settings a release predates take the value that reproduces it (no joint parts, no field)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {"joint_pairs": 0, "field_iterations": 0, "input_path": "", "schema_version": None}
        values.update({k: v for k, v in parameters.items() if k in known})
        return cls(**values)

    def resolved_input(self) -> str:
        return self.input_path or str(demo_data_path())

    def synthesizer_settings(self) -> SynthesizerSettings:
        """The one mapping from release settings to the library's, by name (validated on construction)."""
        return SynthesizerSettings.from_flat(dataclasses.asdict(self))

    def synthesizer(self, schema: TableSchema) -> Synthesizer:
        """The release's synthesizer for ``schema``: also checks the limits that need it (delta < 1/n_min)."""
        from splice_assets.api import Synthesizer

        return Synthesizer.from_settings(schema, self.synthesizer_settings())

