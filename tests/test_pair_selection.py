"""Pair selection (``private.pair_selection``): the cap, the scores' sensitivity, the three noise steps through the
release path under both neighbouring relations, and that the noisy scores find the dependent pairs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_release_path_neighbours import EXTREME_ROW, SCHEMA, neighbours, private_table

from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.layout import layout_for
from splice_assets.measurement import RELATION_ADD_REMOVE, RELATION_REPLACE_ONE, Measurement
from splice_assets.private import holdout_split, measuring
from splice_assets.private import mechanism as privacy
from splice_assets.private.encoding import encode
from splice_assets.private.pair_selection import (
    DEFAULT_SELECTION_SHARE,
    chosen_pairs,
    dependence_scores,
    selected_count,
)
from splice_assets.private.validation import validate
from splice_assets.schema import parse_schema

AR, RO = RELATION_ADD_REMOVE, RELATION_REPLACE_ONE
#: Half a pair per coordinate: the toy schema's candidate pairs outnumber the cap, so the plan selects.
CAP = 0.5


def test_the_cap_keeps_every_pair_of_a_narrow_table():
    assert selected_count(105, 15, 8.0) == 105  # adult: all measured
    assert selected_count(3655, 86, 8.0) == 688  # coil2000: ceil(8 x 86)
    assert selected_count(3655, 86, 0.0) == 3655  # 0 = no cap
    assert selected_count(10, 4, 0.1) == 1
    with pytest.raises(ValueError, match="-1"):
        selected_count(10, 4, -1)


def test_a_score_moves_by_at_most_one_row_of_its_table():
    """With the reference fixed, adding or removing a row moves a count score by <= 1 and replacing one moves a
    frequency score by <= 2/n, whatever the row (random tables, every cell as the moved row)."""
    rng = np.random.default_rng(3)
    sizes, pairs = (3, 4, 2), ((0, 1), (0, 2), (1, 2))
    for _ in range(20):
        n = int(rng.integers(5, 60))
        cells = np.stack([rng.integers(0, s, n) for s in sizes], axis=1)
        noisy = rng.normal(0.3, 0.4, sum(sizes))  # any reference, negative cells included
        total = float(rng.uniform(1, 2 * n))

        def counts(rows: np.ndarray) -> np.ndarray:
            return np.concatenate([
                np.bincount(rows[:, a] * sizes[b] + rows[:, b], minlength=sizes[a] * sizes[b]) for a, b in pairs
            ]).astype(float)

        base = dependence_scores(counts(cells), pairs, sizes, noisy, total)
        for row in ([0, 0, 0], [2, 3, 1], [1, 2, 0]):
            added = dependence_scores(counts(np.vstack([cells, row])), pairs, sizes, noisy, total)
            assert np.all(np.abs(added - base) <= 1 + 1e-12)
            replaced = cells.copy()
            replaced[0] = row
            ro = [dependence_scores(counts(c) / n, pairs, sizes, noisy, 1.0) for c in (cells, replaced)]
            assert np.all(np.abs(ro[1] - ro[0]) <= 2 / n + 1e-12)


def test_chosen_pairs_penalise_large_tables_by_their_noise():
    scores = np.array([10.0, 30.0, 31.0, 5.0])
    assert list(chosen_pairs(scores, [4, 4, 100, 4], 0.0, 2)) == [1, 2]
    # 100 cells at noise 1 expect an l1 error of ~80: that table is not worth measuring.
    assert list(chosen_pairs(scores, [4, 4, 100, 4], 1.0, 2)) == [0, 1]


# -- through the release path --------------------------------------------------------------------------------------


class Recorder:
    """A stand-in for the Gaussian sampler that draws no noise: it returns a fixed outcome per call, so both
    neighbours continue with the same step-1 output (the reference) and the same noisy scores (the choice), as
    adaptive composition requires of the comparison; it records what each call was handed."""

    def __init__(self, outcomes: list[np.ndarray] | None = None) -> None:
        self.outcomes, self.seen = outcomes, []

    def __call__(self, values: np.ndarray, sigma: float) -> np.ndarray:
        self.seen.append(np.array(values, dtype=np.float64, copy=True))
        if self.outcomes is None:
            return np.array(values, dtype=np.float64, copy=True)
        return self.outcomes[len(self.seen) - 1].copy()


def staged_inputs(monkeypatch, table: pd.DataFrame, relation: str, recorder: Recorder) -> list[np.ndarray]:
    """validate -> split -> encode -> plan (selecting) -> measure, returning the vector of each noise step."""
    monkeypatch.setattr(privacy, "gaussian_noise", recorder)
    checked = validate(table, SCHEMA).table
    train, _ = holdout_split.split_holdout(checked, 0.0, 0, relation)
    plan, calibration = measuring.make_plan(SCHEMA, len(train), 1.0, 1e-6, relation=relation,
                                            pairs_per_coordinate=CAP)
    measuring.measure(encode(train, SCHEMA), SCHEMA, plan, calibration)
    return recorder.seen


@pytest.mark.parametrize("relation", [AR, RO])
def test_the_three_steps_move_by_at_most_their_shares_of_delta(monkeypatch, relation):
    rng = np.random.default_rng(12)
    table = private_table(rng, 400)
    plan, calibration = measuring.make_plan(SCHEMA, 400, 1.0, 1e-6, relation=relation, pairs_per_coordinate=CAP)
    assert 0 < plan.selected_pairs < len(plan.pairs)
    delta, bare = calibration.sensitivity, calibration.sensitivity / (1 + calibration.slack)
    base = staged_inputs(monkeypatch, table, relation, Recorder())
    assert [v.size for v in base[1:]] == [len(plan.pairs), base[2].size]  # scores of every candidate, K tables
    worst = 0.0
    for name, other in neighbours(rng, table, relation).items():
        moved = [a - b for a, b in zip(staged_inputs(monkeypatch, other, relation, Recorder(base)), base)]
        norms = [float(np.linalg.norm(m)) for m in moved]
        total = math.sqrt(sum(v * v for v in norms))
        assert total <= delta * (1 + 1e-9), (name, total / delta)
        assert norms[1] <= math.sqrt(DEFAULT_SELECTION_SHARE) * delta * (1 + 1e-9), (name, norms[1] / delta)
        assert norms[2] <= math.sqrt(plan.pair_share - DEFAULT_SELECTION_SHARE) * delta * (1 + 1e-9), name
        if relation == AR and name.startswith("add"):
            # An added row falls in one cell of every chosen table: the tables' share is met exactly.
            assert norms[2] == pytest.approx(math.sqrt(plan.pair_share - DEFAULT_SELECTION_SHARE) * bare, rel=1e-9)
        worst = max(worst, total / delta)
    assert worst > 0.3


WIDE_YAML = """
name: toy_wide
version: 1
n_min: 100
columns:
""" + "".join(f"  - {{name: c{i}, kind: categorical, categories: [a, b, c]}}\n" for i in range(8))


def wide_table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Eight 3-level columns, independent except c1 = c0 and c5 = c4 (two of 28 pairs)."""
    table = pd.DataFrame({f"c{i}": rng.choice(["a", "b", "c"], n) for i in range(8)})
    table["c1"], table["c5"] = table["c0"], table["c4"]
    return table


