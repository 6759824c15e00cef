"""Neighbouring inputs through the real release path: the vector handed to the Gaussian sampler moves by at most
Delta (1 + slack), and each query family by exactly its declared share of Delta^2 where one row can reach it.

The sampler (``privacy.gaussian_noise``) is replaced by a stand-in that records its input and stops the run, so
what is compared is the exact statistic the mechanism would have noised, computed by the same code that releases:
the holdout split, validation, encoding, the plan's shares and weights, and ``measure_exact``'s assembly. The
stand-in raises before any noise, so the reservation is aborted and nothing is charged. Both neighbouring
relations; random neighbours, duplicates, extreme rows, a reordered file. Without a row-order-free split an added
row moved the vector by 3 to 24 Delta; with the 2-way weight on the 1-way cells the 1-way share is wrong. The
amount column's candidates (0051) are fine cells of their own: a row at one moves that cell and no interval.
"""

from __future__ import annotations

import math

import dagster as dg
import numpy as np
import pandas as pd
import pytest
from helpers import release_resources

from splice_assets.dagster_layer.automation import run_config_for
from splice_assets.dagster_layer.config import ReleaseConfig
from splice_assets.dagster_layer.definitions import build_definitions
from splice_assets.defaults import DEFAULT_LEVEL_UNITS, ESTIMATE_MECHANISM
from splice_assets.fine_cells import DEFAULT_GRID_WEIGHT, DEFAULT_INTERVAL_WEIGHT
from splice_assets.measurement import RELATION_ADD_REMOVE, RELATION_REPLACE_ONE
from splice_assets.private import holdout_split, measuring
from splice_assets.private import mechanism as privacy
from splice_assets.private.encoding import encode
from splice_assets.private.ledger import BudgetLedger
from splice_assets.private.mechanism import (
    DEFAULT_COUNT_SHARE,
    DEFAULT_MARGINAL_SHARE,
)
from splice_assets.private.validation import validate
from splice_assets.schema import parse_schema

AR, RO = RELATION_ADD_REMOVE, RELATION_REPLACE_ONE
# region has 40 levels: with ``level_units`` (the default, and set in the library calls below) its 1-way table counts
# as two
SCHEMA_YAML = """
name: toy_neighbours
version: 1
n_min: 100
target: grade
columns:
  - {name: amount, kind: continuous, bounds: [0, 1000], sentinels: [0], candidates: [60, 1000]}
  - {name: age, kind: integer, bounds: [18, 90]}
  - {name: colour, kind: categorical, categories: [red, green, blue, grey]}
  - {name: grade, kind: ordinal, categories: [1, 2, 3]}
""" + "  - {name: region, kind: categorical, categories: [" + ", ".join(f"r{i:02d}" for i in range(40)) + "]}\n"
SCHEMA = parse_schema(__import__("yaml").safe_load(SCHEMA_YAML))
EXTREME_ROW = {"amount": 1000.0, "age": 90, "colour": "grey", "grade": 3, "region": "r39"}
#: A workload's 3-way table counts WORKLOAD_UNITS times in the pair family, its cells at sqrt(units) the pair weight.
WORKLOAD = (("colour", "age", "amount"),)
SLACK_TOLERANCE = 1e-9


class Captured(Exception):
    """Raised by the stand-in sampler once it has the vector."""


