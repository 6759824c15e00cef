"""``splice plan``: golden calibration numbers, ledger budget, one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from splice_assets.cli import main
from splice_assets.defaults import default_pair_share
from splice_assets.fine_cells import DEFAULT_GRID_WEIGHT, DEFAULT_INTERVAL_WEIGHT
from splice_assets.layout import harmonic
from splice_assets.private.ledger import BudgetLedger
from splice_assets.private.mechanism import DEFAULT_MARGINAL_SHARE
from splice_assets.private.row_count import input_row_count
from splice_assets.private.validation import read_table
from splice_assets.schema import load_schema


@pytest.fixture
def schema_file(tmp_path) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "toy",
                "version": 2,
                "n_min": 1000,
                "columns": [
                    {"name": "age", "kind": "integer", "bounds": [0, 120]},
                    {"name": "colour", "kind": "categorical", "categories": ["red", "green"]},
                ],
            }
        )
    )
    return path


@pytest.fixture
def ledger_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def plan_json(schema_file, ledger_url, *extra: str, holdout: str = "0") -> dict:
    """``plan --json``; at ``--holdout 0`` by default, so that --n is the measured n of the golden numbers."""
    result = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--json", "--holdout", holdout,
                 *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize(
    ("eps", "delta", "ratio"),
    [("1", "1e-6", 4.2247), ("0.5", "1e-6", 8.0576), ("3", "1e-6", 1.5439), ("1", "1e-9", 5.4953)],
)
def test_plan_json_golden(schema_file, ledger_url, eps, delta, ratio):
    out = plan_json(
        schema_file,
        ledger_url,
        "--n",
        "20000",
        "--epsilon",
        eps,
        "--delta",
        delta,
        "--marginal-share",
        "0",
        "--pair-share",
        "0",
        "--L",
        "1024",
    )
    for key in ("sensitivity", "sigma", "epsilon", "delta", "L", "k", "n", "noise_std_per_order", "budget_remaining"):
        assert key in out
    assert (out["n"], out["L"], out["k"]) == (20000, 1024, 16)
    assert (out["epsilon"], out["delta"]) == (float(eps), float(delta))
    delta_exact = 2 / 20000 * math.sqrt(1024 * harmonic(16))
    assert out["sensitivity"] == pytest.approx(delta_exact * (1 + 1e-9), rel=1e-12)
    assert round(out["sigma"] / out["sensitivity"], 4) == ratio
    assert out["noise_std_per_order"] == pytest.approx([out["sigma"] * math.sqrt(j) for j in range(1, 17)])
    assert out["budget_remaining"] is None and out["budget"] is None
    assert out["relation"] == "replace-one" and out["dataset"] == "toy"


def test_plan_add_remove_shows_sums_and_the_noise_on_frequencies(schema_file, ledger_url):
    out = plan_json(
        schema_file, ledger_url, "--n", "10000", "--epsilon", "1", "--delta", "1e-9", "--L", "64", "--k", "4",
        "--marginal-share", "0", "--pair-share", "0", "--relation", "add-remove",
    )
    assert out["relation"] == "add-remove"
    # Moments keep 0.99 of Delta^2, the count 0.01: Delta = sqrt(L H_k / 0.99), independent of n.
    moments = 64 * (1 + 1 / 2 + 1 / 3 + 1 / 4)
    assert out["sensitivity"] == pytest.approx(math.sqrt(moments / 0.99), rel=1e-4)
    assert out["count_noise_std"] == pytest.approx(out["sigma"] / math.sqrt(0.01 * moments / 0.99), rel=1e-6)
    # On frequencies (divided by n) a moment has half the noise of replace-one, up to the count's share.
    replace = plan_json(
        schema_file, ledger_url, "--n", "10000", "--epsilon", "1", "--delta", "1e-9", "--L", "64", "--k", "4",
        "--marginal-share", "0", "--pair-share", "0",
    )
    ratio = out["noise_std_per_order"][0] / replace["noise_std_per_order"][0]
    assert ratio == pytest.approx(0.5 / math.sqrt(0.99), rel=1e-4)


def test_plan_golden_value_and_options(schema_file, ledger_url):
    out = plan_json(
        schema_file, ledger_url, "--n", "10000", "--epsilon", "1", "--delta", "1e-9", "--L", "64", "--k", "4",
        "--marginal-share", "0", "--pair-share", "0",
    )
    assert (out["L"], out["k"]) == (64, 4)
    assert out["sensitivity"] == pytest.approx(2 / 10000 * math.sqrt(64 * (1 + 1 / 2 + 1 / 3 + 1 / 4)), rel=1e-8)
    assert out["sigma"] == pytest.approx(out["sensitivity"] * 5.4953, rel=1e-4)
    assert len(out["noise_std_per_order"]) == 4


def test_plan_default_includes_the_marginal_queries(schema_file, ledger_url):
    paper = plan_json(
        schema_file, ledger_url, "--n", "20000", "--epsilon", "1", "--delta", "1e-9", "--marginal-share", "0",
        "--pair-share", "0",
    )
    default = plan_json(schema_file, ledger_url, "--n", "20000", "--epsilon", "1", "--delta", "1e-9")
    share, pair_share = DEFAULT_MARGINAL_SHARE, default_pair_share(load_schema(schema_file))
    assert default["marginal_share"] == share and default["pair_share"] == pair_share
    # age's per-value fine table counts DEFAULT_GRID_WEIGHT times: the 1-way share is share x (2 + r) / 3
    one_way = share * (2 + DEFAULT_GRID_WEIGHT) / 3
    assert default["one_way_share"] == pytest.approx(one_way)
    ratio = 1 / (1 - one_way - pair_share)
    assert (default["sensitivity"] / paper["sensitivity"]) ** 2 == pytest.approx(ratio, rel=1e-6)
    assert round(default["sigma"] / default["sensitivity"], 4) == 5.4953  # same privacy, larger Delta
    assert default["marginal_noise_std"] > 0 and paper["marginal_noise_std"] is None
    ratio = default["marginal_noise_std"] / default["value_noise_std"]
    assert ratio == pytest.approx(math.sqrt(DEFAULT_GRID_WEIGHT)) and paper["value_noise_std"] is None
    assert default["pair_noise_std"] > 0 and paper["pair_noise_std"] is None and paper["pairs"] == 0


def test_plan_states_the_noise_of_a_fine_interval(tmp_path, ledger_url):
    """California's schema has fine tables of both kinds: an interval's frequency carries 1/sqrt(interval_weight)
    of a 1-way frequency's noise, a value's 1/sqrt(grid_weight); the text output says so too."""
    schema = Path(__file__).resolve().parents[1] / "schemas" / "california_housing.yaml"
    out = plan_json(schema, ledger_url, "--n", "20000", "--epsilon", "1", "--delta", "1e-9")
    assert out["marginal_noise_std"] / out["interval_noise_std"] == pytest.approx(math.sqrt(DEFAULT_INTERVAL_WEIGHT))
    assert out["marginal_noise_std"] / out["value_noise_std"] == pytest.approx(math.sqrt(DEFAULT_GRID_WEIGHT))
    text = run("plan", "--schema", str(schema), "--ledger-url", ledger_url, "--n", "20000", "--epsilon", "1",
               "--delta", "1e-9", "--holdout", "0").output
    assert f"fine interval's frequency in a numeric column's fine table: {out['interval_noise_std']:.6g}" in text


def test_plan_states_what_an_open_category_list_can_keep(tmp_path, ledger_url):
    """With ``categories: auto`` the plan gives the rows a value must hold to be kept: the threshold the release's
    estimate draws against (``bounds.category_threshold`` at its sigma), which falls as epsilon grows."""
    schema = tmp_path / "shop.yaml"
    schema.write_text("name: shop\nversion: 1\nn_min: 1000\ncolumns:\n"
                      "  - {name: zip, kind: categorical, categories: auto, other: other}\n"
                      "  - {name: amount, kind: continuous, bounds: [0, 100]}\n")
    rows = {eps: plan_json(schema, ledger_url, "--n", "5000", "--epsilon", eps, "--delta", "1e-9",
                           "--relation", "add-remove")["category_threshold_rows"] for eps in ("1", "4")}
    assert 10 < rows["4"] < rows["1"] < 2_000
    text = run("plan", "--schema", str(schema), "--ledger-url", ledger_url, "--n", "5000", "--epsilon", "1",
               "--delta", "1e-9", "--relation", "add-remove").output
    assert f"keeps a value held by about {rows['1']:,.0f} rows or more" in text
    plain = tmp_path / "plain.yaml"
    plain.write_text(schema.read_text().replace("categories: auto, other: other", "categories: [a, b]"))
    assert plan_json(plain, ledger_url, "--n", "5000", "--epsilon", "1", "--delta", "1e-9",
                     "--relation", "add-remove")["category_threshold_rows"] is None


def test_plan_does_not_create_a_ledger(schema_file, tmp_path):
    url = f"sqlite:///{tmp_path / 'nowhere' / 'ledger.sqlite'}"
    plan_json(schema_file, url, "--n", "5000", "--epsilon", "1", "--delta", "1e-6")
    assert not (tmp_path / "nowhere").exists()


def spend_one_release(schema_file, ledger_url: str, budget: float) -> None:
    """Set the toy dataset's budget and commit one release at (1, 1e-6) planned as ``plan`` plans it."""
    first = plan_json(schema_file, ledger_url, "--n", "5000", "--epsilon", "1", "--delta", "1e-6")
    with BudgetLedger(ledger_url) as ledger:
        ledger.set_budget("toy", budget, 1e-6)
        entry = ledger.reserve("toy", "r1", "gaussian", first["noise_multiplier"], first["sigma"],
                               first["sensitivity"], 1.0, 1e-6, "replace-one", "h")
        ledger.commit(entry)


