"""Research switches (issue 66): the product has its settings groups only; ``splice_assets.experimental`` fits with
``FitConfig`` overrides for the bench, and saved settings never carry them."""

from __future__ import annotations

import json

import pytest
from test_api import FAST, SCHEMA, table  # the same toy table and fast settings

from splice_assets import Synthesizer
from splice_assets.api import SETTINGS_FILE, NotFitted
from splice_assets.config import SettingsError, SynthesizerSettings
from splice_assets.experimental import ExperimentalSynthesizer, fit_variant


def test_the_product_has_no_expert_settings():
    with pytest.raises(TypeError, match="expert"):
        Synthesizer(SCHEMA, 1.0, 1e-9, expert={"R": 2})  # type: ignore[call-arg]
    assert "expert" not in SynthesizerSettings(1.0, 1e-9).to_dict()
    with pytest.raises(TypeError, match="expert"):
        SynthesizerSettings(1.0, 1e-9, expert={})  # type: ignore[call-arg]


def test_saved_settings_with_an_empty_expert_are_read_and_a_non_empty_one_is_refused_by_name():
    saved = SynthesizerSettings(1.0, 1e-9).to_dict()
    assert SynthesizerSettings.from_dict(saved | {"expert": {}}) == SynthesizerSettings(1.0, 1e-9)
    with pytest.raises(SettingsError, match=r"research switches \(expert\) \['R', 'numeric_model'\]"):
        SynthesizerSettings.from_dict(saved | {"expert": {"numeric_model": "gaussian", "R": 2}})


def test_overrides_are_fit_config_fields_checked_at_construction():
    with pytest.raises(SettingsError, match=r"fit overrides must be FitConfig fields, got \['not_a_field'\]"):
        ExperimentalSynthesizer(SCHEMA, 1.0, 1e-9, fit_overrides={"not_a_field": 1})
    with pytest.raises(ValueError, match="R must be an integer >= 0, got -1"):
        ExperimentalSynthesizer(SCHEMA, 1.0, 1e-9, fit_overrides={"R": -1})
    assert ExperimentalSynthesizer(SCHEMA, 1.0, 1e-9)._fit_config(1) == Synthesizer(SCHEMA, 1.0, 1e-9)._fit_config(1)


def test_a_variant_refits_the_same_measurement_with_its_overrides_and_saves_product_settings_only(tmp_path):
    with pytest.raises(NotFitted):
        fit_variant(Synthesizer(SCHEMA, 1.0, 1e-9, **FAST), R=0)
    synth = Synthesizer(SCHEMA, 1.0, 1e-9, **FAST).fit(table(), ledger=None)
    variant = fit_variant(synth, 1, R=0, max_steps=20)
    assert variant.measurement is synth.measurement and variant.model is not None
    assert (variant._fit_config(1).R, variant._fit_config(1).max_steps) == (0, 20)
    assert variant.settings == synth.settings  # the product settings are unchanged
    saved = json.loads((variant.save(tmp_path / "variant") / SETTINGS_FILE).read_text())
    assert saved["settings"] == json.loads(json.dumps(synth.settings.to_dict()))  # no overrides, no expert