def private_table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Rows as a CSV gives them (text), a quarter of the amounts on a bound, a tenth on a candidate value."""
    amount = rng.gamma(2.0, 60.0, n).clip(0, 1000)
    amount[rng.uniform(size=n) < 0.25] = 0.0
    amount[rng.uniform(size=n) < 0.1] = 60.0
    return pd.DataFrame({
        "amount": amount.round(2), "age": rng.integers(18, 91, n), "colour": rng.choice(["red", "green", "blue"], n),
        "grade": rng.integers(1, 4, n), "region": rng.choice([f"r{i:02d}" for i in range(30)], n),
    })


def neighbours(rng: np.random.Generator, table: pd.DataFrame, relation: str) -> dict[str, pd.DataFrame]:
    """Named neighbours of ``table`` under ``relation``; several reorder every row, as a re-export would."""
    extreme = pd.DataFrame([EXTREME_ROW])
    shuffled = lambda t: t.sample(frac=1.0, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)  # noqa: E731
    row = int(rng.integers(len(table)))
    if relation == AR:
        return {
            "add an extreme row": pd.concat([table, extreme], ignore_index=True),
            "add an extreme row, reorder": shuffled(pd.concat([table, extreme], ignore_index=True)),
            "add a duplicate": pd.concat([table, table.iloc[[row]]], ignore_index=True),
            "remove a row": table.drop(index=row).reset_index(drop=True),
            "remove a row, reorder": shuffled(table.drop(index=row)),
        }
    replaced = table.copy()
    replaced.iloc[row] = pd.Series(EXTREME_ROW)
    return {"replace by an extreme row": replaced, "replace by an extreme row, reorder": shuffled(replaced)}


def capture_sampler(monkeypatch) -> list[np.ndarray]:
    seen: list[np.ndarray] = []

    def stand_in(values: np.ndarray, sigma: float) -> np.ndarray:
        seen.append(np.array(values, dtype=np.float64, copy=True))
        raise Captured

    monkeypatch.setattr(privacy, "gaussian_noise", stand_in)
    return seen


def library_vector(table: pd.DataFrame, relation: str, holdout: float, seed: int, seen: list,
                   weights: tuple[int, int] = (DEFAULT_GRID_WEIGHT, DEFAULT_INTERVAL_WEIGHT),
                   workload: tuple[tuple[str, ...], ...] = ()) -> np.ndarray:
    """The release path's functions in the job's order: validate -> split -> encode -> plan -> measure."""
    checked = validate(table, SCHEMA).table
    train, _ = holdout_split.split_holdout(checked, holdout, seed, relation)
    plan, calibration = measuring.make_plan(SCHEMA, len(train), 1.0, 1e-6, relation=relation,
                                            grid_weight=weights[0], interval_weight=weights[1], level_units=True,
                                            workload=workload)
    with pytest.raises(Captured):
        measuring.measure(encode(train, SCHEMA), SCHEMA, plan, calibration)
    return seen.pop()


def nominal_delta(relation: str, n_measured: int,
                  weights: tuple[int, int] = (DEFAULT_GRID_WEIGHT, DEFAULT_INTERVAL_WEIGHT),
                  level_units: bool = DEFAULT_LEVEL_UNITS, workload: tuple[tuple[str, ...], ...] = (),
                  ) -> tuple[float, float, measuring.MeasurementPlan]:
    """(Delta (1 + slack) as calibrated, Delta without slack, the plan) for ``n_measured`` measured rows."""
    plan, calibration = measuring.make_plan(SCHEMA, n_measured, 1.0, 1e-6, relation=relation, grid_weight=weights[0],
                                            interval_weight=weights[1], level_units=level_units, workload=workload)
    return calibration.sensitivity, calibration.sensitivity / (1.0 + calibration.slack), plan


def family_norms(diff: np.ndarray, plan: measuring.MeasurementPlan) -> dict[str, float]:
    """The l2 shift of each query family in the sampler's input: moments, 1-way cells (the coordinates' tables and
    the numeric columns' fine tables, these weighted sqrt(grid_weight) or sqrt(interval_weight) times those), 2-way
    cells (the pairs' and the 3-way tables, one family: the pair weight, sqrt(units) times it for a workload's, whose
    cells come last), count."""
    assert plan.fine, "the product's plan measures fine tables"
    assert plan.triples, "the product's plan measures the target's 3-way tables"
    count_cells = int(plan.relation == AR)
    tables = sum(plan.pair_sizes) + sum(plan.triple_sizes) - plan.workload_cells  # the workload's cells come last
    edges = np.cumsum([plan.k * plan.n_directions, sum(plan.marginal_sizes), tables, count_cells,
                       sum(plan.fine_sizes)])
    moments, coarse, two_way, count, fine, workload = np.split(diff, edges)
    assert workload.size == plan.workload_cells
    two_way = np.concatenate([two_way, workload])
    one_way = np.concatenate([coarse, fine])
    return {"moments": float(np.linalg.norm(moments)), "1-way": float(np.linalg.norm(one_way)),
            "2-way": float(np.linalg.norm(two_way)), "count": float(np.linalg.norm(count))}


def check_shift(diff: np.ndarray, relation: str, n_measured: int, one_row_measured: bool | None,
                weights: tuple[int, int] = (DEFAULT_GRID_WEIGHT, DEFAULT_INTERVAL_WEIGHT),
                level_units: bool = DEFAULT_LEVEL_UNITS, workload: tuple[tuple[str, ...], ...] = ()) -> float:
    """Assert the whole shift is within Delta (1 + slack) and each family within its share; where one measured
    row is added or removed, or replaced by one in another cell of every table, the tables' shares are met
    exactly. Returns the shift in units of Delta."""
    delta, bare, plan = nominal_delta(relation, n_measured, weights, level_units, workload)
    assert bool(plan.triple_units) == bool(workload)
    total = float(np.linalg.norm(diff))
    assert total <= delta * (1 + SLACK_TOLERANCE), f"moved {total / delta:.3f} Delta"
    # A per-value fine table counts grid_weight times, one of intervals interval_weight times, and the 1-way share
    # grows with them (the moments pay); the region's table counts twice with ``level_units``, within that share.
    assert plan.coarse_units == len(plan.marginal_sizes) + level_units
    units = len(plan.marginal_sizes) + sum(weights[0] if c.per_value else weights[1] for c in plan.fine)
    plain = len(plan.marginal_sizes) + len(plan.fine)
    shares = {"1-way": DEFAULT_MARGINAL_SHARE * units / plain, "2-way": plan.pair_share}  # the schema's pair share
    shares["count"] = DEFAULT_COUNT_SHARE if relation == AR else 0.0
    shares["moments"] = 1 - sum(shares.values())
    norms = family_norms(diff, plan)
    for family, share in shares.items():
        assert norms[family] <= math.sqrt(share) * delta * (1 + SLACK_TOLERANCE), (family, norms[family] / delta)
    if one_row_measured:
        for family in ("1-way", "2-way") + (("count",) if relation == AR else ()):
            assert norms[family] == pytest.approx(math.sqrt(shares[family]) * bare, rel=1e-9), family
    return total / delta


# -- through the library calls, many neighbours ------------------------------------------------------------------


@pytest.mark.parametrize("weights", sorted({(DEFAULT_GRID_WEIGHT, DEFAULT_INTERVAL_WEIGHT), (1, 1), (5, 3)}))
@pytest.mark.parametrize("relation", [AR, RO])
@pytest.mark.parametrize("holdout", [0.0, 0.2])
def test_neighbours_move_the_sampler_input_by_at_most_delta(monkeypatch, relation, holdout, weights):
    seen = capture_sampler(monkeypatch)
    rng = np.random.default_rng(31)
    worst = 0.0
    for trial in range(4):
        n = int(rng.integers(300, 700))
        table = private_table(rng, n)
        base = library_vector(table, relation, holdout, trial, seen, weights)
        n_measured = n - int(round(holdout * n))
        for _name, other in neighbours(rng, table, relation).items():
            diff = library_vector(other, relation, holdout, trial, seen, weights) - base
            # With no holdout an added or removed row is always measured: it moves one cell of every table.
            exact = holdout == 0 and relation == AR
            worst = max(worst, check_shift(diff, relation, n_measured, exact, weights, level_units=True))
    assert worst > 0.5  # the neighbours reach a large part of Delta


@pytest.mark.parametrize("relation", [AR, RO])
def test_a_workload_keeps_neighbours_within_delta_with_its_tables_in_the_pair_share(monkeypatch, relation):
    """The workload's 3-way table, at sqrt(units) the pair weight, moves the 2-way family by exactly its share."""
    seen = capture_sampler(monkeypatch)
    rng = np.random.default_rng(5)
    table = private_table(rng, 500)
    base = library_vector(table, relation, 0.0, 0, seen, workload=WORKLOAD)
    for _name, other in neighbours(rng, table, relation).items():
        diff = library_vector(other, relation, 0.0, 0, seen, workload=WORKLOAD) - base
        check_shift(diff, relation, 500, relation == AR, level_units=True, workload=WORKLOAD)