def test_plan_reports_budget_from_ledger(schema_file, ledger_url):
    spend_one_release(schema_file, ledger_url, budget=2.0)
    out = plan_json(schema_file, ledger_url, "--n", "5000", "--epsilon", "1", "--delta", "1e-6")
    assert out["budget_remaining"] == pytest.approx(1.0, abs=1e-6)
    assert out["budget"]["epsilon_spent"] == pytest.approx(1.0, abs=1e-6)
    assert out["budget"]["epsilon_after_release"] == pytest.approx(1.4547, abs=1e-3)
    assert out["budget"]["release_fits"] is True
    text = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--n", "5000", "--epsilon", "1",
               "--delta", "1e-6")
    assert text.exit_code == 0
    assert "(1.000000 remaining)" in text.output and "j=16" in text.output and "4.2247" in text.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--epsilon", "0"], "epsilon"),
        (["--epsilon", "nan"], "nan"),
        (["--delta", "0.01"], "delta"),  # >= 1/n_min
        (["--k", "0"], "k must"),
        (["--L", "0"], "(L) must"),
        (["--n", "999"], "n_min"),
    ],
)
def test_plan_errors_are_one_line(schema_file, ledger_url, args, needle):
    base = {"--n": "5000", "--epsilon": "1", "--delta": "1e-6"}
    base.update(dict(zip(args[::2], args[1::2])))
    flat = [x for kv in base.items() for x in kv]
    result = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, *flat)
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and needle in lines[0]


