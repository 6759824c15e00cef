"""A workload of 3-way marginals (``workload:`` in the settings): validated where it enters, measured as 3-way
tables that count ``WORKLOAD_UNITS`` times in the pair family, their noise 1/sqrt(units) of a pair cell's, kept
through a save and load, answered exactly, and fitted by the 3-way tilt. The sensitivity through the release path
(library and Dagster job, both relations) is checked in ``test_release_path_neighbours``."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from helpers import fails_cleanly, ok

from bench.common import seeded_noise
from splice_assets import MeasurementSettings, ModelSettings, Synthesizer
from splice_assets.config import SettingsError, SynthesizerSettings
from splice_assets.datasets import DEMO_DATASET
from splice_assets.layout import WORKLOAD_UNITS, layout_for
from splice_assets.measurement import Measurement
from splice_assets.planning import ReleasePlanner
from splice_assets.private import measuring
from splice_assets.release.quality import quality_summary
from splice_assets.release.settings import ReleaseSettings
from splice_assets.schema import parse_schema

SCHEMA = parse_schema({
    "name": "toy_workload", "version": 1, "n_min": 100, "target": "y",
    "columns": [
        {"name": "a", "kind": "categorical", "categories": ["0", "1"]},
        {"name": "b", "kind": "categorical", "categories": ["0", "1"]},
        {"name": "level", "kind": "continuous", "bounds": [0, 10]},
        {"name": "y", "kind": "categorical", "categories": ["no", "yes"]},
    ],
})
NO_TARGET = parse_schema({
    "name": "toy_workload_free", "version": 1, "n_min": 100,
    "columns": [{"name": "a", "kind": "categorical", "categories": ["0", "1"]},
                {"name": "b", "kind": "categorical", "categories": ["0", "1"]},
                {"name": "c", "kind": "categorical", "categories": ["0", "1"]},
                {"name": "level", "kind": "continuous", "bounds": [0, 10]}]})


def settings(workload, **measurement) -> SynthesizerSettings:
    return SynthesizerSettings(epsilon=1.0, delta=1e-6, measurement=MeasurementSettings(workload=workload,
                                                                                        **measurement))


@pytest.mark.parametrize(("workload", "message"), [
    ("a,b,level", r"workload must be a list of 3-way marginals .*got 'a,b,level'"),
    ([["a", "b"]], r"three different column names, got \['a', 'b'\] \(every 2-way table is measured already"),
    ([["a", "a", "b"]], r"three different column names, got \['a', 'a', 'b'\]"),
])
def test_a_malformed_workload_is_refused_quoting_it(workload, message):
    with pytest.raises(SettingsError, match=message):
        MeasurementSettings(workload=workload)


def test_a_workload_is_checked_against_the_schema_before_anything_runs():
    with pytest.raises(SettingsError, match=r"workload entry \['a', 'b', 'size'\]: 'size' is not a modelled column; "
                                            r"the modelled columns are a, b, level, y"):
        ReleasePlanner.of(SCHEMA, settings([["a", "b", "size"]]))
    with pytest.raises(SettingsError, match=r"needs the 2-way tables: pair_share is 0"):
        ReleasePlanner.of(SCHEMA, settings([["a", "b", "level"]], pair_share=0.0))
    wide = parse_schema({"name": "wide", "version": 1, "n_min": 100, "columns": [
        {"name": name, "kind": "continuous", "bounds": [0, 1]} for name in ("p", "q", "r")] + [
        {"name": "s", "kind": "categorical", "categories": [str(i) for i in range(20)]}]})
    assert ReleasePlanner.of(wide, settings([["p", "q", "r"]]))  # 16^3 = 4,096 cells: at the limit
    with pytest.raises(SettingsError, match=r"\['p', 'q', 's'\] has 5,120 cells, above 4,096"):
        ReleasePlanner.of(wide, settings([["p", "q", "s"]]))


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_workload_tables_count_their_units_in_the_pair_share(relation):
    """Delta keeps its shares; the pair share now buys P + T + u tables' worth (u = WORKLOAD_UNITS), so the other
    tables carry sqrt((P + T + u) / (P + T)) times their noise and the workload's cells 1/sqrt(u) of theirs. A
    workload entry the target's 3-way tables hold already adds nothing."""
    plain, cal0 = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation)
    favoured, cal = measuring.make_plan(SCHEMA, 1000, 1.0, 1e-6, relation=relation,
                                        workload=[("a", "b", "level"), ("y", "a", "b"), ("level", "b", "a")])
    columns = [c.column for c in layout_for(SCHEMA).coordinates]
    assert favoured.triples == plain.triples + ((columns.index("a"), columns.index("b"), columns.index("level")),)
    assert favoured.triple_units == (1,) * len(plain.triples) + (WORKLOAD_UNITS,)
    tables = len(plain.pairs) + len(plain.triples)
    bare = [c.sensitivity / (1.0 + c.slack) for c in (cal, cal0)]
    assert bare[0] == pytest.approx(bare[1], rel=1e-12)
    assert cal.pair_noise_std() / cal0.pair_noise_std() == pytest.approx(
        math.sqrt((tables + WORKLOAD_UNITS) / tables), rel=1e-5)
    weights = favoured.triple_table_weights()
    assert weights[-1] == pytest.approx(math.sqrt(WORKLOAD_UNITS) * favoured.pair_weight)
    assert weights[0] == pytest.approx(favoured.pair_weight)
    params = favoured.public_params()
    assert params["triple_units"][-1] == WORKLOAD_UNITS and params["triples"][-1] == [0, 1, 2]
    assert "workload" in favoured.mechanism and "triple_units" not in plain.public_params()
    only, _ = measuring.make_plan(NO_TARGET, 1000, 1.0, 1e-6, relation=relation, workload=[("a", "b", "c")])
    assert only.mechanism.endswith("+pairs+workload+fine")  # no target: no target tables