def test_an_extreme_replacement_meets_the_table_shares_exactly_under_replace_one(monkeypatch):
    seen = capture_sampler(monkeypatch)
    table = private_table(np.random.default_rng(4), 500)
    table["colour"], table["grade"], table["amount"] = "red", 1, table["amount"].clip(0, 400)
    table.loc[17, "amount"] = 0.0  # at the sentinel: its coordinate moves too
    replaced = table.copy()
    replaced.iloc[17] = pd.Series(EXTREME_ROW)
    diff = library_vector(replaced, RO, 0.0, 0, seen) - library_vector(table, RO, 0.0, 0, seen)
    check_shift(diff, RO, 500, one_row_measured=True, level_units=True)


def test_the_split_measures_a_neighbour_of_the_measured_part(monkeypatch):
    rng = np.random.default_rng(8)
    table = validate(private_table(rng, 800), SCHEMA).table
    for relation in (AR, RO):
        train, held = holdout_split.split_holdout(table, 0.2, 5, relation)
        assert len(held) == pytest.approx(160, abs=40 if relation == AR else 0)
        for name, other in neighbours(rng, table, relation).items():
            other_train, _ = holdout_split.split_holdout(validate(other, SCHEMA).table, 0.2, 5, relation)
            a = train.astype(str).agg("|".join, axis=1).value_counts()
            b = other_train.astype(str).agg("|".join, axis=1).value_counts()
            moved = int(a.sub(b, fill_value=0).abs().sum())
            assert moved <= (1 if relation == AR else 2), (relation, name, moved)
            if relation == RO:
                assert len(other_train) == len(train)  # the measured size is a function of the public n


