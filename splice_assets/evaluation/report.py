"""Self-contained INTERNAL fidelity report (HTML + JSON) for one synthetic release.

The report reads the real rows (train and holdout), so it is INTERNAL and must never be released: it says so
in its first line and first heading. Plots are matplotlib (Agg canvas, no pyplot state) PNGs embedded as
base64 data URIs; no external assets, scripts or links. Every string put into the HTML goes through
``html.escape``. The reference band (independent-marginals baseline, two halves of the real train set) is
computed in the same run with the same metric code and seed.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from splice_assets.evaluation.expectations import ExpectationSummary, check_synthetic
from splice_assets.evaluation.intervals import IntervalCheck, interval_check
from splice_assets.evaluation.metrics import (
    N_BINS,
    DCRResult,
    FidelityMetrics,
    ReferenceBand,
    column_codes,
    fidelity_metrics,
    reference_band,
)
from splice_assets.evaluation.verdict import QUANTILES, ColumnStats, Verdict, verdict
from splice_assets.measurement import Measurement
from splice_assets.private.validation import modelled_view
from splice_assets.schema import ColumnSpec, TableSchema

INTERNAL_BANNER = "INTERNAL — this report reads the real (private) rows. Do not release or share outside the team."
REAL_COLOR = "#1f77b4"
SYNTH_COLOR = "#ff7f0e"
MAX_TICK_LABELS = 24


@dataclass(frozen=True)
class ReportResult:
    html_path: Path
    json_path: Path
    metrics: FidelityMetrics
    seconds: float
    references: ReferenceBand | None = None
    expectations: ExpectationSummary | None = None
    verdict: Verdict | None = None


# ------------------------------------------------------------------------------------------------------------
# small helpers
# ------------------------------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if not math.isfinite(x):
            return "–"
        if x != 0 and (abs(x) < 10 ** (-digits) or abs(x) >= 1e6):
            return f"{x:.{digits}g}"
        return f"{x:.{digits}f}"
    return str(value)


def _mpl_text(text: Any) -> str:
    """Plain text for matplotlib (no mathtext interpretation of '$')."""
    return str(text).replace("$", r"\$")


def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _img(fig: Figure, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{_png(fig)}">'


def _table(header: list[str], rows: list[list[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(_fmt(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{_e(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# ------------------------------------------------------------------------------------------------------------
# plots
# ------------------------------------------------------------------------------------------------------------


def _level_labels(spec: ColumnSpec) -> list[str]:
    if spec.is_numeric:
        assert spec.bounds is not None
        lo, hi = spec.bounds
        edges = np.linspace(lo, hi, N_BINS + 1)
        labels = [f"{edges[i]:.3g}" for i in range(N_BINS)]
    else:
        labels = [str(c) for c in (spec.categories or ())]
    return labels + ["missing"]


def _numeric_plot(real: pd.Series, synthetic: pd.Series, spec: ColumnSpec, tvd: float, real_label: str) -> Figure:
    """Empirical CDFs and a quantile-quantile plot: both keep a point mass (a jump) and a long tail readable,
    where 16 equal-width bins over wide public bounds put most rows in one bar. Skewed columns get a symlog axis."""
    r = pd.to_numeric(real, errors="coerce").dropna().to_numpy(dtype=np.float64)
    s = pd.to_numeric(synthetic, errors="coerce").dropna().to_numpy(dtype=np.float64)
    fig = Figure(figsize=(6.4, 2.6))
    ecdf, qq = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    skewed = False
    if len(r) and len(s):
        q1, q25, q75, q99 = np.quantile(r, [0.01, 0.25, 0.75, 0.99])
        skewed = spec.scale == "log" or q99 - q1 > 20 * max(q75 - q25, 0.0) or q75 == q25
        for values, color, label in ((r, REAL_COLOR, real_label), (s, SYNTH_COLOR, "synthetic")):
            x = np.sort(values)
            ecdf.step(x, np.arange(1, len(x) + 1) / len(x), where="post", color=color, lw=1.5, label=label)
        probs = np.linspace(0.01, 0.99, 99)
        qr, qs = np.quantile(r, probs), np.quantile(s, probs)
        qq.plot(qr, qs, "o", ms=2.5, color=SYNTH_COLOR)
        lo, hi = float(min(qr.min(), qs.min())), float(max(qr.max(), qs.max()))
        qq.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--")
    if skewed:
        # symlog: linear around 0 (exact zeros stay visible), logarithmic beyond.
        threshold = max(float(np.quantile(np.abs(r[r != 0]), 0.05)) if np.any(r != 0) else 1.0, 1e-9)
        for ax in (ecdf,):
            ax.set_xscale("symlog", linthresh=threshold)
        qq.set_xscale("symlog", linthresh=threshold)
        qq.set_yscale("symlog", linthresh=threshold)
    ecdf.set_ylim(0, 1.02)
    ecdf.set_title(_mpl_text(f"{spec.name} — CDF" + (" (symlog x)" if skewed else "")), fontsize=9)
    qq.set_title(_mpl_text(f"Q-Q, 1..99% (16-bin TVD {tvd:.3f})"), fontsize=9)
    qq.set_xlabel(_mpl_text(real_label), fontsize=7)
    qq.set_ylabel("synthetic", fontsize=7)
    for ax in (ecdf, qq):
        ax.tick_params(labelsize=7)
    ecdf.legend(fontsize=7, frameon=False, loc="lower right")
    return fig


def _marginal_plot(real: pd.Series, synthetic: pd.Series, spec: ColumnSpec, tvd: float,
                   real_label: str = "real holdout") -> Figure:
    if spec.is_numeric:
        return _numeric_plot(real, synthetic, spec, tvd, real_label)
    cr, k = column_codes(real, spec)
    cs, _ = column_codes(synthetic, spec)
    p = np.bincount(cr, minlength=k) / max(len(cr), 1)
    q = np.bincount(cs, minlength=k) / max(len(cs), 1)
    labels = _level_labels(spec)
    if not spec.nullable and p[-1] == 0 and q[-1] == 0:
        p, q, labels = p[:-1], q[:-1], labels[:-1]
    fig = Figure(figsize=(4.2, 2.6))
    ax = fig.add_subplot()
    x = np.arange(len(p))
    ax.bar(x - 0.2, p, width=0.4, color=REAL_COLOR, label=_mpl_text(real_label))
    ax.bar(x + 0.2, q, width=0.4, color=SYNTH_COLOR, label="synthetic")
    if len(labels) <= MAX_TICK_LABELS:
        ax.set_xticks(x, [_mpl_text(s[:14]) for s in labels], rotation=60, ha="right", fontsize=7)
    else:
        ax.set_xlabel(f"{len(labels)} levels in schema order", fontsize=7)
    ax.set_title(_mpl_text(f"{spec.name} ({spec.kind}) — TVD {tvd:.3f}"), fontsize=9)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, frameon=False)
    return fig


def _heatmaps(metrics: FidelityMetrics, real_label: str = "real holdout") -> Figure:
    assoc = metrics.association
    names = [_mpl_text(c[:16]) for c in assoc.columns]
    p = len(names)
    size = max(3.2, 0.28 * p + 1.5)
    fig = Figure(figsize=(3 * size, size))
    diff = np.abs(assoc.real - assoc.synthetic)
    panels = [(real_label, assoc.real, "RdBu_r", -1, 1), ("synthetic", assoc.synthetic, "RdBu_r", -1, 1),
              ("|real − synthetic|", diff, "Reds", 0, max(0.1, float(diff.max())))]  # fmt: skip
    for i, (title, matrix, cmap, vmin, vmax) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        im = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax)
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(p), names, rotation=90, fontsize=7)
        ax.set_yticks(range(p), names if i == 0 else [""] * p, fontsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return fig


def _grouped_bars(
    groups: list[str], series: Mapping[str, Sequence[float | None]], title: str, ylabel: str,
    hline: float | None = None, ylim: tuple[float, float] | None = None,
) -> Figure:  # fmt: skip
    fig = Figure(figsize=(6.4, 3.0))
    ax = fig.add_subplot()
    x = np.arange(len(groups))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        vals = np.array([np.nan if v is None else v for v in values], dtype=float)
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, np.nan_to_num(vals), width=width, label=_mpl_text(name))
        for bar, v in zip(bars, vals):
            if math.isfinite(v):
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_height(),
                    f"{v:.3f}",
                    ha="center",
                    va="bottom",
                    fontsize=6,
                )
    if hline is not None:
        ax.axhline(hline, color="grey", ls="--", lw=1)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xticks(x, [_mpl_text(g) for g in groups], fontsize=8)
    ax.set_ylabel(_mpl_text(ylabel), fontsize=8)
    ax.set_title(_mpl_text(title), fontsize=10)
    ax.legend(fontsize=7, frameon=False, ncol=min(len(series), 4))
    return fig


# ------------------------------------------------------------------------------------------------------------
# sections
# ------------------------------------------------------------------------------------------------------------

_HEADLINE_ROWS: list[tuple[str, str, str]] = [
    ("tvd_1way", "1-way marginal TVD", "lower is better"),
    ("tvd_2way", "2-way marginal TVD", "lower is better"),
    ("tvd_3way", "3-way marginal TVD (sampled)", "lower is better"),
    ("sliced_w1", "sliced Wasserstein-1 (cube)", "lower is better"),
    ("mmd", "MMD, Gaussian kernel (cube)", "lower is better"),
    ("association_error", "pairwise association error", "lower is better"),
    ("tstr_roc_auc", "TSTR ROC AUC (best learner)", "higher is better"),
    ("tstr_accuracy", "TSTR accuracy (best learner)", "higher is better"),
    ("tstr_r2", "TSTR R² (best learner)", "higher is better"),
    ("detection_auc_logistic", "detection AUC, logistic", "0.5 is ideal"),
    ("detection_auc_xgboost", "detection AUC, XGBoost", "0.5 is ideal"),
    ("dcr_share_closer_to_train", "DCR share closer to train", "≈0.5 expected"),
]


def _summary_section(facts: Mapping[str, Any], metrics: FidelityMetrics, refs: ReferenceBand | None,
                     has_holdout: bool = True) -> str:
    fact_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_fmt(v, 4))}</td></tr>" for k, v in facts.items())
    head = metrics.headline()
    ind = refs.independent.headline() if refs else {}
    halves = refs.real_halves.headline() if refs else {}
    rows = [
        [label, head.get(key), ind.get(key), halves.get(key), note]
        for key, label, note in _HEADLINE_ROWS
        if key in head
    ]
    ceiling = ""
    if metrics.tstr is not None and metrics.tstr.best_trtr is not None:
        trtr = ", ".join(f"{k} {_fmt(v)}" for k, v in metrics.tstr.best_trtr.items())
        ceiling = f"<p>TRTR ceiling (train on real train, {_e(metrics.tstr.best_trtr_learner)}): {_e(trtr)}</p>"
    return (
        '<section class="card"><h2>Summary</h2>'
        '<div class="cols"><div><h3>Release (public facts)</h3>'
        f'<table class="facts">{fact_rows}</table>'
        f"<p>Rows: real train {_e(_fmt(metrics.n_train))}, real holdout "
        f"{_e(_fmt(metrics.n_holdout) if has_holdout else 'none (compared with the measured rows)')}, "
        f"synthetic {_e(_fmt(metrics.n_synthetic))}; metric seed {_e(metrics.seed)}.</p></div>"
        "<div><h3>Headline metrics vs. reference band</h3>"
        + _table(
            ["metric", "synthetic", "independent marginals", "real vs real (halves)", "direction"], rows, "headline"
        )
        + ceiling
        + "<p class=note>Reference band: independent marginals (each column resampled from the real train "
        "marginal; non-DP) is the floor a generator should beat; two halves of the real train set are the "
        "sampling-noise ceiling. Both computed in this run with the same code and seed.</p></div></div></section>"
    )


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{share:.1%}"


def _top_text(top: list[tuple[str, float]]) -> str:
    return ", ".join(f"{v} ({_pct(share)})" for v, share in top) or "–"


def _stats_table(real: ColumnStats, synth: ColumnStats, real_label: str) -> str:
    """One column's statistics side by side."""
    rows: list[list[Any]] = []
    if real.quantiles is not None or synth.quantiles is not None:
        for q in QUANTILES:
            key = f"{round(q * 100)}%"
            rows.append([f"quantile {key}", (real.quantiles or {}).get(key), (synth.quantiles or {}).get(key)])
        rows.append(["share of zeros", _pct(real.zero_share), _pct(synth.zero_share)])
    rows.append(["share of missing", _pct(real.missing_share), _pct(synth.missing_share)])
    rows.append(["top values", _top_text(real.top), _top_text(synth.top)])
    return _table(["statistic", real_label, "synthetic"], rows, "stats")


