"""Conditional sampling (``Synthesizer.sample(n, where=...)``, ``splice sample --where``, the MLflow model's
``where``): the conditions' parse and validation, and the conditional law against the model's own.

The statistical tests fit one toy table with strong dependence (a status that sets the amount's level, an item count
that follows the amount) at epsilon = 10 and compare a conditional sample with the rows of a large unconditional
sample of the same model that meet the condition: the model's conditional law, estimated without conditioning. The
tolerances are total variation distances (TVD) over fixed histograms; each is stated with what it was measured at.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
import pytest

from splice_assets import Synthesizer
from splice_assets.conditions import ConditionProbabilityError, Conditions, parse_where, parse_where_text
from splice_assets.layout import data_layout, marginal_cells
from splice_assets.postprocess.draws import condition_model
from splice_assets.postprocess.field import fit_field, sample_cells
from splice_assets.release.mlflow_model import parse_requests
from splice_assets.sampling import sample_cube, sample_table, write_partitions
from splice_assets.schema import parse_schema

SCHEMA = parse_schema({
    "name": "orders", "version": 1, "n_min": 2,
    "columns": [
        {"name": "status", "kind": "categorical", "categories": ["paid", "open", "void"]},
        {"name": "amount", "kind": "continuous", "bounds": [0, 200]},
        {"name": "items", "kind": "integer", "bounds": [0, 20]},
    ],
})
AMOUNT_BINS = np.linspace(0, 200, 21)
ITEM_BINS = np.arange(-0.5, 21)


def orders(n: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """paid ~ 60% (amount about 50), open ~ 39% (about 140), void ~ 1% (about 100); items about amount / 10."""
    rng = np.random.default_rng(seed)
    status = rng.choice(["paid", "open", "void"], n, p=[0.6, 0.39, 0.01])
    centre = np.select([status == "paid", status == "open"], [50.0, 140.0], 100.0)
    spread = np.select([status == "paid", status == "open"], [10.0, 15.0], 5.0)
    amount = np.clip(rng.normal(centre, spread), 0, 200)
    items = np.clip(np.round(amount / 10 + rng.normal(0, 1, n)), 0, 20).astype(int)
    return pd.DataFrame({"status": status, "amount": amount, "items": items})


def tvd(a: pd.Series, b: pd.Series, bins: np.ndarray) -> float:
    ha = np.histogram(a, bins)[0] / len(a)
    hb = np.histogram(b, bins)[0] / len(b)
    return float(0.5 * np.abs(ha - hb).sum())


def category_tvd(a: pd.Series, b: pd.Series) -> float:
    pa, pb = a.astype(str).value_counts(normalize=True), b.astype(str).value_counts(normalize=True)
    return float(0.5 * pa.sub(pb, fill_value=0.0).abs().sum())


@pytest.fixture(scope="module")
def synth() -> Synthesizer:
    return Synthesizer(SCHEMA, epsilon=10, delta=1e-6).fit(orders(), ledger=None)


@pytest.fixture(scope="module")
def unconditional(synth: Synthesizer) -> pd.DataFrame:
    return synth.sample(400_000, seed=1)


# -- the model's conditional law -----------------------------------------------------------------------------------


def test_category_condition_is_the_models_conditional(synth: Synthesizer, unconditional: pd.DataFrame) -> None:
    rows = synth.sample(20_000, seed=2, where={"status": "paid"})
    assert len(rows) == 20_000 and (rows["status"] == "paid").all()
    reference = unconditional[unconditional["status"] == "paid"]
    # Measured 0.001-0.0035 (amount) and 0.001-0.005 (items) over refits; two halves of the reference: 0.003-0.005.
    assert tvd(rows["amount"], reference["amount"], AMOUNT_BINS) < 0.02
    assert tvd(rows["items"], reference["items"], ITEM_BINS) < 0.02
    report = rows.attrs["condition"]
    assert report["rejected"] == 0 and report["rounds"] == 1
    assert abs(report["probability"] - len(reference) / len(unconditional)) < 0.02


def test_range_condition_is_the_models_conditional(synth: Synthesizer, unconditional: pd.DataFrame) -> None:
    rows = synth.sample(20_000, seed=3, where={"amount": (40, 60)})
    assert len(rows) == 20_000 and rows["amount"].between(40, 60).all()
    reference = unconditional[unconditional["amount"].between(40, 60)]
    # Measured below 0.002 (status), 0.001 (amount in [40, 60]), 0.002-0.005 (items).
    assert category_tvd(rows["status"], reference["status"]) < 0.02
    assert tvd(rows["amount"], reference["amount"], np.linspace(40, 60, 11)) < 0.03
    assert tvd(rows["items"], reference["items"], ITEM_BINS) < 0.03
    assert rows.attrs["condition"]["rejected_share"] < 0.05


def test_integer_range_and_two_columns(synth: Synthesizer, unconditional: pd.DataFrame) -> None:
    rows = synth.sample(10_000, seed=4, where="status in ('paid', 'void') and items between 3 and 5")
    assert rows["status"].isin(["paid", "void"]).all() and rows["items"].between(3, 5).all()
    reference = unconditional[unconditional["status"].isin(["paid", "void"]) & unconditional["items"].between(3, 5)]
    assert tvd(rows["items"], reference["items"], ITEM_BINS) < 0.03
    assert tvd(rows["amount"], reference["amount"], AMOUNT_BINS) < 0.05


def test_rare_condition_returns_every_row_quickly(synth: Synthesizer, unconditional: pd.DataFrame) -> None:
    start = time.perf_counter()
    rows = synth.sample(20_000, seed=5, where={"status": "void"})
    seconds = time.perf_counter() - start
    assert len(rows) == 20_000 and (rows["status"] == "void").all()
    report = rows.attrs["condition"]
    assert 0.002 < report["probability"] < 0.03  # about 1% of the model's mass
    assert report["rounds"] == 1 and seconds < 20  # no rejection loop: about 0.1 s on 2 cores
    reference = unconditional[unconditional["status"] == "void"]  # about 4,000 rows
    # Measured 0.016-0.035 (amount), 0.024-0.045 (items) over refits; two halves of the reference: 0.02-0.04.
    assert tvd(rows["amount"], reference["amount"], AMOUNT_BINS) < 0.1
    assert tvd(rows["items"], reference["items"], ITEM_BINS) < 0.1


def test_zero_probability_condition_errors(synth: Synthesizer) -> None:
    model = synth.model
    assert model is not None
    p = model.params
    probs = list(p.probs)
    probs[0] = probs[0] * np.array([1.0, 1.0, 0.0])  # status's table: no component ever draws "void"
    probs[0] = probs[0] / probs[0].sum(axis=1, keepdims=True)
    never = dataclasses.replace(model, params=dataclasses.replace(p, probs=tuple(probs)), links=())
    with pytest.raises(ConditionProbabilityError, match=r"\(near\) zero probability"):
        sample_table(never, SCHEMA, 100, 0, where={"status": "void"})


def test_a_condition_the_draws_do_not_meet_errors_without_looping(synth: Synthesizer, monkeypatch) -> None:
    monkeypatch.setattr(Conditions, "holds", lambda self, frame, schema: np.zeros(len(frame), dtype=bool))
    with pytest.raises(ConditionProbabilityError, match=r"only 0 of 1,000 rows"):
        synth.sample(1_000, seed=0, where={"status": "paid"})


def test_no_condition_is_the_unconditional_sample(synth: Synthesizer) -> None:
    pd.testing.assert_frame_equal(synth.sample(500, seed=7, where=None), synth.sample(500, seed=7))
    pd.testing.assert_frame_equal(synth.sample(500, seed=7, where={"status": "paid"}),
                                  synth.sample(500, seed=7, where="status == 'paid'"))


def test_field_gibbs_is_clamped_to_the_condition(synth: Synthesizer) -> None:
    """A pairwise field's conditional (clamped Gibbs sweeps) against its unconditional cells that meet the
    condition: the field's own law, before matching."""
    model = synth.model
    assert model is not None and model.marginal_targets is not None
    bins, layout = model.marginal_targets.numeric_bins, data_layout(model.layout)
    cells = marginal_cells(sample_cube(model, 12_500, 0), layout, bins)
    field = fit_field(cells, layout, bins, np.random.default_rng(0))
    with_field = dataclasses.replace(model, field=field)
    weights = parse_where({"status": "void"}, SCHEMA).level_weights(SCHEMA, model.layout)
    conditioned = condition_model(with_field, weights).model
    assert conditioned.field is not None
    rng = np.random.default_rng(1)
    drawn = sample_cells(conditioned.field, layout, 20_000, rng)
    assert (drawn[:, 0] == 2).all()
    free = sample_cells(dataclasses.replace(field, sweeps=conditioned.field.sweeps), layout, 1_000_000, rng)
    reference = free[free[:, 0] == 2]
    for i in (1, 2):  # amount's and items' cells; measured 0.03 against a reference of about 10,000 rows
        a = np.bincount(drawn[:, i], minlength=bins) / len(drawn)
        b = np.bincount(reference[:, i], minlength=bins) / len(reference)
        assert 0.5 * np.abs(a - b).sum() < 0.06