def test_plan_bad_schema_and_bad_ledger(tmp_path, schema_file):
    result = run("plan", "--schema", str(tmp_path / "missing.yaml"), "--n", "5", "--epsilon", "1", "--delta", "1e-9")
    assert result.exit_code != 0 and len(result.output.strip().splitlines()) == 1
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    result = run("plan", "--schema", str(broken), "--n", "5", "--epsilon", "1", "--delta", "1e-9")
    assert result.exit_code != 0 and len(result.output.strip().splitlines()) == 1
    result = run("plan", "--schema", str(schema_file), "--n", "5000", "--epsilon", "1", "--delta", "1e-6",
                 "--ledger-url", "nosuchdialect://x")
    assert result.exit_code != 0 and "ledger" in result.output and len(result.output.strip().splitlines()) == 1


def test_group_help_lists_plan():
    result = run("--help")
    assert result.exit_code == 0 and "plan" in result.output


def test_plan_exits_non_zero_when_the_release_would_not_fit(schema_file, ledger_url):
    spend_one_release(schema_file, ledger_url, budget=1.2)
    args = ("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--n", "5000", "--epsilon", "1",
            "--delta", "1e-6")
    text, as_json = run(*args), run(*args, "--json")
    assert text.exit_code == 3 and "(does NOT fit)" in text.output
    assert as_json.exit_code == 3 and json.loads(as_json.output)["budget"]["release_fits"] is False
    small = run(*args[:-4], "--epsilon", "0.05", "--delta", "1e-6")
    assert small.exit_code == 0 and "(fits)" in small.output


