"""Run configuration of a release: the Dagster face of the one settings model.

The fields are ``ReleaseSettings``'s (the library's settings model, ``splice_assets.config``, plus where the data is
and what the release does with it), with its defaults; the one validator builds a ``ReleaseSettings``, so every value
is checked against its limit (``splice_assets.limits``) with the message every other entry point gives. When the
dataset's schema is found, the limits that need it (delta < 1/n_min) are checked at launch too.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import dagster as dg
from pydantic import Field, ValidationError, field_validator, model_validator

from splice_assets import limits
from splice_assets.config import Relation
from splice_assets.datasets import schema_path
from splice_assets.defaults import DEFAULT_PAIR_SHARE, DISCRETE_PAIR_SHARE
from splice_assets.private.row_count import is_url_or_glob
from splice_assets.release.settings import ReleaseSettings
from splice_assets.schema import load_schema

#: The defaults of every field: those of the settings model.
_DEFAULT = ReleaseSettings


class ReleaseConfig(dg.Config):
    """Everything a release needs. Only ``dataset`` matters for the bundled demo; the rest has defaults."""

    #: The deployment's folder of schema files (``release_config_in``), None: ``datasets.schema_dir()``. A class
    #: setting, not a field: no run config can point a release at another folder.
    schema_folder: ClassVar[Path | None] = None

    dataset: str = Field(default=_DEFAULT.dataset, description="Schema name: schemas/<dataset>.yaml.")
    schema_version: int | None = Field(default=None, description="Expected schema version (drift check).")
    input_path: str = Field(default="", description="CSV (optionally .gz) or Parquet file; empty = bundled demo.")
    epsilon: float = Field(default=_DEFAULT.epsilon,
                           description=f"Privacy loss epsilon of this release: {limits.EPSILON.text}.")
    delta: float = Field(default=_DEFAULT.delta, description="Privacy loss delta; must be < 1/n_min of the schema.")
    relation: str = Field(  # a ``Relation``'s value: Dagster's config types and run storage take plain strings
        default=_DEFAULT.relation.value,
        description="Neighbouring relation of the guarantee: 'replace-one' (n public) or 'add-remove' (n private, "
        "as AIM / MST; a noisy n is released). One dataset's ledger never mixes the two.",
    )
    k: int = Field(default=_DEFAULT.k, description=f"Chebyshev order per direction: {limits.K.text}.")
    n_directions: int = Field(default=_DEFAULT.n_directions,
                              description=f"Number of random directions L: {limits.N_DIRECTIONS.text}.")
    components: int = Field(default=_DEFAULT.components,
                            description=f"Mixture components K: {limits.COMPONENTS.text}.")
    max_steps: int = Field(default=_DEFAULT.max_steps,
                           description="Upper bound on fitting steps (convergence stops earlier).")
    n_synthetic: int = Field(default=0, description=f"Synthetic rows to sample, {limits.N_SYNTHETIC.text}; 0 = as "
                             "many as the input.")
    seed: int = Field(default=0, description="Public seed: directions, initialisation, sampling, holdout split.")
    holdout_fraction: float = Field(
        default=_DEFAULT.holdout_fraction,
        description=f"Share of rows kept out of measurement for the report: {limits.HOLDOUT_FRACTION.text}.",
    )
    bounds_share: float = Field(
        default=_DEFAULT.bounds_share,
        description="Share of the release's Gaussian privacy (1/z^2) spent on DP bounds for schema columns with "
        "`bounds: auto` (unused otherwise); the measurement's noise grows by 1/sqrt(1 - share).",
    )
    max_unparseable_share: float = Field(
        default=_DEFAULT.max_unparseable_share,
        description="Most share of a column's non-empty cells that may fail to parse (numbers) or be undeclared "
        "categories (without `other`); above it the release is refused before any charge, naming the column.",
    )
    match_marginals: bool = Field(
        default=_DEFAULT.match_marginals,
        description="Re-map sampled columns onto the noisy 1-way marginals (rank-preserving).",
    )
    marginal_share: float = Field(
        default=_DEFAULT.marginal_share,
        description="Share of the sensitivity budget (Delta^2) given to noisy 1-way marginals; 0 = off.",
    )
    pair_share: float | None = Field(
        default=None,
        description=f"Share of Delta^2 given to noisy 2-way marginals of every coordinate pair; 0 = off. Unset: "
        f"{DEFAULT_PAIR_SHARE:g} plus {DISCRETE_PAIR_SHARE - DEFAULT_PAIR_SHARE:g} times the schema's share of "
        "discrete columns.",
    )
    tilt_chi2: float = Field(
        default=_DEFAULT.tilt_chi2,
        description="Cell tilt toward the noisy 1-/2-way tables: chi^2 per cell at which it stops (1 = the noise "
        "level); 0 = off. Post-processing.",
    )
    link_lambda: float = Field(
        default=_DEFAULT.link_lambda,
        description="Linked coordinates: Goodman-Kruskal lambda of a noisy 2-way table at or above which its "
        "discrete target is redrawn from it; 0 = off. Post-processing.",
    )
    joint_pairs: int = Field(
        default=_DEFAULT.joint_pairs,
        description="Most coordinate pairs modelled by one joint table per component, chosen where the noisy 2-way "
        "table is misfit by a product start well above the noise; 0 = none.",
    )
    field_iterations: int = Field(
        default=_DEFAULT.field_iterations,
        description="Pairwise field: fit iterations of the maximum-entropy field over the measured cells that "
        "re-imposes the tilted mixture's 1-/2-way tables and is sampled from; 0 = off (faster). Post-processing.",
    )

    workload: list[list[str]] = Field(
        default=[],
        description="3-way marginals that matter (three column names each, e.g. [[age, sex, income]]): each is "
        "measured as a 3-way table with a quarter of a 2-way cell's noise (the other tables get more), and the "
        "model is tilted toward it.",
    )

    @field_validator("relation")
    @classmethod
    def _relation(cls, value: str) -> str:
        return Relation.parse(value).value

    @model_validator(mode="after")
    def _settings(self) -> ReleaseConfig:
        # The settings model's validation (every limit, with its message), at launch: a run that cannot succeed is
        # never started. Then what needs the public schema (an unknown dataset; delta < 1/n_min) and a local input
        # file that is not there (a glob or URL is left to the first step).
        settings = self.settings()
        try:
            schema = load_schema(self.schema_file())
        except OSError as exc:  # no schema file: pydantic reports a ValueError with its message
            raise ValueError(str(exc)) from None
        settings.synthesizer(schema)
        missing = missing_input(self.input_path)
        if missing:
            raise ValueError(missing)
        return self

    def settings(self) -> ReleaseSettings:
        return ReleaseSettings(**self.model_dump())

    def schema_file(self) -> Path:
        """The dataset's schema file in the deployment's schema folder."""
        return schema_path(self.dataset, type(self).schema_folder)


def release_config_in(schema_folder: Path | None) -> type[ReleaseConfig]:
    """``ReleaseConfig`` reading its schemas from ``schema_folder``, a deployment setting given where the definitions
    are built (``definitions.build_definitions``); None: ``ReleaseConfig`` itself (``datasets.schema_dir()``)."""
    if schema_folder is None:
        return ReleaseConfig

    class ReleaseConfigIn(ReleaseConfig):
        __doc__ = ReleaseConfig.__doc__

    ReleaseConfigIn.schema_folder = Path(schema_folder)
    return ReleaseConfigIn


def missing_input(input_path: str) -> str | None:
    """Why a local ``input_path`` cannot be read (nothing there), or None; empty (the demo), a glob or a URL pass."""
    if not input_path or is_url_or_glob(input_path):
        return None
    path = Path(input_path).expanduser()
    if path.is_file() or path.is_dir():  # a folder: a partitioned input
        return None
    return f"input_path: no file or folder at {str(path)!r}"


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