def test_write_partitions_under_a_condition(synth: Synthesizer, tmp_path) -> None:
    model = synth.model
    assert model is not None
    urls = write_partitions(model, SCHEMA, 1_500, 0, str(tmp_path), rows_per_partition=1_000,
                            where="amount >= 150")
    table = pd.concat([pd.read_parquet(url) for url in urls])
    assert len(table) == 1_500 and (table["amount"] >= 150).all()


# -- parse and validation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("status == 'paid'", {"status": "paid"}),
    ('status == "paid"', {"status": "paid"}),
    ("status in ('paid', 'open')", {"status": ["paid", "open"]}),
    ("amount >= 3", {"amount": (3, None)}),
    ("amount <= 5.5", {"amount": (None, 5.5)}),
    ("amount >= 3 and amount <= 5", {"amount": (3, 5)}),
    ("amount between 1 and 2", {"amount": (1, 2)}),
    ("status == 'paid' and amount between 1 and 2 AND `items` >= 4",
     {"status": "paid", "amount": (1, 2), "items": (4, None)}),
])
def test_where_text(text: str, expected: dict) -> None:
    assert parse_where_text(text) == expected


@pytest.mark.parametrize("text", [
    "status = 'paid'", "status != 'paid'", "amount > 3", "status == paid", "status == 'paid' or amount <= 3",
    "amount between 1", "amount >= 3 amount <= 5", "", "status == 'paid' and", "amount >= 3 and amount >= 4",
])
def test_where_text_refuses_and_quotes(text: str) -> None:
    with pytest.raises(ValueError, match="where") as error:
        parse_where_text(text)
    if text.strip():
        assert repr(text) in str(error.value) or "two >= clauses" in str(error.value)


