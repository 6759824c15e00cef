"""The target's 3-way tables: the public query family, their exact counts, their place in the plan's accounting,
the tilt toward them, and their persistence. The sensitivity through the release job is checked in
``test_release_path_neighbours`` (its toy schema has a target)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pandas as pd
import pytest

from splice_assets import MeasurementSettings, ModelSettings, Synthesizer
from splice_assets.experimental import ExperimentalSynthesizer
from splice_assets.layout import layout_for, marginal_cells, triple_sizes, triples_with_target
from splice_assets.measurement import Measurement
from splice_assets.private import measuring
from splice_assets.private.encoding import encode
from splice_assets.private.statistics import table_counts
from splice_assets.sampling import load_model, sample_table, save_model, target_counts
from splice_assets.schema import parse_schema

SCHEMA = parse_schema({
    "name": "toy_triples", "version": 1, "n_min": 100, "target": "y",
    "columns": [
        {"name": "a", "kind": "categorical", "categories": ["0", "1"]},
        {"name": "b", "kind": "categorical", "categories": ["0", "1"]},
        {"name": "level", "kind": "continuous", "bounds": [0, 10]},
        {"name": "y", "kind": "categorical", "categories": ["no", "yes"]},
    ],
})


def xor_table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """y = a XOR b: every pair of columns is independent, so only a 3-way table shows the rule."""
    a, b = rng.integers(0, 2, n), rng.integers(0, 2, n)
    return pd.DataFrame({"a": a.astype(str), "b": b.astype(str), "level": rng.uniform(0, 10, n).round(2),
                         "y": np.where(a != b, "yes", "no")})


def rule_share(table: pd.DataFrame) -> float:
    return float(((table["a"] != table["b"]) == (table["y"] == "yes")).mean())


def test_the_family_is_the_target_with_every_pair_of_other_columns():
    layout = layout_for(SCHEMA)
    columns = [c.column for c in layout.coordinates]
    triples = triples_with_target(layout, "y", 45)
    t = columns.index("y")
    others = [i for i, c in enumerate(columns) if c != "y"]
    expected = [(t, a, b) for a, b in itertools.combinations(others, 2) if columns[a] != columns[b]]
    assert list(triples) == expected and len(triples) == 3
    assert triples_with_target(layout, "y", 2) == ()  # more than the cap: none
    assert triples_with_target(layout, "y", 0) == ()
    assert triples_with_target(layout, None, 45) == ()


def test_triple_counts_are_the_exact_3_way_tables():
    rng = np.random.default_rng(5)
    layout = layout_for(SCHEMA)
    x = encode(xor_table(rng, 700), SCHEMA)
    triples = triples_with_target(layout, "y", 45)
    _, _, threes = table_counts(x, layout, (), 16, chunk_rows=256, triples=triples)
    cells = marginal_cells(x, layout, 16)
    sizes = [2, 2, 16, 2]
    blocks = np.split(threes.counts, np.cumsum(triple_sizes(layout, triples, 16))[:-1])
    for (t, a, b), block in zip(triples, blocks):
        expected = np.zeros((sizes[t], sizes[a], sizes[b]), dtype=np.int64)
        np.add.at(expected, (cells[:, t], cells[:, a], cells[:, b]), 1)
        np.testing.assert_array_equal(block, expected.ravel())
        assert block.sum() == 700  # every row in one cell of every table


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_triples_share_the_pair_weight_and_leave_delta_unchanged(relation):
    """Delta^2 keeps its shares: the pair share now buys P + T tables, so each carries sqrt((P + T) / P) times the
    noise, and the mechanism and its public parameters name the triples."""
    with_triples, cal = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, target_triples=45)
    without, cal0 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation, target_triples=0)
    p, t = len(without.pairs), len(with_triples.triples)
    assert t == 3 and not without.triples
    bare = [c.sensitivity / (1.0 + c.slack) for c in (cal, cal0)]  # the float slack grows with the cells
    assert bare[0] == pytest.approx(bare[1], rel=1e-12) and cal.slack >= cal0.slack
    # sigma carries the slack (about 1e-6 here)
    assert cal.pair_noise_std() / cal0.pair_noise_std() == pytest.approx(math.sqrt((p + t) / p), rel=1e-5)
    assert cal.marginal_noise_std() == pytest.approx(cal0.marginal_noise_std(), rel=1e-5)
    assert "target-triples" in with_triples.mechanism and with_triples.public_params()["target_triples"] == 3


def test_target_triples_setting_is_validated():
    with pytest.raises(ValueError, match=r"target_triples must be an integer >= 0, got -1"):
        MeasurementSettings(target_triples=-1)
    with pytest.raises(ValueError, match=r"target_tilt_chi2 must be a finite number >= 0, got -0.5"):
        ExperimentalSynthesizer(SCHEMA, 1.0, 1e-6, fit_overrides={"target_tilt_chi2": -0.5})


def test_the_target_tilt_restores_a_rule_the_pairs_can_not_hold():
    """Noise-free tables of XOR data and a one-component mixture (every column independent): the pairwise steps
    leave the rule at chance, the tilt toward the exact 3-way tables brings it back."""
    table = xor_table(np.random.default_rng(11), 3000)
    synth = Synthesizer(SCHEMA, 1.0, 1e-6, seed=3, model=ModelSettings(components=1))
    x = encode(table, SCHEMA)
    plan, calibration = synth.plan(len(x))
    stats = measuring.exact_statistics(x, plan, layout_for(SCHEMA))
    synth.measurement = measuring.measurement_of(plan, calibration, stats.d, stats.moments, stats.marginals,
                                                 stats.pairs, fine=stats.fine, triples=stats.triples)
    model = synth.fit_model()
    assert model.target_tilt is not None
    without = sample_table(dataclasses.replace(model, target_tilt=None), SCHEMA, 3000, 1)
    assert abs(rule_share(without) - 0.5) < 0.1
    assert rule_share(sample_table(model, SCHEMA, 3000, 1)) > 0.8  # stopped at the planned noise level: 0.88


def test_a_release_keeps_a_rule_only_3_way_tables_show(tmp_path):
    """XOR data at eps = 1 through the release's measurement: the rule holds in most synthetic rows (pairs alone,
    the moments found it in one of three noise draws: 52%, 52%, 94% of the rows)."""
    table = xor_table(np.random.default_rng(11), 4000)
    synth = Synthesizer(SCHEMA, 1.0, 1e-6, "add-remove", seed=3)
    synth.fit(table, ledger=None)
    model = synth.model
    assert model.target_tilt is not None
    synthetic = synth.sample()
    assert rule_share(synthetic) >= 0.85
    # The resampled rows are matched onto the noisy 1-way tables again: each column's counts are exactly the matched
    # counts of its noisy frequencies, as without the target tilt.
    frequencies = model.marginal_targets.per_coordinate(model.layout)
    for index, column in ((0, "a"), (1, "b"), (3, "y")):
        expected = target_counts(frequencies[index], len(synthetic))
        observed = pd.Categorical(synthetic[column], categories=SCHEMA.column(column).categories).codes
        np.testing.assert_array_equal(np.bincount(observed, minlength=len(expected)), expected)

    # The measurement and the model keep the triples and the target tilt through a save and load.
    synth.measurement.save(tmp_path / "measurement")
    loaded = Measurement.load(tmp_path / "measurement")
    assert loaded.triples == synth.measurement.triples
    np.testing.assert_array_equal(loaded.noisy_triples, synth.measurement.noisy_triples)
    save_model(model, tmp_path / "model")
    loaded_model = load_model(tmp_path / "model")
    assert loaded_model.target_tilt is not None and loaded_model.target_tilt.triples == model.target_tilt.triples
    assert loaded_model.target_tilt.pairs == model.target_tilt.pairs == synth.measurement.pairs
    pd.testing.assert_frame_equal(sample_table(loaded_model, synth.schema, 500, 9),
                                  sample_table(model, synth.schema, 500, 9))