# -- the rows a release measures: --n or --input, less the holdout ---------------------------------------------


def test_plan_calibrates_for_the_measured_split(schema_file, ledger_url):
    planned = plan_json(schema_file, ledger_url, "--n", "20000", "--epsilon", "1", "--delta", "1e-6", holdout="0.2")
    measured = plan_json(schema_file, ledger_url, "--n", "16000", "--epsilon", "1", "--delta", "1e-6")
    assert (planned["n"], planned["n_input"], planned["holdout_fraction"]) == (16000, 20000, 0.2)
    assert planned["sigma"] == measured["sigma"] and planned["sensitivity"] == measured["sensitivity"]
    text = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--n", "20000", "--epsilon", "1",
               "--delta", "1e-6")  # the default holdout is the release's
    assert text.exit_code == 0
    assert "measures 80% of 20,000 rows = 16,000 (20% holdout)" in text.output


def write_table(path: Path, rows: int) -> Path:
    table = pd.DataFrame({"age": [i % 90 for i in range(rows)], "colour": ["red", "green"] * (rows // 2)})
    if path.suffix == ".parquet":
        table.to_parquet(path, index=False)
    else:
        table.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("name", ["toy.csv", "toy.csv.gz", "toy.parquet"])
def test_plan_input_reads_only_the_row_count(schema_file, ledger_url, tmp_path, name):
    path = write_table(tmp_path / name, 1500)
    out = plan_json(schema_file, ledger_url, "--input", str(path), "--epsilon", "1", "--delta", "1e-6",
                    holdout="0.2")
    assert (out["n_input"], out["n"], out["n_source"]) == (1500, 1200, "--input")
    by_n = plan_json(schema_file, ledger_url, "--n", "1500", "--epsilon", "1", "--delta", "1e-6", holdout="0.2")
    assert out["sigma"] == by_n["sigma"]


def test_row_count_matches_the_release_reader(tmp_path):
    # A byte-order mark, blank and white-space-only lines (not rows), a quoted cell over two lines, an all-empty row
    # (a row), no final newline: the count is the rows `read_table` gives the release.
    path = tmp_path / "tricky.csv"
    path.write_bytes(b'\xef\xbb\xbfage,colour\n1,red\n\n   \n2,"gr\neen"\n,\n\t\n3,red')
    assert input_row_count(path) == len(read_table(path)) == 4


def test_plan_holdout_below_n_min_is_refused(schema_file, ledger_url):
    result = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--n", "1200", "--epsilon", "1",
                 "--delta", "1e-6")
    assert result.exit_code == 1
    assert "measures 960 of 1,200 rows (20% holdout), below the schema's n_min = 1000" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "give --n ROWS or --input FILE"),
        (["--n", "5000", "--input", "x.csv"], "not both"),
        (["--input", "missing.csv"], "does not exist"),
        (["--relation", "add-remove", "--input", "x.csv"], "the row count is private"),
    ],
)
def test_plan_row_count_errors(schema_file, ledger_url, args, needle):
    result = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--epsilon", "1", "--delta",
                 "1e-6", *args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and needle in lines[0], result.output


def test_plan_add_remove_without_n_shows_frequencies_at_n_min(schema_file, ledger_url):
    out = plan_json(schema_file, ledger_url, "--relation", "add-remove", "--epsilon", "1", "--delta", "1e-6")
    with_n = plan_json(schema_file, ledger_url, "--relation", "add-remove", "--n", "4000", "--epsilon", "1",
                       "--delta", "1e-6")
    assert (out["n"], out["n_source"], out["n_input"]) == (1000, "n_min", None)
    assert out["sigma"] == with_n["sigma"]  # n does not shape the noise under add-remove
    assert out["noise_std_per_order"][0] == pytest.approx(4 * with_n["noise_std_per_order"][0])
    text = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--relation", "add-remove",
               "--epsilon", "1", "--delta", "1e-6")
    assert "n is private under add-remove" in text.output and "n_min = 1,000" in text.output


# -- budget wording: one release's epsilon, the lifetime composed -----------------------------------------------