def _marginals_section(
    real: pd.DataFrame, synthetic: pd.DataFrame, schema: TableSchema, metrics: FidelityMetrics,
    result: Verdict | None = None, real_label: str = "real holdout",
) -> str:
    tiles = []
    for spec in schema.columns:
        tvd = metrics.marginals.per_column.get(spec.name, float("nan"))
        fig = _marginal_plot(real[spec.name], synthetic[spec.name], spec, tvd, real_label)
        sides = None if result is None else result.columns[spec.name]
        stats = "" if sides is None else _stats_table(sides["real"], sides["synthetic"], real_label)
        tiles.append(f'<figure>{_img(fig, f"marginal of {spec.name}")}{stats}</figure>')
    worst = sorted(metrics.marginals.per_pair, key=lambda t: -t[2])[:10]
    worst_table = _table(["column A", "column B", "2-way TVD"], [[a, b, v] for a, b, v in worst])
    return (
        f"<section><h2>Columns: {_e(real_label)} vs synthetic</h2>"
        "<p>Numeric columns: empirical CDFs and a quantile-quantile plot (symlog axes for skewed columns, so a "
        f"point mass at 0 and a long tail both show); the TVDs use {N_BINS} equal-width bins over the public schema "
        "bounds, missing as its own level. Each column's statistics sit below its plot (shares are of all rows). "
        f"Mean TVD 1-way {_e(_fmt(metrics.marginals.one_way))}, 2-way {_e(_fmt(metrics.marginals.two_way))}, "
        f"3-way {_e(_fmt(metrics.marginals.three_way))} ({_e(metrics.marginals.n_three_way)} sampled triples).</p>"
        f'<div class="grid">{"".join(tiles)}</div>'
        f"<h3>Worst 2-way marginals</h3>{worst_table}</section>"
    )