# -- through the Dagster job --------------------------------------------------------------------------------------


def job_vector(tmp, table: pd.DataFrame, relation: str, name: str, monkeypatch, seen: list,
               dataset: str = SCHEMA.name, streamed: bool = False, workload: tuple = ()) -> np.ndarray:
    """Run the release job on ``table`` until the sampler would draw; return what it was handed. ``streamed``:
    the table as a folder of three CSV files (one empty), which the job streams (``private.partitions``)."""
    source = tmp / (name if streamed else f"{name}.csv")
    if streamed:
        source.mkdir()
        for part, rows in enumerate((table.iloc[:250], table.iloc[:0], table.iloc[250:])):
            rows.to_csv(source / f"part-{part}.csv", index=False)
    else:
        table.to_csv(source, index=False)
    job = build_definitions(release_resources(tmp)).resolve_job_def("release")
    config = ReleaseConfig(dataset=dataset, input_path=str(source), relation=relation, holdout_fraction=0.2,
                           workload=[list(entry) for entry in workload])
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(run_config=run_config_for(config), instance=instance, raise_on_error=False)
    assert not result.success and len(seen) == 1
    return seen.pop()


@pytest.mark.parametrize(("streamed", "workload"), [(False, ()), (True, ()), (False, WORKLOAD)])
@pytest.mark.parametrize("relation", [AR, RO])
def test_the_release_job_keeps_neighbours_within_delta(tmp_path, monkeypatch, relation, streamed, workload):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / f"{SCHEMA.name}.yaml").write_text(SCHEMA_YAML)
    monkeypatch.setenv("SPLICE_SCHEMA_DIR", str(tmp_path / "schemas"))
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        book.set_budget(SCHEMA.name, 10.0, 1e-6, relation)
    seen = capture_sampler(monkeypatch)
    rng = np.random.default_rng(2)
    table = private_table(rng, 600)
    base = job_vector(tmp_path, table, relation, "base", monkeypatch, seen, streamed=streamed, workload=workload)
    shifts = {}
    for index, (name, other) in enumerate(neighbours(rng, table, relation).items()):
        diff = job_vector(tmp_path, other, relation, f"neighbour{index}", monkeypatch, seen, streamed=streamed,
                          workload=workload) - base
        shifts[name] = check_shift(diff, relation, 600 - 120, None, workload=workload)
    assert max(shifts.values()) > 0.3, shifts
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        assert {e.status for e in book.entries(SCHEMA.name)} == {"aborted"}  # stopped before noise: no charge


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("relation", [AR, RO])
def test_the_release_job_keeps_neighbours_within_delta_in_its_dp_bounds(tmp_path, monkeypatch, relation, streamed):
    """With ``bounds: auto`` the first Gaussian draw is the bounds histograms (whole input, before the split):
    one row moves them by at most histogram_sensitivity, exactly that where it changes bucket in every histogram."""
    from splice_assets.private.bounds import histogram_sensitivity

    auto_yaml = SCHEMA_YAML.replace("name: toy_neighbours", "name: toy_neighbours_auto").replace(
        "bounds: [0, 1000], sentinels: [0]", "bounds: auto").replace("bounds: [18, 90]", "bounds: auto")
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "toy_neighbours_auto.yaml").write_text(auto_yaml)
    monkeypatch.setenv("SPLICE_SCHEMA_DIR", str(tmp_path / "schemas"))
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        book.set_budget("toy_neighbours_auto", 10.0, 1e-6, relation)
    seen = capture_sampler(monkeypatch)
    rng = np.random.default_rng(3)
    table = private_table(rng, 400)
    # The extreme row (1000, 90) then lies in other decades, so in other buckets of all four histograms.
    table["amount"], table["age"] = table["amount"].clip(1, 99), table["age"] % 9 + 1
    base = job_vector(tmp_path, table, relation, "base", monkeypatch, seen, "toy_neighbours_auto", streamed)
    bound = histogram_sensitivity(2, relation)
    for index, (name, other) in enumerate(neighbours(rng, table, relation).items()):
        shift = float(np.linalg.norm(
            job_vector(tmp_path, other, relation, f"n{index}", monkeypatch, seen, "toy_neighbours_auto", streamed)
            - base
        ))
        assert shift <= bound * (1 + 1e-12), (name, shift, bound)
        if "extreme" in name:
            assert shift == pytest.approx(bound), name
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        assert {e.status for e in book.entries("toy_neighbours_auto")} == {"aborted"}


