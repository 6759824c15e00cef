"""Pair selection and the second fine table left the code in issue 66 (docs/decisions/alternatives.md, 0017): what was
stored before still loads with them off, and is refused, naming the option, with them on."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from test_sampling import _model

from splice_assets.config import MeasurementSettings, SynthesizerSettings
from splice_assets.limits import SettingsError
from splice_assets.measurement import Measurement
from splice_assets.postprocess.fine_tables import FineTables
from splice_assets.sampling import load_model, save_model


def _rewrite(path, **fields):
    meta = json.loads(path.read_text())
    meta.update(fields)
    path.write_text(json.dumps(meta))


def test_the_settings_have_no_removed_fields():
    names = {f.name for f in dataclasses.fields(MeasurementSettings)}
    assert not names & {"pairs_per_coordinate", "selection_share", "fine_split"}


def test_saved_settings_with_the_options_off_load_and_on_are_refused_by_name():
    saved = SynthesizerSettings(1.0, 1e-9).to_dict()
    old = saved | {"measurement": saved["measurement"] | {"pairs_per_coordinate": 0.0, "selection_share": 0.1,
                                                          "fine_split": 0}}
    assert SynthesizerSettings.from_dict(old) == SynthesizerSettings(1.0, 1e-9)
    for name, value in (("pairs_per_coordinate", 2.0), ("fine_split", 16)):
        on = old | {"measurement": old["measurement"] | {name: value}}
        with pytest.raises(SettingsError, match=name):
            SynthesizerSettings.from_dict(on)


def test_a_stored_measurement_with_the_options_off_loads_and_on_is_refused_by_name(tmp_path):
    measurement = Measurement(dataset="t", schema_version=1, seed=0, n_directions=2, k=2, n=100, d=1, scaling="ball",
                              noisy_moments=np.zeros((2, 2)), sigma=0.1, sensitivity=0.1, epsilon=1.0, delta=1e-6)
    _, meta = measurement.save(tmp_path / "m")
    assert "fine_split" not in json.loads(meta.read_text())
    _rewrite(meta, fine_split=0, pair_candidates=0)
    assert Measurement.load(tmp_path / "m").sigma == 0.1
    for name, option in (("pair_candidates", "pair selection"), ("fine_split", "second fine table")):
        _rewrite(meta, **{"fine_split": 0, "pair_candidates": 0} | {name: 28})
        with pytest.raises(ValueError, match=option):
            Measurement.load(tmp_path / "m")


def test_a_model_written_with_split_0_loads_and_with_a_second_fine_table_is_refused(tmp_path):
    model = dataclasses.replace(_model(), fine=FineTables(np.full(8, 0.125), 0.01, 256))
    _, meta_path = save_model(model, tmp_path / "model")
    meta = json.loads(meta_path.read_text())
    assert "split" not in meta["fine"]
    _rewrite(meta_path, fine=meta["fine"] | {"split": 0})
    assert load_model(tmp_path / "model").fine is not None
    _rewrite(meta_path, fine=meta["fine"] | {"split": 16})
    with pytest.raises(ValueError, match="split"):
        load_model(tmp_path / "model")