def test_budget_lines_say_which_epsilon_they_are(schema_file, ledger_url, monkeypatch):
    # Two releases at (1, 1e-9) against a lifetime of 1.5 at delta_total 1e-6: composed exactly as Gaussians they
    # spend about 1.09, not 2, and a third still fits.
    one = plan_json(schema_file, ledger_url, "--n", "5000", "--epsilon", "1", "--delta", "1e-9")
    with BudgetLedger(ledger_url) as ledger:
        ledger.set_budget("toy", 1.5, 1e-6)
        for release_id in ("r1", "r2"):
            ledger.commit(ledger.reserve("toy", release_id, "gaussian", one["noise_multiplier"], one["sigma"],
                                         one["sensitivity"], 1.0, 1e-9, "replace-one", "h"))
    text = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--n", "5000", "--epsilon", "1",
               "--delta", "1e-9")
    assert text.exit_code == 0, text.output
    lines = {line.split("  ")[0]: line for line in text.output.splitlines()}
    assert "epsilon = 1 (delta = 1e-09)" in lines["this release"]
    now, after = lines["lifetime now"], lines["lifetime after it"]
    composed = "composed at delta_total = 1e-06 (exact Gaussian composition"
    assert " spent of 1.5 " in now and f"2 releases {composed}" in now
    assert f"3 releases {composed}" in after and after.endswith("(fits)")
    monkeypatch.setenv("SPLICE_LEDGER_URL", ledger_url)
    shown = run("budget", "toy")
    assert shown.exit_code == 0, shown.output
    lifetime = [line for line in shown.output.splitlines() if line.startswith("lifetime")]
    assert len(lifetime) == 1 and f"2 releases {composed}" in lifetime[0]
    per_release = [line for line in shown.output.splitlines() if "this release" in line]
    assert len(per_release) == 2 and all("this release epsilon = 1 (delta = 1e-09)" in line for line in per_release)
    assert all("spent" not in line and "composed" not in line for line in per_release)


def test_plan_says_what_a_delta_far_below_one_over_n_costs(schema_file, ledger_url):
    """delta = 1e-300 is accepted, and the plan says how much larger sigma is than at delta = 1/(100 n)."""
    from splice_assets.private.gaussian_dp import delta_cost, sigma_for

    far = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--n", "6000", "--holdout", "0",
              "--epsilon", "1", "--delta", "1e-300")
    assert far.exit_code == 0, far.output
    factor = sigma_for(1.0, 1e-300) / sigma_for(1.0, 1 / 600_000)
    assert f"delta = 1e-300 costs sigma x{factor:.1f} against delta = 1/(100 n) = 1.7e-06 at n = 6,000" in far.output
    at = ("--n", "6000", "--epsilon", "1", "--delta")
    assert plan_json(schema_file, ledger_url, *at, "1e-300")["delta_sigma_factor"] == factor
    near = run("plan", "--schema", str(schema_file), "--ledger-url", ledger_url, "--n", "6000", "--holdout", "0",
               "--epsilon", "1", "--delta", "1e-6")  # above 1e-3/n: nothing to say
    assert near.exit_code == 0 and "costs sigma" not in near.output
    assert plan_json(schema_file, ledger_url, *at, "1e-6")["delta_sigma_factor"] is None
    assert delta_cost(1.0, 1e-3 / 6000, 6000) is None and delta_cost(1.0, 0.99e-3 / 6000, 6000) > 1.0


def test_plan_by_dataset_name_works_from_any_directory(tmp_path, ledger_url, monkeypatch):
    """The README's quickstart line, run outside the repository: --dataset finds schemas/<dataset>.yaml."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPLICE_SCHEMA_DIR", raising=False)
    args = ["--n", "6366", "--epsilon", "1", "--delta", "1e-9", "--ledger-url", ledger_url]
    result = run("plan", "--dataset", "fair_affairs", *args, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["dataset"] == "fair_affairs"
    for bad, needle in ((["--dataset", "nosuch"], "no schema for dataset"), ([], "--dataset NAME or --schema FILE"),
                        (["--dataset", "fair_affairs", "--schema", "x.yaml"], "--dataset NAME or --schema FILE")):
        result = run("plan", *bad, *args)
        assert result.exit_code != 0 and needle in result.output and len(result.output.strip().splitlines()) == 1