def _verdict_section(result: Verdict) -> str:
    """The plain-language first section: summary, no-holdout notice, warnings, scores beside their references."""
    parts = [f'<section class="card verdict"><h2>Verdict</h2><p><b>{_e(result.summary)}</b></p>',
             f'<p class="{"pass" if result.passed else "warn"}"><b>{_e(result.result_line())}</b></p>']
    if not result.has_holdout:
        skipped = "".join(f"<li>{_e(s)}</li>" for s in result.skipped)
        parts.append(
            '<p class="warn"><b>No held-out rows</b> (holdout_fraction = 0): every real row was measured, so the '
            "synthetic rows are compared with the very rows the release was computed from (in-sample: it says how "
            "well the noisy statistics were reproduced, not how well the synthetic rows generalise). "
            f"Skipped checks:</p><ul>{skipped}</ul>"
        )
    if result.findings:
        items = "".join(f"<li><b>{_e(f.kind)}</b>: {_e(f.message)}"
                        + (f"<br><i>What to change:</i> {_e(f.fix)}" if f.fix else "") + "</li>"
                        for f in result.findings)
        parts.append(f'<h3>Warnings</h3><ul class="warn">{items}</ul>')
    else:
        parts.append(
            "<p>No warnings: every threshold above was met.</p>"
        )
    if result.scores:
        rows = [[r["metric"], r["synthetic"], r["independent_marginals"], r["real_vs_real"],
                 f"{r['better']} is better" + (f"; good: {r['good_looks_like']}" if r["good_looks_like"] else "")]
                for r in result.scores]  # fmt: skip
        parts.append(
            "<h3>Scores and their reference band</h3>"
            + _table(["metric", "synthetic", "independent marginals (non-DP floor)",
                      "real vs real (sampling-noise ceiling)", "reading"], rows, "headline")  # fmt: skip
            + "<p class=note>Independent marginals resample each real column on its own: 1-way TVD at sampling noise "
            "but no dependence, so a generator should beat its 2-way TVD and TSTR. Two halves of the real rows show "
            "what sampling noise alone costs: a score near that column is as good as this table size allows. "
            "Differential privacy adds noise on top, so expect somewhat worse than real-vs-real.</p>"
        )
    parts.append("</section>")
    return "".join(parts)


