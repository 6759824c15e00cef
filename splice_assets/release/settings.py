"""The settings of one release, as a plain frozen value: what the Dagster run config and the CLI produce, what
``release.json`` records (minus the input's path) and what a refit reads back.

``synthesizer_settings`` is the one mapping from release settings to the library's ``SynthesizerSettings``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from splice_assets.api import Synthesizer
from splice_assets.config import (
    MeasurementSettings,
    ModelSettings,
    PostProcessingSettings,
    SynthesizerSettings,
)
from splice_assets.datasets import demo_data_path
from splice_assets.measurement import RELATION_REPLACE_ONE
from splice_assets.model.fit import FitConfig
from splice_assets.private.validation import DEFAULT_MAX_UNPARSEABLE_SHARE
from splice_assets.schema import TableSchema


@dataclass(frozen=True)
class ReleaseSettings:
    """The validated config as a plain frozen value carried along the asset chain (public)."""

    dataset: str
    schema_version: int | None
    input_path: str
    epsilon: float
    delta: float
    k: int
    n_directions: int
    components: int
    max_steps: int
    n_synthetic: int
    seed: int
    holdout_fraction: float
    bounds_share: float
    match_marginals: bool
    marginal_share: float
    pair_share: float | None  # None: by the schema (defaults.default_pair_share)
    tilt_chi2: float = FitConfig.tilt_chi2
    link_lambda: float = FitConfig.link_lambda
    joint_pairs: int = FitConfig.joint_pairs
    field_iterations: int = FitConfig.field_iterations
    relation: str = RELATION_REPLACE_ONE
    max_unparseable_share: float = DEFAULT_MAX_UNPARSEABLE_SHARE

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
        """The one mapping from release settings to the library's (validated on construction)."""
        return SynthesizerSettings(
            self.epsilon, self.delta, self.relation, self.seed,
            MeasurementSettings(self.n_directions, self.k, self.marginal_share, self.pair_share),
            ModelSettings(self.components, self.max_steps, self.joint_pairs),
            PostProcessingSettings(self.link_lambda, self.tilt_chi2, self.field_iterations, self.match_marginals),
            self.bounds_share, self.max_unparseable_share,
        )

    def synthesizer(self, schema: TableSchema) -> Synthesizer:
        return Synthesizer.from_settings(schema, self.synthesizer_settings())