def fixed_first_step(tmp_path, monkeypatch, relation: str, name: str, amount: str, age: str) -> list[np.ndarray]:
    """A toy schema ``name`` whose amount and age columns take the given entries, a budget for it, and a stand-in
    for the estimate's first-step sampler that records its input and hands every run the first run's (so all
    neighbours see the same resolved bounds). Returns the recorded inputs."""
    yaml_text = SCHEMA_YAML.replace("name: toy_neighbours", f"name: {name}").replace(
        "bounds: [0, 1000], sentinels: [0], candidates: [60, 1000]", amount).replace("bounds: [18, 90]", age)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / f"{name}.yaml").write_text(yaml_text)
    monkeypatch.setenv("SPLICE_SCHEMA_DIR", str(tmp_path / "schemas"))
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        book.set_budget(name, 10.0, 1e-6, relation)
    inputs: list[np.ndarray] = []
    fixed: dict[str, np.ndarray] = {}

    def first_step(values: np.ndarray, sigma: float) -> np.ndarray:
        inputs.append(np.array(values, dtype=np.float64, copy=True))
        fixed.setdefault("output", inputs[-1].copy())
        return fixed["output"].copy()

    monkeypatch.setattr(privacy, "gaussian_noise", first_step)
    return inputs


def captured_value_counts(monkeypatch) -> list[list]:
    """A stand-in for the estimate's second step: records each run's candidate counts and stops the run."""
    from splice_assets.private import bounds

    counts: list[list] = []

    def second_step(value_counts, columns, sigma, entropy):
        counts.append([(held.copy(), count.copy()) for held, count in value_counts])
        raise Captured

    monkeypatch.setattr(bounds, "select_values", second_step)
    return counts


