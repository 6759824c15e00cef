"""The public API: settings validated at construction, one charge per fit, save / load / refit at no cost."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splice_assets import (
    BudgetLedger,
    MeasurementSettings,
    ModelSettings,
    NotFitted,
    PostProcessingSettings,
    PreflightError,
    Synthesizer,
    parse_schema,
)

SCHEMA = parse_schema({
    "name": "toy_api", "version": 1, "n_min": 200,
    "columns": [{"name": "x", "kind": "continuous", "bounds": [0, 10]},
                {"name": "c", "kind": "categorical", "categories": ["a", "b", "c"]}],
})
FAST = dict(measurement=MeasurementSettings(n_directions=32, k=6), model=ModelSettings(components=3, max_steps=40),
            postprocessing=PostProcessingSettings(field_iterations=0))


def table(n: int = 600) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    c = rng.choice(["a", "b", "c"], n, p=[0.6, 0.3, 0.1])
    return pd.DataFrame({"x": np.where(c == "a", rng.normal(2, 0.5, n), rng.normal(7, 1, n)).clip(0, 10), "c": c})


@pytest.fixture
def ledger(tmp_path):
    book = BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    book.set_budget(SCHEMA.name, 5.0, 1e-6)
    yield book
    book.close()


@pytest.mark.parametrize("kwargs, words", [
    (dict(epsilon=0.0), "epsilon must be a number in (0, 20], got 0.0"),
    (dict(relation="nearby"), "relation must be one of ('replace-one', 'add-remove'), got 'nearby'"),
    (dict(measurement=None, model=ModelSettings(components=3), seed=-1), "seed must be an integer >= 0, got -1"),
])
def test_settings_are_checked_at_construction_and_quote_the_value(kwargs, words):
    with pytest.raises(ValueError) as caught:
        Synthesizer(SCHEMA, **{"epsilon": 1.0, "delta": 1e-9, **kwargs})
    assert words in str(caught.value)


@pytest.mark.parametrize("build, words", [
    (lambda: MeasurementSettings(k=0), "k must be an integer in [1, 64], got 0"),
    (lambda: MeasurementSettings(marginal_share=0.7, pair_share=0.5), None),
    (lambda: ModelSettings(components=0), "components (K) must be an integer in [1, 500], got 0"),
    (lambda: PostProcessingSettings(link_lambda=2.0), "link_lambda must be a number in [0, 1], got 2.0"),
])
def test_each_settings_group_validates_itself(build, words):
    if words is None:  # valid alone; refused once a relation is known (the moments need a share)
        settings = build()
        with pytest.raises(ValueError, match="must be < 1"):
            Synthesizer(SCHEMA, 1.0, 1e-9, measurement=settings)
        return
    with pytest.raises(ValueError) as caught:
        build()
    assert words in str(caught.value)


def test_the_pair_share_grows_with_the_share_of_discrete_columns_unless_given():
    from splice_assets.defaults import DEFAULT_PAIR_SHARE, DISCRETE_PAIR_SHARE, default_pair_share
    from splice_assets.private.measuring import make_plan

    numeric = parse_schema({"name": "n", "version": 1, "n_min": 200,
                            "columns": [{"name": "x", "kind": "continuous", "bounds": [0, 1]}]})
    discrete = parse_schema({"name": "d", "version": 1, "n_min": 200,
                             "columns": [{"name": "c", "kind": "categorical", "categories": ["a", "b"]},
                                         {"name": "o", "kind": "ordinal", "categories": ["lo", "hi"]}]})
    assert (DEFAULT_PAIR_SHARE, DISCRETE_PAIR_SHARE) == (0.5, 0.75)
    assert default_pair_share(numeric) == 0.5 and default_pair_share(discrete) == 0.75
    assert default_pair_share(SCHEMA) == 0.625  # one of two columns discrete
    # The synthesizer records the share it measures with; a given share is kept.
    assert Synthesizer(SCHEMA, 1.0, 1e-9).settings.measurement.pair_share == 0.625
    given = Synthesizer(SCHEMA, 1.0, 1e-9, measurement=MeasurementSettings(pair_share=0.4))
    assert given.settings.measurement.pair_share == 0.4
    plan, cal = make_plan(SCHEMA, 600, 1.0, 1e-9, 32, 6)
    assert plan.pair_share == 0.625 and cal == make_plan(SCHEMA, 600, 1.0, 1e-9, 32, 6, pair_share=0.625)[1]
    # Left to the schema, the share is checked once resolved: here it leaves the moments nothing.
    with pytest.raises(ValueError, match="marginal_share 0.3 \\+ pair_share 0.75"):
        Synthesizer(discrete, 1.0, 1e-9, measurement=MeasurementSettings(marginal_share=0.3))
    Synthesizer(numeric, 1.0, 1e-9, measurement=MeasurementSettings(marginal_share=0.3))  # 0.3 + 0.5 fits


def test_fit_charges_once_and_sample_save_load_refit_cost_nothing(ledger, tmp_path):
    synth = Synthesizer(SCHEMA, 1.0, 1e-9, **FAST).fit(table(), ledger=ledger)
    assert [e.status for e in ledger.entries(SCHEMA.name)] == ["committed"]
    facts = synth.privacy
    assert (facts.epsilon, facts.relation, facts.n) == (1.0, "replace-one", 600)
    assert facts.ledger_entry_id == ledger.entries(SCHEMA.name)[0].id
    rows = synth.sample(300, seed=4)
    assert list(rows.columns) == ["x", "c"] and len(rows) == 300
    loaded = Synthesizer.load(synth.save(tmp_path / "saved"))
    pd.testing.assert_frame_equal(loaded.sample(300, seed=4), rows)  # same model, same public seed
    child = loaded.refit(model=ModelSettings(components=2, max_steps=30))
    assert child.model.params.K == 2 and child.privacy == loaded.privacy
    assert len(ledger.entries(SCHEMA.name)) == 1  # nothing more was charged


def test_a_fit_that_cannot_succeed_charges_nothing(ledger):
    with pytest.raises(PreflightError, match="delta must be < 1/600"):
        Synthesizer(SCHEMA, 1.0, 4e-3, **FAST).fit(table(), ledger=ledger)  # < 1/n_min, not < 1/n
    with pytest.raises(PreflightError, match="lifetime epsilon"):
        Synthesizer(SCHEMA, 15.0, 1e-9, **FAST).fit(table(), ledger=ledger)
    assert ledger.entries(SCHEMA.name) == []


def test_stages_need_their_inputs():
    synth = Synthesizer(SCHEMA, 1.0, 1e-9)
    for stage in (synth.sample, synth.fit_model, synth.refit):
        with pytest.raises(NotFitted):
            stage()


def test_each_fit_is_its_own_release_in_the_ledger(ledger):
    # Issue 70 item 5: a Python fit records a fresh release id (not one shared "adhoc"), so `splice budget` counts
    # two fits as two releases.
    Synthesizer(SCHEMA, 1.0, 1e-9, **FAST).fit(table(), ledger=ledger)
    Synthesizer(SCHEMA, 1.0, 1e-9, **FAST).fit(table(), ledger=ledger)
    ids = [e.release_id for e in ledger.entries(SCHEMA.name)]
    assert len(ids) == 2 and len(set(ids)) == 2 and "adhoc" not in ids