def _association_section(metrics: FidelityMetrics, real_label: str = "real holdout") -> str:
    return (
        "<section><h2>Pairwise associations</h2>"
        "<p>Pearson r for numeric/ordinal pairs (ordinal as schema position), Cramér's V for categorical/boolean "
        "pairs, correlation ratio η for mixed pairs. Mean absolute difference: "
        f"<b>{_e(_fmt(metrics.association.error))}</b>.</p>"
        f'{_img(_heatmaps(metrics, real_label), "association heatmaps")}</section>'
    )


def _tstr_section(metrics: FidelityMetrics, refs: ReferenceBand | None, has_holdout: bool = True) -> str:
    t = metrics.tstr
    if t is None:
        why = ("The schema declares no target." if has_holdout else
               "Skipped: no held-out rows to test on (holdout_fraction = 0).")
        return f"<section><h2>Train on synthetic, test on real</h2><p>{_e(why)}</p></section>"
    learners = [s.learner for s in t.learners]
    series: dict[str, list[float | None]] = {
        "TSTR (synthetic)": [s.tstr.get(t.primary) for s in t.learners],
        "TRTR (real train)": [(s.trtr or {}).get(t.primary) for s in t.learners],
    }
    if refs is not None and refs.independent.tstr is not None and refs.real_halves.tstr is not None:
        series["independent marginals"] = [s.tstr.get(t.primary) for s in refs.independent.tstr.learners]
        series["real half"] = [s.tstr.get(t.primary) for s in refs.real_halves.tstr.learners]
    ylim = (0.0, 1.05) if t.primary in ("roc_auc", "accuracy") else None
    fig = _grouped_bars(learners, series, f"{t.primary} on the real holdout (target {t.target})", t.primary, ylim=ylim)
    keys = list(t.learners[0].tstr)
    rows = [[s.learner] + [s.tstr.get(k) for k in keys] + [(s.trtr or {}).get(k) for k in keys] for s in t.learners]
    header = ["learner"] + [f"TSTR {k}" for k in keys] + [f"TRTR {k}" for k in keys]
    return (
        f"<section><h2>Train on synthetic, test on real ({_e(t.task)})</h2>"
        f"<p>Best TSTR learner: <b>{_e(t.best_learner)}</b>; training rows {_e(_fmt(t.n_train))}, "
        f"test rows {_e(_fmt(t.n_test))}.</p>{_img(fig, 'TSTR vs TRTR')}{_table(header, rows)}</section>"
    )