def test_the_noisy_scores_choose_the_dependent_pairs():
    """At eps = 20 (score noise ~5 rows against a score of ~2,700 for a copied column and ~100 for an independent
    pair at n = 4,000) the two copied pairs are among the chosen: the margin is > 20 noise std, so this fails
    with a probability far below 1e-9 unless the scores or the choice are wrong."""
    schema = parse_schema(__import__("yaml").safe_load(WIDE_YAML))
    table = wide_table(np.random.default_rng(5), 4000)
    synth = Synthesizer(schema, 20.0, 1e-6, AR, 0, measurement=MeasurementSettings(pairs_per_coordinate=0.25))
    plan, calibration = synth.plan(4000)
    assert plan.selected_pairs == 2 and len(plan.pairs) == 28
    assert calibration.score_noise_std() < 10
    measurement = synth.measure(synth.encode(validate(table, schema).table), None)
    layout = layout_for(schema)
    columns = {tuple(layout.coordinates[i].column for i in pair) for pair in measurement.pairs}
    assert columns == {("c0", "c1"), ("c4", "c5")}
    assert measurement.pair_candidates == 28
    assert measurement.noisy_pairs.size == sum(measurement.pair_sizes) == 18


def test_a_selected_release_fits_samples_and_reloads(tmp_path):
    """The fit reads only the chosen tables; the copied columns come out copied (at eps = 5 the copies' scores are
    > 10 noise std above the rest: see the test above)."""
    schema = parse_schema(__import__("yaml").safe_load(WIDE_YAML))
    table = wide_table(np.random.default_rng(6), 3000)
    synth = Synthesizer(schema, 5.0, 1e-6, AR, 1, measurement=MeasurementSettings(pairs_per_coordinate=0.5))
    synth.fit(table, ledger=None)
    measurement = synth.measurement
    assert measurement is not None and len(measurement.pairs) == 4 and measurement.pair_candidates == 28
    assert "selected-pairs" in measuring.make_plan(schema, None, 2.0, 1e-6, relation=AR,
                                                   pairs_per_coordinate=0.5)[0].mechanism
    measurement.save(tmp_path / "m")
    again = Measurement.load(tmp_path / "m")
    assert again.pairs == measurement.pairs and again.pair_candidates == 28
    rows = synth.sample(2000, seed=0)
    assert tuple(rows.columns) == schema.column_names and len(rows) == 2000
    # Real: always equal; independent columns: 1/3 of rows. A fitted copy keeps most rows equal.
    assert (rows["c0"] == rows["c1"]).mean() > 0.8 and (rows["c4"] == rows["c5"]).mean() > 0.8
    assert (rows["c2"] == rows["c3"]).mean() < 0.5


def test_settings_refuse_a_selection_share_not_below_the_pair_share():
    with pytest.raises(ValueError, match="0.6"):
        MeasurementSettings(pair_share=0.5, selection_share=0.6)
    with pytest.raises(ValueError, match="-2"):
        MeasurementSettings(pairs_per_coordinate=-2)
    MeasurementSettings(pair_share=0.0)  # moments and 1-way tables only: no selection to check
    assert EXTREME_ROW  # the neighbours' extreme row comes from the release-path test