def squared_shift(a: list, b: list) -> float:
    """Squared l2 distance of two runs' candidate counts (sparse: held index, count), column by column."""
    total = 0.0
    for (held_a, count_a), (held_b, count_b) in zip(a, b):
        both = np.union1d(held_a, held_b)
        dense_a = np.zeros(len(both))
        dense_b = np.zeros(len(both))
        dense_a[np.searchsorted(both, held_a)] = count_a
        dense_b[np.searchsorted(both, held_b)] = count_b
        total += float(np.sum((dense_a - dense_b) ** 2))
    return total


#: A run stopped after its estimate's noise: the estimate's spend stays counted; the measurement's part of the
#: release's reservation, which no draw claimed, is withdrawn (no noise was drawn for it).
STOPPED_AFTER_THE_ESTIMATE = {(True, "reserved"), (False, "aborted")}


def estimate_and_measurement(entries) -> set[tuple[bool, str]]:
    """(is the estimate, status) of each ledger entry."""
    return {(e.mechanism == ESTIMATE_MECHANISM, e.status) for e in entries}


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("relation", [AR, RO])
def test_the_release_job_keeps_neighbours_within_delta_in_its_dp_bounds_and_values(tmp_path, monkeypatch, relation,
                                                                                  streamed):
    """With ``decimals: auto`` and ``step: auto`` the first step holds a decimals or step histogram per such column
    beside the bounds histograms. With ``values: auto`` the estimate takes a second step, on the bounds the first
    resolved: each column's candidate counts (a second pass over a streamed input). As in the adaptive-composition
    argument, the stand-in hands every neighbour the same first-step output (the base table's exact histograms), so
    both see the same bounds; the two steps' shifts together stay within ``estimate_sensitivity``, and meet it where
    an added row changes bucket in every histogram and holds a candidate in every column. The run stops after the
    first step's noise, so the estimate's reservation stays counted."""
    from splice_assets.private.bounds import estimate_sensitivity

    name = "toy_neighbours_values"
    first_inputs = fixed_first_step(tmp_path, monkeypatch, relation, name, "bounds: auto, values: auto, decimals: auto",
                                    "bounds: [0, 100000], values: [5, auto], step: auto")
    counts = captured_value_counts(monkeypatch)
    rng = np.random.default_rng(4)
    table = private_table(rng, 400)
    table["amount"], table["age"] = table["amount"].clip(1, 99), table["age"] % 9 + 1
    base = job_vector(tmp_path, table, relation, "base", monkeypatch, first_inputs, name, streamed)
    base_counts = counts.pop()
    assert sum(len(held) for held, _ in base_counts) > 0
    # amount: bounds, decimals and values auto; age: values and step auto, its declared 5 counted in no step cell
    bound = estimate_sensitivity(1, 2, relation, decimals_columns=1, step_columns=1)
    for index, (label, other) in enumerate(neighbours(rng, table, relation).items()):
        step_one = job_vector(tmp_path, other, relation, f"n{index}", monkeypatch, first_inputs, name, streamed)
        shift = math.sqrt(float(np.sum((step_one - base) ** 2)) + squared_shift(counts.pop(), base_counts))
        assert shift <= bound * (1 + 1e-12), (label, shift, bound)
        if label.startswith("add an extreme row"):
            # Every histogram and age's candidates move by 1; amount's clipped top lands on its 0.01 grid only if
            # the resolved bound does: 5 or 6 of the 6 unit terms.
            assert shift >= math.sqrt(5 / 6) * bound * (1 - 1e-12), label
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        assert estimate_and_measurement(book.entries(name)) == STOPPED_AFTER_THE_ESTIMATE


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("relation", [AR, RO])
def test_the_release_job_keeps_neighbours_within_delta_in_a_proportions_fraction_counts(tmp_path, monkeypatch,
                                                                                        relation, streamed):
    """A proportion's candidates are its bounds and its simple fractions (0046); values written from float32 count
    toward them. One row still moves one candidate count of the column: the shift meets ``estimate_sensitivity``
    of one value column when the neighbour's row holds a candidate, and never exceeds it."""
    from splice_assets.private.bounds import estimate_sensitivity

    name = "toy_neighbours_fractions"
    first_inputs = fixed_first_step(tmp_path, monkeypatch, relation, name, "bounds: [0, 1], values: auto",
                                    "bounds: [18, 90]")
    counts = captured_value_counts(monkeypatch)
    rng = np.random.default_rng(5)
    table = private_table(rng, 400)
    share, pick = rng.uniform(size=400), rng.uniform(size=400)
    share[pick < 0.3], share[(pick >= 0.3) & (pick < 0.5)] = 2 / 3, 0.5
    table["amount"] = share.astype(np.float32).astype(np.float64)  # 2/3 as 0.6666666865348816
    base = job_vector(tmp_path, table, relation, "base", monkeypatch, first_inputs, name, streamed)
    [(held, count)] = counts.pop()
    assert int(count.sum()) == int(np.sum(pick < 0.5))  # every float32 2/3 and 1/2, and no uniform draw
    bound = estimate_sensitivity(0, 1, relation)
    for index, (label, other) in enumerate(neighbours(rng, table, relation).items()):
        step_one = job_vector(tmp_path, other, relation, f"n{index}", monkeypatch, first_inputs, name, streamed)
        shift = math.sqrt(float(np.sum((step_one - base) ** 2)) + squared_shift(counts.pop(), [(held, count)]))
        assert shift <= bound * (1 + 1e-12), (label, shift, bound)
        if "extreme" in label:  # its amount, 1000, is clipped onto the candidate 1: the bound under add-remove
            assert shift >= 1.0 - 1e-12, label


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("relation", [AR, RO])
def test_the_release_job_keeps_neighbours_within_delta_in_its_dp_knots(tmp_path, monkeypatch, relation, streamed):
    """With ``knots: auto`` the estimate's last step counts each such column's knot cells on the schema the first
    step resolved (a second pass over a streamed input). The stand-in hands every neighbour the base table's first
    step, so both see the same bounds and exact values; the two steps' shifts together stay within
    ``estimate_sensitivity`` and meet it when a row is added beyond every bound (each histogram moves by 1)."""
    from splice_assets.private import bounds
    from splice_assets.private.bounds import estimate_sensitivity

    name = "toy_neighbours_knots"
    first_inputs = fixed_first_step(tmp_path, monkeypatch, relation, name, "bounds: auto, knots: auto",
                                    "bounds: [18, 90], knots: auto")
    counts: list[np.ndarray] = []

    def knot_step(knot_counts, columns, sigma):
        dense = np.zeros((len(columns), bounds.KNOT_CELLS))
        for row, (held, count) in enumerate(knot_counts):
            dense[row, held] = count
        counts.append(dense)
        raise Captured

    monkeypatch.setattr(bounds, "select_knots", knot_step)
    rng = np.random.default_rng(5)
    table = private_table(rng, 400)
    base = job_vector(tmp_path, table, relation, "base", monkeypatch, first_inputs, name, streamed)
    base_counts = counts.pop()
    assert base_counts.sum(axis=1).min() > 200  # both columns counted (amount without its frequent zeros)
    bound = estimate_sensitivity(1, 0, relation, knots_columns=2)
    for index, (label, other) in enumerate(neighbours(rng, table, relation).items()):
        step_one = job_vector(tmp_path, other, relation, f"n{index}", monkeypatch, first_inputs, name, streamed)
        shift = math.sqrt(float(np.sum((step_one - base) ** 2)) + float(np.sum((counts.pop() - base_counts) ** 2)))
        assert shift <= bound * (1 + 1e-12), (label, shift, bound)
        if label.startswith("add an extreme row"):
            assert shift == pytest.approx(bound), label
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        assert estimate_and_measurement(book.entries(name)) == STOPPED_AFTER_THE_ESTIMATE