def _detection_section(metrics: FidelityMetrics, refs: ReferenceBand | None, real_label: str = "real holdout") -> str:
    d = metrics.detection
    if d is None:
        return ""
    series = {"synthetic": [d.logistic_auc, d.xgboost_auc]}
    if refs is not None and refs.independent.detection and refs.real_halves.detection:
        series["independent marginals"] = [
            refs.independent.detection.logistic_auc,
            refs.independent.detection.xgboost_auc,
        ]
        series["real vs real"] = [refs.real_halves.detection.logistic_auc, refs.real_halves.detection.xgboost_auc]
    fig = _grouped_bars(
        ["logistic", "XGBoost"], series, "detection ROC AUC (5-fold)", "AUC", hline=0.5, ylim=(0.0, 1.05)
    )
    return (
        "<section><h2>Detection (classifier two-sample test)</h2>"
        f"<p>{_e(real_label.capitalize())} vs synthetic, {_e(_fmt(d.n_per_class))} rows each, numeric columns as "
        f"their {N_BINS} bin codes. 0.5 means the classifier cannot tell them apart; 1.0 means perfectly separable.</p>"
        f"{_img(fig, 'detection AUC')}</section>"
    )


def _privacy_section(metrics: FidelityMetrics, refs: ReferenceBand | None) -> str:
    p = metrics.privacy
    if p is None:
        return ""
    runs: list[tuple[str, DCRResult | None]] = [("synthetic", p)]
    if refs is not None:
        runs += [
            ("independent marginals", refs.independent.privacy),
            ("real half (not trained on)", refs.real_halves.privacy),
        ]
    rows = [
        [
            name,
            r.median_to_train,
            r.median_to_holdout,
            r.share_closer_to_train,
            r.exact_match_train,
            r.exact_match_holdout,
        ]
        for name, r in runs
        if r is not None
    ]
    header = ["table", "median DCR → train", "median DCR → holdout", "share closer to train", "exact match train",
              "exact match holdout"]  # fmt: skip
    return (
        f"<section><h2>Distance to closest record — {_e(p.note)}</h2>"
        "<p>Euclidean distance on the [-1, 1] encoding divided by √d; train and holdout references subsampled to "
        f"the same size ({_e(_fmt(p.n_reference))} rows), {_e(_fmt(p.n_synthetic))} synthetic rows; ties count one "
        "half. A share well above 0.5 would suggest the generator sits closer to its training rows. This is "
        "<b>empirical evidence, not a guarantee</b>; the guarantee is the differential-privacy accounting.</p>"
        f"{_table(header, rows)}</section>"
    )