def workload_rule_table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """level is high where a XOR b: every pair of columns is independent, only the (a, b, level) table shows it."""
    a, b, c = rng.integers(0, 2, n), rng.integers(0, 2, n), rng.integers(0, 2, n)
    level = np.where(a != b, rng.uniform(7, 10, n), rng.uniform(0, 3, n))
    return pd.DataFrame({"a": a.astype(str), "b": b.astype(str), "c": c.astype(str), "level": level.round(2)})


def rule_share(table: pd.DataFrame) -> float:
    return float(((table["a"] != table["b"]) == (table["level"] > 5)).mean())


def test_a_workload_marginal_keeps_a_rule_the_pairs_can_not_hold_and_is_answered_exactly(tmp_path):
    """At eps = 3 on 4,000 rows, noise seeded, seed 3, a one-component mixture (every column independent, as in
    test_target_triples): without the workload the rule holds in about half the synthetic rows (chance); with
    (a, b, level) measured it holds in most. A count on that marginal is answered from its noisy
    table, with the workload's noise."""
    table = workload_rule_table(np.random.default_rng(11), 4000)
    shares = {}
    for workload in ((), (("a", "b", "level"), ("a", "b", "c"))):
        synth = Synthesizer(NO_TARGET, 3.0, 1e-6, "add-remove", seed=3, model=ModelSettings(components=1),
                            measurement=MeasurementSettings(workload=workload))
        with seeded_noise(5):
            synth.fit(table, ledger=None)
        shares[bool(workload)] = rule_share(synth.sample())
    assert shares[False] < 0.7 and shares[True] >= 0.85, shares
    measurement = synth.measurement
    assert measurement.triple_units == (WORKLOAD_UNITS, WORKLOAD_UNITS)
    assert measurement.triple_noise_stds()[0] == pytest.approx(measurement.pair_noise_std() / math.sqrt(WORKLOAD_UNITS))
    answer = synth.answer("count where a == '0' and b == '1' and level >= 5")
    assert answer.interval == "exact" and synth._basis is None  # a measured answer builds no refits
    # The public quality summary states each workload table's accuracy, and how closely the rows meet it.
    tables = quality_summary(measurement, NO_TARGET, synth.sample(seed=1))["workload_tables"]
    assert list(tables) == ["a x b x level", "a x b x c"]
    assert tables["a x b x level"]["noise_std_per_cell"] == pytest.approx(
        measurement.pair_noise_std() / math.sqrt(WORKLOAD_UNITS), rel=1e-3)
    assert tables["a x b x level"]["model_tvd"] < 0.2  # the rule kept: without it about half the rows move
    # The public measurement keeps the units through a save and load.
    measurement.save(tmp_path / "measurement")
    loaded = Measurement.load(tmp_path / "measurement")
    assert loaded.triple_units == measurement.triple_units and loaded.triples == measurement.triples
    assert json.loads((tmp_path / "measurement.json").read_text())["triple_units"] == [WORKLOAD_UNITS] * 2


def test_every_entry_point_takes_the_workload(tmp_path):
    release = ReleaseSettings(dataset=DEMO_DATASET, workload=[["children", "religious", "rate_marriage"]])
    assert release.workload == (("children", "religious", "rate_marriage"),)
    assert release.synthesizer_settings().measurement.workload == release.workload
    # release.json holds lists; a refit reads them back to the same settings.
    stored = json.loads(json.dumps({"workload": release.workload}))
    assert ReleaseSettings.from_parameters(stored).workload == release.workload
    base = ["plan", "--dataset", DEMO_DATASET, "--epsilon", "1", "--delta", "1e-9", "--n", "7000", "--json",
            "--ledger-url", f"sqlite:///{tmp_path / 'ledger.sqlite'}"]
    plain = json.loads(ok(*base).stdout)
    planned = json.loads(ok(*base, "--workload", "children,religious,rate_marriage",
                            "--workload", "educ, occupation, religious").stdout)
    assert planned["three_way_tables"] == plain["three_way_tables"] + 2
    assert planned["pair_noise_std"] > plain["pair_noise_std"] and plain["workload_noise_std"] is None
    assert planned["workload_noise_std"] == pytest.approx(planned["pair_noise_std"] / math.sqrt(WORKLOAD_UNITS))
    assert "'kids' is not a modelled column" in fails_cleanly(*base, "--workload", "children,kids,educ")
    assert "three different column names" in fails_cleanly(*base, "--workload", "children,educ")

