"""``categories: auto``: open-domain categoricals selected by Gaussian thresholding in the DP estimate.

Statistical assertions state their tolerance; noise is seeded through the bench's hook (``bench.common.seeded_noise``)
where a test needs a fixed seed, and comes from OS entropy otherwise."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from bench.common import seeded_noise
from splice_assets.defaults import ESTIMATE_MECHANISM
from splice_assets.kinds import kind_of
from splice_assets.kinds.fields import OpenCategories, open_entry
from splice_assets.planning import selection_split
from splice_assets.private import bounds
from splice_assets.private.mechanism import compose_epsilon, split_privacy
from splice_assets.schema import SchemaError, parse_schema, schema_to_dict


def _schema(entry: dict, **extra: object) -> object:
    return parse_schema({"name": "t", "version": 1, "n_min": 10, "columns": [
        {"name": "c", "kind": "categorical", **entry}, {"name": "x", "kind": "continuous", "bounds": [0, 1]}],
        **extra})


def _spec(cap: int = 100, public: tuple = ()) -> object:
    raw = {"name": "c", "kind": "categorical", "categories": [*public, "auto"], "other": "rest",
           "max_categories": cap}
    from splice_assets.schema import ColumnSpec

    return ColumnSpec(name="c", kind="categorical", **kind_of("categorical").parse_fields("column 'c'", raw))


# -- the schema ------------------------------------------------------------------------------------------------------
def test_parse_auto_and_partial_list() -> None:
    spec = _schema({"categories": ["a", "auto"], "other": "rest"}).columns[0]
    assert spec.categories == ("a", OpenCategories(100), "rest")
    assert kind_of("categorical").categories_of(spec) == ("a", "rest")
    assert bounds.categories_auto_columns(_schema({"categories": "auto", "other": "rest"})) != []
    assert bounds.needs_estimate(_schema({"categories": "auto", "other": "rest"}))


@pytest.mark.parametrize(("entry", "message"), [
    ({"categories": "auto"}, "needs an other"),
    ({"categories": ["a", "auto", "auto"], "other": "r"}, "auto may appear once"),
    ({"categories": ["a", "AUTO ", "auto"], "other": "r"}, "cannot be named auto"),
])
def test_schema_errors_quote_the_entry(entry: dict, message: str) -> None:
    with pytest.raises(SchemaError, match=message) as caught:
        _schema(entry)
    assert "entry:" in str(caught.value)


def test_ordinal_refuses_auto() -> None:
    with pytest.raises(SchemaError, match="belongs to categorical"):
        parse_schema({"name": "t", "version": 1, "n_min": 10, "columns": [
            {"name": "c", "kind": "ordinal", "categories": "auto", "other": "r"}]})


@pytest.mark.parametrize("cap", [0, -1, 1.5, True, "10", 10_001])
def test_max_categories_is_validated(cap: object) -> None:
    raw = {"categories": "auto", "other": "r", "max_categories": cap}
    with pytest.raises(SchemaError, match="max_categories must be") as caught:
        kind_of("categorical").parse_fields("column 'c'", raw)
    assert repr(cap) in str(caught.value)
    with pytest.raises(SchemaError, match="belongs to categories: auto"):
        kind_of("categorical").parse_fields("column 'c'", {"categories": ["a"], "max_categories": 5})


def test_unresolved_schema_round_trips() -> None:
    schema = _schema({"categories": ["a", "auto"], "other": "rest"})
    assert parse_schema(schema_to_dict(schema)) == schema
    assert _spec(7).categories != _spec(8).categories  # the cap is part of the entry


# -- the threshold ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_threshold_spends_the_charged_delta_by_opendps_map(relation: str) -> None:
    sigma, column_delta = 30.0, 1e-7
    tau = bounds.category_threshold(sigma, column_delta, relation)
    l0 = 2 if relation == "replace-one" else 1
    one_row = 1.0 - NormalDist(1.0, sigma).cdf(tau)
    assert bounds.threshold_delta(sigma, tau, relation) <= column_delta
    assert l0 * one_row == pytest.approx(column_delta, rel=1e-3)


def test_value_held_by_k_rows_is_kept_with_the_thresholds_probability() -> None:
    """Seed 7, 4,000 keys held by k rows each: the kept share within 4.5 binomial sd of Phi((k - tau) / sigma)."""
    spec, sigma, tau = _spec(10_000), 2.0, 10.0
    for k in (8, 10, 12):
        counts = {f"k{i}": k for i in range(4000)}
        with seeded_noise(7):
            kept = bounds.select_categories([counts], [spec], sigma, tau)["c"]
        expected = 1.0 - NormalDist(k, sigma).cdf(tau)
        sd = math.sqrt(expected * (1 - expected) / 4000)
        assert abs(len(kept) / 4000 - expected) <= 4.5 * sd + 1e-12


def test_value_held_by_one_row_is_almost_never_released() -> None:
    """At the product's threshold (delta 1e-7 per column, sigma 30) 20,000 one-row keys expect 1e-3 to pass."""
    spec, sigma = _spec(10_000), 30.0
    tau = bounds.category_threshold(sigma, 1e-7, "replace-one")
    kept = bounds.select_categories([{f"u{i}": 1 for i in range(20_000)}], [spec], sigma, tau)["c"]
    assert kept == ()


