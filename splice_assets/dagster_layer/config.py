"""Run configuration of a release, validated where it enters (messages quote the bad value)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field, ValidationError, field_validator, model_validator

from splice_assets.datasets import DEMO_DATASET
from splice_assets.defaults import DEFAULT_HOLDOUT_FRACTION, DEFAULT_PAIR_SHARE, DISCRETE_PAIR_SHARE
from splice_assets.measurement import (
    RELATION_REPLACE_ONE,
)
from splice_assets.model.fit import FitConfig
from splice_assets.private import preflight
from splice_assets.private.bounds import DEFAULT_BOUNDS_SHARE
from splice_assets.private.mechanism import (
    DEFAULT_K,
    DEFAULT_MARGINAL_SHARE,
    DEFAULT_N_DIRECTIONS,
)
from splice_assets.private.validation import DEFAULT_MAX_UNPARSEABLE_SHARE
from splice_assets.release.settings import ReleaseSettings


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
    max_steps: int = Field(default=600, description="Upper bound on fitting steps (convergence stops earlier).")
    n_synthetic: int = Field(default=0, description="Synthetic rows to sample; 0 = as many as the input.")
    seed: int = Field(default=0, description="Public seed: directions, initialisation, sampling, holdout split.")
    holdout_fraction: float = Field(
        default=DEFAULT_HOLDOUT_FRACTION, description="Share of rows kept out of measurement for the report."
    )
    bounds_share: float = Field(
        default=DEFAULT_BOUNDS_SHARE, gt=0.0, lt=1.0,
        description="Share of the release's Gaussian privacy (1/z^2) spent on DP bounds for schema columns with "
        "`bounds: auto` (unused otherwise); the measurement's noise grows by 1/sqrt(1 - share).",
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
    pair_share: float | None = Field(
        default=None,
        description=f"Share of Delta^2 given to noisy 2-way marginals of every coordinate pair; 0 = off. Unset: "
        f"{DEFAULT_PAIR_SHARE:g} plus {DISCRETE_PAIR_SHARE - DEFAULT_PAIR_SHARE:g} times the schema's share of "
        "discrete columns.",
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

    @field_validator("dataset")
    @classmethod
    def _dataset_name(cls, value: str) -> str:
        # The name picks the schema file and the release folder (<artifact dir>/<dataset>/): a path would move both.
        if value in {"", ".", ".."} or Path(value).name != value:
            raise ValueError(f"dataset must be a schema name (schemas/<dataset>.yaml), not a path, got {value!r}")
        return value

    @field_validator("n_synthetic")
    @classmethod
    def _rows(cls, value: int) -> int:
        if not 0 <= value <= preflight.MAX_SYNTHETIC_ROWS:
            raise ValueError(f"n_synthetic must be in [0, {preflight.MAX_SYNTHETIC_ROWS}], got {value!r}")
        return value

    @field_validator("holdout_fraction")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if not 0.0 <= value < 0.9:
            raise ValueError(f"holdout_fraction must be in [0, 0.9), got {value!r}")
        return value

    @model_validator(mode="after")
    def _library_settings(self) -> ReleaseConfig:
        # The library's own validation (limits, shares, post-processing), at launch: a run that cannot succeed
        # is never started, and the message is the library's, quoting the value.
        self.settings().synthesizer_settings()
        return self

    def settings(self) -> ReleaseSettings:
        return ReleaseSettings(**self.model_dump())


def settings_error(exc: ValidationError) -> str:
    """A pydantic error as one line per problem, naming the setting and quoting the value (no pydantic banner)."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        message = str(error.get("msg", "")).removeprefix("Value error, ")
        if error.get("type") != "value_error" and "input" in error:
            message += f", got {error['input']!r}"  # pydantic's own checks (e.g. gt=0) do not quote the value
        problems.append(message if not where or message.startswith(where) else f"{where}: {message}")
    return "; ".join(problems) or str(exc)
