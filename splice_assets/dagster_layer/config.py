"""Run configuration of a release, validated where it enters (messages quote the bad value)."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg
from pydantic import Field, ValidationInfo, field_validator, model_validator

from splice_assets.datasets import DEMO_DATASET, demo_data_path
from splice_assets.measurement import (
    RELATION_ADD_REMOVE,
    RELATION_REPLACE_ONE,
    RELATIONS,
)
from splice_assets.model.fit import NUMERIC_MODELS, FitConfig
from splice_assets.postprocess.chain import check_post_processing
from splice_assets.private import preflight
from splice_assets.private.mechanism import (
    DEFAULT_COUNT_SHARE,
    DEFAULT_K,
    DEFAULT_MARGINAL_SHARE,
    DEFAULT_N_DIRECTIONS,
    DEFAULT_PAIR_SHARE,
)
from splice_assets.private.validation import DEFAULT_MAX_UNPARSEABLE_SHARE


class ReleaseConfig(dg.Config):
    """Everything a release needs. Only ``dataset`` matters for the bundled demo; the rest has defaults."""

    dataset: str = Field(default=DEMO_DATASET, description="Schema name: schemas/<dataset>.yaml.")
    schema_version: int | None = Field(default=None, description="Expected schema version (drift check).")
    input_path: str = Field(default="", description="CSV (optionally .gz) or Parquet file; empty = bundled demo.")
    epsilon: float = Field(default=1.0, description="Privacy loss epsilon of this release's measurement.")
    delta: float = Field(default=1e-9, description="Privacy loss delta; must be < 1/n_min of the schema.")
    relation: str = Field(
        default=RELATION_REPLACE_ONE,
        description="Neighbouring relation of the guarantee: 'replace-one' (n public) or 'add-remove' (n private, "
        "as AIM / MST; a noisy n is released). One dataset's ledger never mixes the two.",
    )
    k: int = Field(default=DEFAULT_K, description="Chebyshev order per direction.")
    n_directions: int = Field(default=DEFAULT_N_DIRECTIONS, description="Number of random directions L.")
    components: int = Field(default=FitConfig.K, description="Mixture components K.")
    rank: int = Field(default=FitConfig.R, description="Low-rank covariance factor R per component (gaussian only).")
    numeric_model: str = Field(
        default=FitConfig.numeric_model,
        description="How a component holds numeric columns: 'histogram' (public bins) or 'gaussian' (the paper's).",
    )
    max_steps: int = Field(default=600, description="Upper bound on fitting steps (convergence stops earlier).")
    n_synthetic: int = Field(default=0, description="Synthetic rows to sample; 0 = as many as the input.")
    seed: int = Field(default=0, description="Public seed: directions, initialisation, sampling, holdout split.")
    holdout_fraction: float = Field(default=0.2, description="Share of rows kept out of measurement for the report.")
    bounds_epsilon_share: float = Field(
        default=0.1,
        description="Share of epsilon spent on DP bounds for schema columns with `bounds: auto` (unused otherwise).",
    )
    max_unparseable_share: float = Field(
        default=DEFAULT_MAX_UNPARSEABLE_SHARE,
        description="Most share of a column's non-empty cells that may fail to parse (numbers) or be undeclared "
        "categories (without `other`); above it the release is refused before any charge, naming the column.",
    )
    match_marginals: bool = Field(
        default=True, description="Re-map sampled columns onto the noisy 1-way marginals (rank-preserving)."
    )
    marginal_share: float = Field(
        default=DEFAULT_MARGINAL_SHARE,
        description="Share of the sensitivity budget (Delta^2) given to noisy 1-way marginals; 0 = off.",
    )
    pair_share: float = Field(
        default=DEFAULT_PAIR_SHARE,
        description="Share of Delta^2 given to noisy 2-way marginals of every coordinate pair; 0 = off.",
    )
    tilt_chi2: float = Field(
        default=FitConfig.tilt_chi2,
        description="Cell tilt toward the noisy 1-/2-way tables: chi^2 per cell at which it stops (1 = the noise "
        "level); 0 = off. Post-processing.",
    )
    link_lambda: float = Field(
        default=FitConfig.link_lambda,
        description="Linked coordinates: Goodman-Kruskal lambda of a noisy 2-way table at or above which its "
        "discrete target is redrawn from it; 0 = off. Post-processing.",
    )
    joint_pairs: int = Field(
        default=FitConfig.joint_pairs,
        description="Most coordinate pairs modelled by one joint table per component, chosen where the noisy 2-way "
        "table is misfit by a product start well above the noise; 0 = none.",
    )
    field_iterations: int = Field(
        default=FitConfig.field_iterations,
        description="Pairwise field: fit iterations of the maximum-entropy field over the measured cells that "
        "re-imposes the tilted mixture's 1-/2-way tables and is sampled from; 0 = off (faster). Post-processing.",
    )

    @field_validator("max_steps")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be >= 1, got {value!r}")
        return value

    @field_validator("joint_pairs", "field_iterations")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be >= 0, got {value!r}")
        return value

    @model_validator(mode="after")
    def _within_limits(self) -> "ReleaseConfig":
        # The library's pre-flight limits, at launch: a run that cannot succeed is never started.
        preflight.check_settings(
            self.epsilon, self.delta, self.k, self.n_directions, self.components, self.rank, self.n_synthetic
        )
        return self

    @field_validator("marginal_share", "pair_share", "bounds_epsilon_share")
    @classmethod
    def _share(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"a share must be in [0, 1), got {value!r}")
        return value

    @field_validator("relation", "numeric_model")
    @classmethod
    def _one_of(cls, value: str, info: ValidationInfo) -> str:
        allowed = {"relation": RELATIONS, "numeric_model": NUMERIC_MODELS}[info.field_name]
        if value not in allowed:
            raise ValueError(f"{info.field_name} must be one of {allowed}, got {value!r}")
        return value

    @field_validator("tilt_chi2", "link_lambda")
    @classmethod
    def _post_processing(cls, value: float, info: ValidationInfo) -> float:
        check_post_processing(FitConfig(**{info.field_name: value}))  # the library's own check
        return value

    @field_validator("max_unparseable_share")
    @classmethod
    def _unparseable_share(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"max_unparseable_share must be in [0, 1], got {value!r}")
        return value

    @field_validator("holdout_fraction")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if not 0.0 <= value < 0.9:
            raise ValueError(f"holdout_fraction must be in [0, 0.9), got {value!r}")
        return value

    @model_validator(mode="after")
    def _moments_keep_a_share(self) -> "ReleaseConfig":
        count_share = DEFAULT_COUNT_SHARE if self.relation == RELATION_ADD_REMOVE else 0.0
        if self.marginal_share + self.pair_share + count_share >= 1.0:
            raise ValueError(
                f"marginal_share {self.marginal_share!r} + pair_share {self.pair_share!r} (+ the noisy count's "
                f"{count_share!r} under add-remove) must be < 1 (the moments need a share of the budget)"
            )
        return self

    def settings(self) -> "ReleaseSettings":
        return ReleaseSettings(**self.model_dump())


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
    rank: int
    numeric_model: str
    max_steps: int
    n_synthetic: int
    seed: int
    holdout_fraction: float
    bounds_epsilon_share: float
    match_marginals: bool
    marginal_share: float
    pair_share: float
    tilt_chi2: float = FitConfig.tilt_chi2
    link_lambda: float = FitConfig.link_lambda
    joint_pairs: int = FitConfig.joint_pairs
    field_iterations: int = FitConfig.field_iterations
    relation: str = RELATION_REPLACE_ONE
    max_unparseable_share: float = DEFAULT_MAX_UNPARSEABLE_SHARE

    def resolved_input(self) -> str:
        return self.input_path or str(demo_data_path())
