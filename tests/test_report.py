"""Tests for the INTERNAL HTML/JSON fidelity report."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_metrics import mixed_schema, mixed_table, raw_mixed

from splice_assets.evaluation.report import INTERNAL_BANNER, build_report


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[str] = []
        self.external: list[str] = []
        self.headings: list[str] = []
        self._in_h = False
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        for key in ("src", "href"):
            value = attrs.get(key)
            if value is not None and not value.startswith("data:"):
                self.external.append(value)
        if tag == "img":
            self.imgs.append(attrs.get("src", ""))
        if tag in ("h1", "h2"):
            self._in_h = True
            self.headings.append("")

    def handle_endtag(self, tag):
        if tag in ("h1", "h2"):
            self._in_h = False

    def handle_data(self, data):
        if self._in_h:
            self.headings[-1] += data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    schema = mixed_schema()
    train, holdout = mixed_table(1200, 1, schema=schema), mixed_table(600, 2, schema=schema)
    synthetic = mixed_table(1000, 3, shift=0.3, schema=schema)
    facts = {"release_id": "rel-<script>alert(1)</script>", "epsilon": 1.0, "delta": 1e-9, "budget_left": 2.0}
    out = tmp_path_factory.mktemp("report")
    return build_report(train, holdout, synthetic, schema, facts, seed=0, out_dir=out), schema


def test_html_is_internal_self_contained_and_escaped(report):
    result, _ = report
    text = result.html_path.read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith("<!-- INTERNAL")
    parser = _Collector()
    parser.feed(text)
    parser.close()
    assert parser.headings[0].startswith("INTERNAL") and parser.headings[0] == INTERNAL_BANNER
    assert len(parser.imgs) >= 7 + 3  # one marginal per column + heatmaps, TSTR, detection
    assert all(src.startswith("data:image/png;base64,") for src in parser.imgs)
    assert parser.external == []
    assert "script" not in parser.tags and "link" not in parser.tags
    assert "<script>alert(1)" not in text and "&lt;script&gt;" in text
    for heading in (
        "Summary",
        "Pairwise associations",
        "Detection",
        "Distance to closest record",
        "Schema expectations",
    ):
        assert any(h.startswith(heading) for h in parser.headings), heading
    assert "empirical evidence, not a guarantee" in text


def test_json_metrics(report):
    result, _ = report
    data = json.loads(result.json_path.read_text(encoding="utf-8"))
    assert data["internal"] is True
    assert data["release_facts"]["epsilon"] == 1.0
    head = data["metrics"]["headline"]
    assert {"tvd_1way", "tvd_2way", "tvd_3way", "sliced_w1", "mmd", "tstr_roc_auc", "trtr_roc_auc"} <= set(head)
    assert set(data["references"]) == {"independent", "real_halves"}
    assert (
        data["references"]["real_halves"]["headline"]["tvd_2way"]
        < data["references"]["independent"]["headline"]["tvd_2way"]
    )
    assert data["expectations"]["success"] is True
    assert result.seconds > 0 and result.metrics.n_synthetic == 1000


def test_screenshot_if_chromium_available(report):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed")
    result, _ = report
    shot = Path(tempfile.mkdtemp()) / "report.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tempfile.mkdtemp()}", f"--screenshot={shot}", "--window-size=1280,2000",
           result.html_path.resolve().as_uri()]  # fmt: skip
    try:
        subprocess.run(cmd, capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("chromium timed out")
    assert shot.exists() and shot.stat().st_size > 10_000


# ------------------------------------------------------------------------------------------------------------
# The verdict: planted failures are flagged, quoting their numbers; no-holdout mode says so.
# ------------------------------------------------------------------------------------------------------------


def _planted(schema):
    """A real table with a point mass (30% of income exactly 0) and a synthetic one that loses it and drops the
    job category 'a' (which holds well over 1% of the real rows)."""
    real = mixed_table(1500, 5, schema=schema)
    real.loc[real.index[::3], "income"] = 0.0
    synthetic = mixed_table(1500, 6, schema=schema)
    synthetic.loc[synthetic["job"] == "a", "job"] = "b"
    return real, synthetic


def test_verdict_flags_a_lost_point_mass_and_a_dropped_category():
    from splice_assets.evaluation.verdict import column_stats, dropped_categories, lost_point_masses

    schema = mixed_schema()
    real, synthetic = _planted(schema)
    income, job = schema.column("income"), schema.column("job")
    [lost] = lost_point_masses(real["income"], synthetic["income"], income)
    share = float((real["income"] == 0).mean())  # 1/3 planted, a few more clipped at 0
    assert lost.kind == "lost point mass" and f"income = 0 holds {share:.1%} of the real rows" in lost.message
    [dropped] = dropped_categories(real["job"], synthetic["job"], job)
    assert dropped.column == "job" and "'a'" in dropped.message and "absent" in dropped.message
    # Kept ones are not flagged: the same table against itself.
    assert lost_point_masses(real["income"], real["income"], income) == []
    assert dropped_categories(real["job"], real["job"], job) == []
    stats = column_stats(real["income"], income)
    assert set(stats.quantiles) == {"1%", "5%", "25%", "50%", "75%", "95%", "99%"}
    assert abs(stats.zero_share - share) < 1e-9 and stats.top[0] == ("0", stats.zero_share)


def test_verdict_flags_shifted_quantiles_and_a_useless_target(tmp_path):
    from splice_assets.evaluation.verdict import shifted_quantiles

    schema = mixed_schema()
    real, shifted = mixed_table(1500, 7, schema=schema), mixed_table(1500, 8, shift=1.0, schema=schema)
    [finding] = shifted_quantiles(real["score"], shifted["score"], schema.column("score"))
    assert finding.kind == "quantiles far off" and "real" in finding.message
    assert shifted_quantiles(real["score"], mixed_table(1500, 9, schema=schema)["score"], schema.column("score")) == []
    # A synthetic table whose label is reversed: TSTR worse than a coin flip.
    noise = mixed_table(1500, 10, schema=schema)
    noise["label"] = noise["label"].map({"yes": "no", "no": "yes"})
    result = build_report(real, mixed_table(800, 11, schema=schema), noise, schema, {}, seed=0, out_dir=tmp_path,
                          with_references=False)
    kinds = [f.kind for f in result.verdict.findings]
    assert "TSTR at or below trivial" in kinds, result.verdict.findings


def test_report_verdict_section_comes_first_and_shows_the_planted_failures(tmp_path):
    schema = mixed_schema()
    real, synthetic = _planted(schema)
    train = mixed_table(1500, 12, schema=schema)
    result = build_report(train, real, synthetic, schema, {"release_id": "r"}, seed=0, out_dir=tmp_path)
    text = result.html_path.read_text(encoding="utf-8")
    parser = _Collector()
    parser.feed(text)
    assert parser.headings[1] == "Verdict"
    assert "lost point mass" in text and f"income = 0 holds {(real['income'] == 0).mean():.1%} of the real" in text
    assert "dropped category" in text and "job = &#x27;a&#x27;" in text
    assert "quantile 99%" in text and "share of zeros" in text and "top values" in text
    assert "independent marginals (non-DP floor)" in text  # the score's reference band
    data = json.loads(result.json_path.read_text(encoding="utf-8"))
    assert data["verdict"]["has_holdout"] is True
    assert {"lost point mass", "dropped category"} <= {f["kind"] for f in data["verdict"]["findings"]}


def test_no_holdout_report_says_so_and_skips_what_needs_one(tmp_path):
    schema = mixed_schema()
    train = mixed_table(1500, 13, schema=schema)
    synthetic = mixed_table(1500, 14, schema=schema)
    result = build_report(train, train.iloc[:0], synthetic, schema, {}, seed=0, out_dir=tmp_path)
    text = result.html_path.read_text(encoding="utf-8")
    assert "No held-out rows" in text and "holdout_fraction = 0" in text
    for skipped in ("TSTR", "distance to closest record", "reference band"):
        assert skipped in " ".join(result.verdict.skipped)
    assert result.references is None and result.metrics.tstr is None and result.metrics.privacy is None
    # Compared with the measured rows, not with nothing: no TVD 0.5 everywhere.
    assert result.metrics.marginals.one_way < 0.1
    assert max(result.metrics.marginals.per_column.values()) < 0.2
    assert "measured rows" in text and "Distance to closest record" not in text
    assert json.loads(result.json_path.read_text(encoding="utf-8"))["verdict"]["has_holdout"] is False


def test_the_verdict_names_a_column_whose_bounds_clipped_the_input(tmp_path):
    """The report's real rows are clipped already, so the clipped tail reaches the verdict from the validation's
    repair counts: 20% of `score` beyond its bound [-4, 4] is flagged, the 1% of `age` below 18 is not."""
    from splice_assets.evaluation.verdict import CLIPPED_SHARE, clipped_to_bounds
    from splice_assets.private.validation import validate

    schema = mixed_schema()
    raw = raw_mixed(2000, 15)
    raw.loc[raw.index[:400], "score"] = 9.0
    raw.loc[raw.index[400:420], "age"] = 10
    shares = validate(raw, schema).report.shares("out_of_bounds_clipped")
    assert shares == {"score": 0.2, "age": 0.01}
    [finding] = clipped_to_bounds(schema.column("score"), shares["score"])
    assert finding.kind == "clipped to the bounds" and "20.0% of the input rows" in finding.message
    assert "[-4, 4]" in finding.message
    assert clipped_to_bounds(schema.column("age"), shares["age"]) == [] and shares["age"] < CLIPPED_SHARE
    table = validate(raw, schema).table
    result = build_report(table, table.iloc[:0], mixed_table(2000, 16, schema=schema), schema, {}, seed=0,
                          out_dir=tmp_path, clipped_shares=shares)
    assert [f.column for f in result.verdict.findings if f.kind == "clipped to the bounds"] == ["score"]
    assert "clipped onto them" in result.html_path.read_text(encoding="utf-8")


def test_verdict_flags_a_flipped_or_changed_association_with_the_target():
    """score rises with the label in the real rows; negated in the synthetic ones it falls (a sign flip), and age
    shuffled loses its association (a large change); another sample of the same table is not flagged."""
    from splice_assets.evaluation.verdict import ASSOCIATION_CHANGE, association, target_associations

    schema = mixed_schema()
    real, synthetic = mixed_table(1500, 20, schema=schema), mixed_table(1500, 21, schema=schema)
    assert target_associations(real, synthetic, schema) == []
    synthetic["score"] = -synthetic["score"]
    synthetic["age"] = synthetic["age"].sample(frac=1.0, random_state=0).to_numpy()
    findings = {f.column: f for f in target_associations(real, synthetic, schema)}
    assert set(findings) == {"score", "age"}, findings
    flip, change = findings["score"], findings["age"]
    assert flip.kind == "target association flipped" and "flips sign" in flip.message
    assert "the correlation of label with score is +0." in flip.message and "-0." in flip.message
    assert change.kind == "target association changed" and f"flagged above {ASSOCIATION_CHANGE:g}" in change.message
    for finding in (flip, change):
        assert "raise epsilon or measure more rows" in finding.fix and "schema entry" in finding.fix
    # Unordered columns are compared by Cramér's V (bias-corrected: about 0 for independent columns).
    v, measure = association(real, schema.column("label"), schema.column("job"))
    assert measure == "Cramér's V" and 0.0 <= v < 1.0


def test_each_warning_says_what_to_change_and_lost_point_masses_hint_values_auto():
    import dataclasses

    from splice_assets.evaluation.verdict import lost_point_masses

    schema = mixed_schema()
    real, synthetic = _planted(schema)
    income = schema.column("income")
    [lost] = lost_point_masses(real["income"], synthetic["income"], income)
    assert "declare `values: [0]` if the value is public, else set `values: auto`" in lost.fix
    [auto] = lost_point_masses(real["income"], synthetic["income"], dataclasses.replace(income, values_auto=True))
    assert auto.fix.startswith("raise epsilon: `values: auto` on income did not find 0")
    [declared] = lost_point_masses(real["income"], synthetic["income"], dataclasses.replace(income, values=(0.0,)))
    assert "0 is declared in income's schema entry" in declared.fix


def test_the_report_states_pass_or_fail_with_its_thresholds(tmp_path):
    from splice_assets.evaluation.verdict import ASSOCIATION_CHANGE, QUANTILE_GAP, SIGN_FLIP_MIN

    schema = mixed_schema()
    real, synthetic = _planted(schema)
    result = build_report(mixed_table(1500, 12, schema=schema), real, synthetic, schema, {}, seed=0,
                          out_dir=tmp_path, with_references=False)
    assert not result.verdict.passed and result.verdict.summary.startswith("FAIL")
    line = result.verdict.result_line()
    assert line.startswith(f"FAIL ({len(result.verdict.findings)} warning")
    for number in (f"{QUANTILE_GAP:.2f}", f"{SIGN_FLIP_MIN:g}", f"{ASSOCIATION_CHANGE:g}", "5%"):
        assert number in line
    text = result.html_path.read_text(encoding="utf-8")
    assert "FAIL (" in text and "thresholds:" in text and "What to change:" in text
    data = json.loads(result.json_path.read_text(encoding="utf-8"))["verdict"]
    assert data["passed"] is False and data["thresholds"]["association_change"] == ASSOCIATION_CHANGE
    assert all(f["fix"] for f in data["findings"])
    same = build_report(mixed_table(1500, 12, schema=schema), mixed_table(1500, 31, schema=schema),
                        mixed_table(1500, 30, schema=schema), schema,
                        {}, seed=0, out_dir=tmp_path / "same", with_references=False)
    assert same.verdict.passed, same.verdict.findings
    assert same.verdict.result_line().startswith("PASS: thresholds:")


# ------------------------------------------------------------------------------------------------------------
# Answers with intervals: exact intervals on public count queries beside the real answers on the measured rows.
# ------------------------------------------------------------------------------------------------------------


def test_answers_with_intervals_are_exact_and_hold_the_measured_rows_answers(tmp_path, monkeypatch):
    """A seeded measurement of 3,000 measured rows of the mixed table (noise from a seeded generator): the section
    lists public count queries, every interval exact, each real answer counted on the measured rows. Tolerance: at
    least 80% of the intervals hold it (95% expected; with about 20 queries, 4 or more misses would be a 1-in-60
    event at the stated coverage), and the summary line says how many did."""
    import numpy as np

    from splice_assets.api import Synthesizer
    from splice_assets.evaluation.intervals import public_queries
    from splice_assets.private import mechanism

    rng = np.random.default_rng(68)
    monkeypatch.setattr(mechanism, "gaussian_noise",
                        lambda values, sigma: np.asarray(values, float) + sigma * rng.standard_normal(np.shape(values)))
    schema = mixed_schema()
    synth = Synthesizer(schema, 1.0, 1e-9)
    measured = synth.prepare(raw_mixed(3000, 40), ledger=None).table
    measurement = synth.measure(synth.encode(measured), ledger=None)
    synthetic = mixed_table(1000, 41, schema=schema)
    result = build_report(measured, mixed_table(800, 42, schema=schema), synthetic, schema, {}, seed=0,
                          out_dir=tmp_path, with_references=False, measurement=measurement)
    section = json.loads(result.json_path.read_text(encoding="utf-8"))["answers_with_intervals"]
    rows = section["rows"]
    queries = [q.describe() for q in public_queries(measurement, schema)]
    assert 10 <= len(rows) <= 30 and {r["interval"] for r in rows} == {"exact"}
    # In the public order, every one exact (income's range too: its fine table counts the present values alone).
    assert [q for q in queries if q in {r["query"] for r in rows}] == [r["query"] for r in rows]
    assert section["skipped_not_exact"] == len(queries) - len(rows) == 0
    assert any(" and " in r["query"] for r in rows) and any("between" in r["query"] for r in rows)
    first = rows[0]
    assert first["query"] == "count where edu == 'high'"  # the largest category by noisy share
    assert first["real"] == float((measured["edu"] == "high").sum())  # the measured rows, not the holdout
    assert all(r["lower"] <= r["estimate"] <= r["upper"] for r in rows)
    held = sum(r["lower"] <= r["real"] <= r["upper"] for r in rows)
    assert held == section["held"] and held >= 0.8 * len(rows), rows
    summary = f"{held} of {len(rows)} intervals hold the real answer (95% expected)"
    assert section["summary"] == summary
    text = result.html_path.read_text(encoding="utf-8")
    parser = _Collector()
    parser.feed(text)
    assert "Answers with intervals" in parser.headings and summary in text
    assert "real (measured rows)" in text and "the 3,000 measured rows" in text
    # The real answers stay in the two internal files: the step output (ReportResult) carries none of them.
    assert not any("interval" in field for field in vars(result))


def test_without_a_measurement_the_report_has_no_interval_section(report):
    result, _ = report
    assert json.loads(result.json_path.read_text(encoding="utf-8"))["answers_with_intervals"] is None
    assert "Answers with intervals" not in result.html_path.read_text(encoding="utf-8")