def _intervals_section(check: IntervalCheck) -> str:
    """The release's exact 95% intervals on public count queries beside the real answers (``evaluation.intervals``)."""
    rows = [[r.query, r.estimate, r.lower, r.upper, r.real, r.holds] for r in check.rows]
    skipped = f" {check.skipped} candidate queries without an exact interval were left out." if check.skipped else ""
    return (
        "<section><h2>Answers with intervals</h2>"
        f"<p><b>{_e(check.summary())}</b>; real answers counted on {_e(check.real_rows)}.</p>"
        "<p class=note>Count queries chosen from public information only (each discrete column's largest "
        "categories by noisy share, the largest noisy cell of the measured pairs, each numeric column up to the "
        "public bin edge of its noisy median), answered as a user's <code>synth.answer</code> would be: the sum of "
        "the measured noisy cells with its exact Gaussian 95% interval. About 1 in 20 intervals is expected to miss; "
        f"many more misses would mean the stated noise is not the noise added.{_e(skipped)}</p>"
        + _table(["query", "estimate", "95% lower", "95% upper", "real (measured rows)", "holds"], rows, "intervals")
        + "</section>"
    )


def _expectations_section(summary: ExpectationSummary) -> str:
    rows = [[r.expectation_type, r.column or "(table)", "pass" if r.success else "FAIL"] for r in summary.results]
    status = "all passed" if summary.success else f"{summary.n_failed} failed"
    return (
        "<section><h2>Schema expectations on the synthetic rows (Great Expectations)</h2>"
        f"<p>Suite {_e(summary.suite_name)}: {_e(summary.n_expectations)} expectations, {_e(status)}. "
        "Run on synthetic rows only, BOOLEAN_ONLY results (no cell values).</p>"
        f"{_table(['expectation', 'column', 'result'], rows, 'ge')}</section>"
    )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1240px;padding:0 16px 40px;
