"""Experiment hooks for the bench and research: fits with the fitter's own ``FitConfig`` fields overridden.

Not part of the product. The product's settings are the ``MeasurementSettings``, ``ModelSettings`` and
``PostProcessingSettings`` groups of ``splice_assets.config``; every other ``FitConfig`` field (``R``,
``numeric_model``, ``target_tilt_chi2``, ``marginal_tail_z``...) is a research switch, reachable only here. No release
path (the api, the CLI, the Dagster layer, release/, planning, config) imports this module (an import-linter
contract in pyproject.toml), and what is fitted here is neither saved with its overrides nor released: ``save`` writes
the product settings only, and ``refit`` returns a product ``Synthesizer``.

- ``ExperimentalSynthesizer(schema, epsilon, delta, ..., fit_overrides={...})``: a ``Synthesizer`` whose model is
  fitted with ``fit_overrides`` applied last to the settings' ``FitConfig`` (checked at construction);
- ``fit_variant(synth, threads=1, **overrides)``: a new synthesizer fitted to ``synth``'s noisy measurement with
  those overrides (post-processing: zero privacy cost).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from splice_assets.api import NotFitted, Synthesizer
from splice_assets.config import SettingsError, SynthesizerSettings, fit_config
from splice_assets.model.settings import FitConfig, check_post_processing

if TYPE_CHECKING:
    from splice_assets.schema import TableSchema

FIT_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(FitConfig))


def override_fit_config(config: FitConfig, overrides: Mapping[str, Any]) -> FitConfig:
    """``config`` with ``overrides`` (``FitConfig`` fields, by name) applied, checked as the fitter checks it."""
    unknown = sorted(set(overrides) - FIT_CONFIG_FIELDS)
    if unknown:
        raise SettingsError(f"fit overrides must be FitConfig fields, got {unknown!r}")
    config = dataclasses.replace(config, **overrides)
    check_post_processing(config)
    return config


class ExperimentalSynthesizer(Synthesizer):
    """A ``Synthesizer`` fitted with ``FitConfig`` overrides (research only; see the module's docstring)."""

    def __init__(self, *args: Any, fit_overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fit_overrides: dict[str, Any] = dict(fit_overrides or {})
        self._fit_config(1)  # the overrides' checks, at construction

    @classmethod
    def with_settings(cls, schema: TableSchema, settings: SynthesizerSettings,
                      fit_overrides: Mapping[str, Any] | None = None) -> ExperimentalSynthesizer:
        s = settings
        return cls(schema, s.epsilon, s.delta, s.relation, s.seed, s.measurement, s.model, s.postprocessing,
                   s.bounds_share, s.max_unparseable_share, fit_overrides=fit_overrides)

    def _fit_config(self, threads: int | None) -> FitConfig:
        return override_fit_config(fit_config(self.settings, threads), self.fit_overrides)


def fit_variant(synth: Synthesizer, threads: int | None = 1, /, **overrides: Any) -> ExperimentalSynthesizer:
    """A new synthesizer fitted to ``synth``'s noisy measurement (and DP bounds) with its settings and ``overrides``
    (``FitConfig`` fields) applied last: post-processing, zero privacy cost."""
    if synth.measurement is None:
        raise NotFitted("measure (or load) a synthesizer before fitting a variant of it")
    child = ExperimentalSynthesizer.with_settings(synth.schema, synth.settings, overrides)
    child.measurement, child.bounds = synth.measurement, synth.bounds
    child.fit_model(threads)
    return child