@pytest.mark.parametrize(("where", "message"), [
    ({"state": "paid"}, "unknown column 'state'"),
    ({"status": "refunded"}, "'refunded' is not one of its categories"),
    ({"status": []}, "an empty set of categories"),
    ({"amount": (60, 40)}, r"column 'amount': the range \(60, 40\) is empty"),
    ({"amount": (150, 250)}, r"column 'amount': \(150, 250\) reaches outside its bounds \[0, 200\]"),
    ({"amount": 300}, r"column 'amount': 300 reaches outside its bounds"),
    ({"amount": "many"}, r"column 'amount': 'many' is not a number"),
    ({"amount": (1, 2, 3)}, r"a range is \(lo, hi\)"),
    ("status == 'refunded'", "'refunded' is not one of its categories"),
])
def test_parse_where_refuses_naming_the_column(where: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_where(where, SCHEMA)  # type: ignore[arg-type]


def test_parse_where_reads_categories_by_key_and_open_ends() -> None:
    conditions = parse_where({"status": ["PAID ", "void"], "amount": (None, 20)}, SCHEMA)
    assert conditions.describe() == "status in ('paid', 'void') and amount between 0 and 20"


def test_mlflow_requests_carry_where() -> None:
    assert parse_requests({"n_rows": 5}, 0, {"where": "status == 'paid'"}) == [(5, 0, "status == 'paid'")]
    assert parse_requests({"n_rows": 5}, 0, {"where": ""}) == [(5, 0, None)]
    frame = pd.DataFrame({"n_rows": [5, 6], "where": ["amount >= 3", None]})
    requests = parse_requests(frame, 1, {"where": "status == 'open'"})
    assert requests == [(5, 1, "amount >= 3"), (6, 1, "status == 'open'")]


def test_cli_sample_where(synth: Synthesizer, tmp_path, monkeypatch) -> None:
    """``splice sample RELEASE --where ...`` on a release folder holding the public model and schema."""
    import yaml
    from click.testing import CliRunner

    from splice_assets import cli
    from splice_assets.schema import schema_to_dict
    from splice_assets.synthetic import save_model

    assert synth.model is not None
    public = tmp_path / "public"
    save_model(synth.model, public / "model")
    (public / "schema.yaml").write_text(yaml.safe_dump(schema_to_dict(SCHEMA)))
    release = type("Release", (), {"public_dir": public, "manifest": lambda self: {"parameters": {"seed": 0}}})()
    monkeypatch.setattr(cli, "find_release", lambda release_id: release)
    runner = CliRunner()
    out = tmp_path / "rows.csv"
    result = runner.invoke(cli.main, ["sample", "r1", "-n", "300", "--out", str(out),
                                      "--where", "status == 'open' and amount between 100 and 180"])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = pd.read_csv(out)
    assert len(rows) == 300 and (rows["status"] == "open").all() and rows["amount"].between(100, 180).all()
    assert "where status == 'open' and amount between 100 and 180: probability" in result.stderr
    for where, quoted in (("status = 'open'", "\"status = 'open'\""), ("status == 'lost'", "'lost'")):
        result = runner.invoke(cli.main, ["sample", "r1", "-n", "5", "--where", where])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
        assert result.stderr.startswith("Error: where") and quoted in result.stderr, result.stderr


def test_text_ranges_on_numeric_categories() -> None:
    """On a discrete column whose categories are numbers (an ordinal's codes) a text range takes the categories in
    it; on one with text categories it is refused."""
    schema = parse_schema({"name": "ranks", "version": 1, "n_min": 2, "columns": [
        {"name": "grade", "kind": "ordinal", "categories": [1, 2, 3, 4, 5]},
        {"name": "status", "kind": "categorical", "categories": ["paid", "open"]},
    ]})
    assert parse_where("grade >= 3", schema).describe() == "grade in (3, 4, 5)"
    assert parse_where("grade between 2 and 3", schema).describe() == "grade in (2, 3)"
    with pytest.raises(ValueError, match="no category lies in the range"):
        parse_where("grade >= 9", schema)
    with pytest.raises(ValueError, match="categories that are not numbers"):
        parse_where("status >= 3", schema)