color:#222;line-height:1.4}
h1.internal{background:#b00020;color:#fff;padding:12px 16px;font-size:1.25rem;margin:0 -16px 16px}
h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:32px}
.card{background:#f7f7f9;border:1px solid #ddd;border-radius:6px;padding:8px 16px}
.cols{display:flex;flex-wrap:wrap;gap:24px}.cols>div{flex:1 1 420px}
table{border-collapse:collapse;font-size:.85rem;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}td{font-variant-numeric:tabular-nums}
thead th{background:#eee}.facts th{background:#eee}
.grid{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0}img{max-width:100%}
.note{color:#555;font-size:.85rem}
.verdict{border-left:6px solid #b26a00}.warn{color:#8a3b00}.pass{color:#1b6b2a}
table.stats{font-size:.75rem}
"""


def render_html(
    real_holdout: pd.DataFrame,
    synthetic: pd.DataFrame,
    schema: TableSchema,
    release_facts: Mapping[str, Any],
    metrics: FidelityMetrics,
    references: ReferenceBand | None,
    expectations: ExpectationSummary | None,
    seconds: float | None = None,
    result: Verdict | None = None,
    intervals: IntervalCheck | None = None,
) -> str:
    """The report as one HTML string (first line and first heading say INTERNAL). ``real_holdout`` is the table
    the synthetic rows are compared with: the measured rows when ``result.has_holdout`` is False."""
    real_label = "real holdout" if result is None or result.has_holdout else "measured rows"
    title = f"INTERNAL fidelity report — {schema.name} v{schema.version}"
    parts = [
        f"<!-- {_e(INTERNAL_BANNER)} -->",
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f'<h1 class="internal">{_e(INTERNAL_BANNER)}</h1>',
        f"<p><b>Fidelity report for schema {_e(schema.name)} v{_e(schema.version)}.</b></p>",
        _verdict_section(result) if result is not None else "",
        _summary_section(release_facts, metrics, references, real_label == "real holdout"),
        _marginals_section(real_holdout, synthetic, schema, metrics, result, real_label),
        _association_section(metrics, real_label),
        _tstr_section(metrics, references, real_label == "real holdout"),
        _detection_section(metrics, references, real_label),
        _privacy_section(metrics, references),
        _intervals_section(intervals) if intervals is not None else "",
        _expectations_section(expectations) if expectations is not None else "",
    ]
    timing = ", ".join(f"{k} {v:.2f}s" for k, v in metrics.seconds.items())
    total = f"; report total {seconds:.1f}s" if seconds is not None else ""
    parts.append(f'<p class="note">Metric timings: {_e(timing)}{_e(total)}.</p></body></html>')
    return "\n".join(parts)


def build_report(
    real_train: pd.DataFrame,
    real_holdout: pd.DataFrame,
    synthetic: pd.DataFrame,
    schema: TableSchema,
    release_facts: dict,
    seed: int,
    out_dir: str | Path,
    *,
    null_rate_bounds: Mapping[str, tuple[float, float]] | None = None,
    with_references: bool = True,
    stem: str = "fidelity_report",
    clipped_shares: Mapping[str, float] | None = None,
    measurement: Measurement | None = None,
    measured_count: int | None = None,
) -> ReportResult:
    """Compute all metrics (plus reference band and GE suite) and write ``<stem>.html`` and ``<stem>.json``.

    ``release_facts`` holds public facts only (release id, epsilon, delta, budget left, ...); it is shown
    verbatim (escaped) in the summary card and copied into the JSON.

    With an empty ``real_holdout`` (holdout_fraction = 0) the report is in no-holdout mode: the synthetic rows are
    compared with the measured rows (in-sample), and TSTR, DCR and the reference band are skipped and listed as
    such (scored against no rows they would read as TVD 0.5 everywhere).

    ``clipped_shares`` (per column, the share of the input rows its bounds clipped, from the validation's repair
    counts) lets the verdict name a tail the bounds cut off: the real rows here are clipped already.

    ``measurement`` (the release's noisy one) adds the "Answers with intervals" section: exact intervals on public
    count queries beside their real answers on ``real_train``, the measured rows, or a sample of them when
    ``measured_count`` (their exact number, INTERNAL) is larger (a streamed input). Those real answers go to the
    two files only, never to the returned ``ReportResult`` (a Dagster step output).
    """
    from splice_assets import progress

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    has_holdout = len(real_holdout) > 0
    compared = real_holdout if has_holdout else real_train
    # The suite reads the rows in the user's form; the metrics, the verdict and the plots read the modelled parts.
    output_rows, synthetic = synthetic, modelled_view(synthetic, schema)
    with progress.stage("report: metrics vs " + ("the holdout" if has_holdout else "the measured rows")):
        metrics = fidelity_metrics(real_train, compared, synthetic, schema, seed, with_tstr=has_holdout,
                                   with_privacy=has_holdout)
    references = None
    if with_references and has_holdout:
        with progress.stage("report: reference band (2 more tables)"):
            references = reference_band(real_train, real_holdout, schema, seed, n_synthetic=len(synthetic))
    t_ge = time.perf_counter()
    with progress.stage("report: Great Expectations suite"):
        expectations = check_synthetic(output_rows, schema, null_rate_bounds)
    ge_seconds = time.perf_counter() - t_ge
    intervals = None
    if measurement is not None:
        with progress.stage("report: answers with intervals (exact, on the measured rows)"):
            intervals = interval_check(measurement, schema, real_train, measured_count)
    with progress.stage("report: verdict, plots, HTML"):
        result = verdict(compared, synthetic, schema, metrics, references, has_holdout, clipped_shares)
        html_text = render_html(compared, synthetic, schema, release_facts, metrics, references, expectations,
                                seconds=time.perf_counter() - t0, result=result, intervals=intervals)
    html_path = out / f"{stem}.html"
    json_path = out / f"{stem}.json"
    html_path.write_text(html_text, encoding="utf-8")
    seconds = time.perf_counter() - t0
    payload = {
        "internal": True,
        "notice": INTERNAL_BANNER,
        "schema": {"name": schema.name, "version": schema.version},
        "release_facts": {str(k): _json_value(v) for k, v in release_facts.items()},
        "verdict": _json_value(result.to_dict()),
        "metrics": metrics.to_dict(),
        "references": references.to_dict() if references else None,
        "expectations": expectations.to_dict(),
        "answers_with_intervals": None if intervals is None else _json_value(intervals.to_dict()),
        "seconds": {"total": round(seconds, 3), "expectations": round(ge_seconds, 3)},
    }
    json_path.write_text(json.dumps(payload, indent=2, allow_nan=False), encoding="utf-8")
    return ReportResult(html_path, json_path, metrics, seconds, references, expectations, result)


def _json_value(value: Any) -> Any:
    from splice_assets.evaluation.metrics import _json_safe

    return _json_safe(value)