def test_cap_keeps_the_largest_noisy_counts_sorted() -> None:
    spec = _spec(3)
    counts = {f"v{i}": 10_000 + 1_000 * i for i in range(10)}
    assert bounds.select_categories([counts], [spec], 1.0, 5.0)["c"] == ("v7", "v8", "v9")


# -- the neighbours, through the estimate ----------------------------------------------------------------------------
DRAWS = 3000


def _kept_target(relation: str, holds_target: bool, monkeypatch: pytest.MonkeyPatch) -> float:
    """Share of DRAWS estimates (OS entropy) that keep key "t": a neighbour holds it in one row (and under
    replace-one the other neighbour's row holds "u" instead); the threshold is lowered to 1 + 1 sd so that the
    charged event is common."""
    schema = parse_schema({"name": "t", "version": 1, "n_min": 10, "columns": [
        {"name": "c", "kind": "categorical", "categories": "auto", "other": "rest"}]})
    monkeypatch.setattr(bounds, "category_threshold", lambda sigma, delta, relation: 1.0 + sigma)
    shared = {"a": 50}
    if holds_target:
        counts = {**shared, "t": 1}
    else:
        counts = {**shared, "u": 1} if relation == "replace-one" else dict(shared)
    hits = 0
    for _ in range(DRAWS):
        resolved, estimate = bounds.estimate_bounds_from_counts(
            np.zeros((0, bounds.COARSE.size + bounds.FINE.size)), schema, 1.0, 1e-6, None, "r", relation,
            categories=[counts])
        hits += "t" in resolved.columns[0].categories
        assert estimate.selection_delta == pytest.approx(1e-7)
    return hits / DRAWS


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_neighbours_differ_only_by_the_charged_delta(relation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key held by one row on one side only is kept there with probability q1 = P[N(1, s^2) > 1 + s], the delta
    the map charges per one-sided key (OpenDP's map: l0 q1); never on the other side. 4.5 binomial sd."""
    sigma = bounds.estimate_sensitivity(0, 0, relation, category_columns=1)
    q1 = 1.0 - NormalDist(1.0, sigma).cdf(1.0 + sigma)
    charged = bounds.threshold_delta(sigma, 1.0 + sigma, relation)
    assert charged >= q1 * (1 - 1e-9)
    with_t, without_t = _kept_target(relation, True, monkeypatch), _kept_target(relation, False, monkeypatch)
    assert without_t == 0.0
    assert abs(with_t - q1) <= 4.5 * math.sqrt(q1 * (1 - q1) / DRAWS)


# -- accounting and the release --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (1.0, 1e-9), (0.3, 1e-9)])
def test_gaussian_parts_compose_to_delta_minus_the_selection(epsilon: float, delta: float) -> None:
    held = bounds.SELECTION_DELTA_SHARE * delta
    main_epsilon, estimate = selection_split(epsilon, delta, 0.05, held)
    assert main_epsilon == split_privacy(epsilon, delta, 0.05)[0]
    main = split_privacy(epsilon, delta, 0.05)
    from splice_assets.private.mechanism import calibrate

    main_multiplier = calibrate(main[0], delta, 1000, 1, 1).noise_multiplier
    assert compose_epsilon([estimate, main_multiplier], delta - held) <= epsilon + 1e-6


def _toy_table(rng: np.random.Generator, n: int = 6000) -> pd.DataFrame:
    frequent = [f"city{i}" for i in range(5)]
    rare = [f"town{i}" for i in range(295)]
    values = np.where(rng.random(n) < 0.9, rng.choice(frequent, n), rng.choice(rare, n))
    return pd.DataFrame({"c": values, "x": rng.random(n)})


def test_fit_resolves_the_list_and_samples_it() -> None:
    from splice_assets import Synthesizer

    schema = _schema({"categories": "auto", "other": "rest"})
    synth = Synthesizer(schema, epsilon=1.0, delta=1e-6).fit(_toy_table(np.random.default_rng(0)), ledger=None)
    resolved = synth.schema.columns[0]
    assert open_entry(resolved.categories) is None
    assert set(resolved.categories) == {*(f"city{i}" for i in range(5)), "rest"}
    assert parse_schema(schema_to_dict(synth.schema)) == synth.schema
    assert synth.bounds is not None and synth.bounds.found_categories["c"] == tuple(f"city{i}" for i in range(5))
    sample = synth.sample(2000, seed=0)
    assert set(sample["c"].astype(str)) >= {"city0", "city4"}
    assert set(sample["c"].astype(str)) <= {*(f"city{i}" for i in range(5)), "rest"}
    assert (sample["c"].astype(str) == "rest").any()


def test_schema_init_proposes_auto_for_many_distinct_values() -> None:
    many = pd.Series([f"v{i % 300}" for i in range(3000)])
    assert kind_of("categorical").draft(many, False) == {"categories": "auto", "other": "other"}
    assert kind_of("categorical").draft(pd.Series(["a", "b"] * 50), False) == {"categories": []}


# -- a partitioned input ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_partitioned_input_counts_keys_per_partition_and_adds_them(fmt: str, tmp_path: object) -> None:
    """Uneven partitions (row groups of 130 rows, an empty file): the scan's key counts are the whole table's, and
    the estimate (seeded) keeps the same categories as the whole-table path."""
    from pathlib import Path

    from splice_assets import Synthesizer
    from splice_assets.private import partitions

    table = _toy_table(np.random.default_rng(1), 3000)
    table.loc[7::301, "c"] = None  # missing cells count nowhere
    folder = Path(str(tmp_path)) / fmt
    folder.mkdir()
    if fmt == "parquet":
        table.iloc[:1000].to_parquet(folder / "a.parquet", index=False, row_group_size=130)
        table.iloc[:0].to_parquet(folder / "b.parquet", index=False)
        table.iloc[1000:].to_parquet(folder / "c.parquet", index=False, row_group_size=900)
    else:
        table.iloc[:1700].to_csv(folder / "a.csv", index=False)
        table.iloc[:0].to_csv(folder / "b.csv", index=False)
        table.iloc[1700:].to_csv(folder / "c.csv.gz", index=False)
    schema = _schema({"categories": ["city0", "auto"], "other": "rest"})
    columns = bounds.categories_auto_columns(schema)
    scan = partitions.scan_source(partitions.list_partitions(str(folder)), schema, batch_rows=400)
    assert list(scan.category_counts) == bounds.exact_category_counts(table, columns)
    assert "city0" not in scan.category_counts[0] and sum(scan.category_counts[0].values()) > 2000

    whole = Synthesizer(schema, epsilon=1.0, delta=1e-6)
    streamed = Synthesizer(schema, epsilon=1.0, delta=1e-6)
    with seeded_noise(5):
        whole.prepare(table, None)
    with seeded_noise(5):
        streamed.scan_source(str(folder), None)
    assert streamed.schema == whole.schema
    assert open_entry(streamed.schema.columns[0].categories) is None
    assert streamed.bounds is not None and streamed.bounds.found_categories["c"] == tuple(f"city{i}" for i in
                                                                                           range(1, 5))
    assert streamed.bounds.selection_delta == pytest.approx(1e-7)
    if fmt == "parquet":  # charged: the estimate's entry stores the threshold's delta, counted in the lifetime
        from splice_assets.private.ledger import BudgetLedger, gaussian_delta

        with BudgetLedger(f"sqlite:///{Path(str(tmp_path)) / 'ledger.sqlite'}") as book:
            book.set_budget("t", 5.0, 1e-6, actor="t")
            Synthesizer(schema, epsilon=1.0, delta=1e-6).scan_source(str(folder), book, "r1")
            held = {e.mechanism: e.selection_delta for e in book.entries("t") if e.counted}
            assert held[ESTIMATE_MECHANISM] == pytest.approx(1e-7) and sum(held.values()) == held[ESTIMATE_MECHANISM]
            assert book.selection_spent("t") == held[ESTIMATE_MECHANISM]
            gaussian, pure = book.counted("t")
            assert book.spent("t")[0] == compose_epsilon(gaussian, gaussian_delta(1e-6, [1e-7]), pure)
