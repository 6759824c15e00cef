"""SDMetrics' ``QualityReport`` on one synthetic table, run in the peers' virtualenv (bench/.venv-peers: sdmetrics
needs pandas < 3, the project's venv has pandas 3), so it imports nothing from ``splice_assets``.

    bench/.venv-peers/bin/python bench/sdmetrics_score.py --real test.csv --synthetic synth.csv \
        --metadata meta.json --out scores.json

``--metadata`` is SDMetrics' single-table metadata, ``{"columns": {name: {"sdtype": ...}}}``, written by
``bench.run`` from our schema (``metadata_for``, below): numerical for continuous and integer columns, categorical
for categorical, ordinal and boolean ones, datetime for lowered datetime/date columns. Categorical columns are read
as text on both sides, so 0, "0" and 0.0 are one category. The scores go to ``--out`` as JSON: ``sdm_quality`` (the
overall score: the mean of the two properties), ``sdm_shapes`` (Column Shapes: KS complement of numerical columns,
TV complement of categorical ones), ``sdm_pairs`` (Column Pair Trends), the sdmetrics version and the seconds taken.

The binning caveat (docs/benchmarks.md, "SDMetrics"): Column Pair Trends scores a numeric pair by
1 - |r_real - r_synthetic| / 2 (Pearson correlation only, not the joint shape), a categorical pair by 1 - the TVD of
its 2-way table, and a numeric x categorical pair by cutting the numeric column into 10 equal-width bins computed
on each table's own range (real and synthetic separately), then the contingency TVD. The pinned sdmetrics' report
(0.32, ``bench.run.SDMETRICS``) averages only the pairs whose real data show |r| > 0.5 or Cramer's V > 0.3
(``sdm_pairs_counted`` of ``sdm_pairs_total`` in the JSON). Pandas' row subsamples (above 50,000 rows) use NumPy's
global generator, seeded here (``--seed``).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

NUMERIC_KINDS = ("continuous", "integer")
DISCRETE_KINDS = ("categorical", "ordinal", "boolean")
DATETIME_KINDS = ("datetime", "date")


def metadata_for(schema, names) -> dict:
    """SDMetrics' single-table metadata for the columns ``names`` of a table validated with ``schema`` (a
    ``splice_assets.schema.TableSchema``, read duck-typed): modelled columns by kind (numerical / categorical), lowered
    datetime and date columns as datetime, derived numeric columns as numerical; others (ids, text, times of day)
    are left out, and ``bench.run`` drops them from both tables."""
    by_kind = {c.name: c.kind for c in schema.columns}
    by_kind.update({c.name: c.kind for c in getattr(schema, "lowered", ())})
    derived = {d.name for d in getattr(schema, "derived", ())}
    columns = {}
    for name in names:
        kind = by_kind.get(name)
        if kind in NUMERIC_KINDS or (kind is None and name in derived):
            columns[name] = {"sdtype": "numerical"}
        elif kind in DISCRETE_KINDS:
            columns[name] = {"sdtype": "categorical"}
        elif kind in DATETIME_KINDS:
            columns[name] = {"sdtype": "datetime"}
    return {"columns": columns}


def read_table(path: Path, metadata: dict):
    import pandas as pd

    columns = metadata["columns"]
    text = [n for n, m in columns.items() if m["sdtype"] == "categorical"]
    frame = pd.read_csv(path, dtype={n: str for n in text}, usecols=list(columns), low_memory=False)
    for name, meta in columns.items():
        if meta["sdtype"] == "numerical":
            frame[name] = pd.to_numeric(frame[name], errors="coerce")
        elif meta["sdtype"] == "datetime":
            frame[name] = pd.to_datetime(frame[name], errors="coerce")
    return frame[list(columns)]


def quality(real, synthetic, metadata: dict) -> dict:
    """The report's overall score and its two properties (the unified ``sdmetrics.reports.QualityReport`` where the
    installed sdmetrics has it, else the single-table one)."""
    try:
        from sdmetrics.reports import QualityReport

        report = QualityReport()
        report.generate({"table": real}, {"table": synthetic}, {"tables": {"table": metadata}}, verbose=False)
    except ImportError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            from sdmetrics.reports.single_table import QualityReport
        report = QualityReport()
        report.generate(real, synthetic, metadata, verbose=False)
    props = report.get_properties().set_index("Property")["Score"]
    pairs = report.get_details("Column Pair Trends")
    counted = pairs["Meets Threshold?"].astype("boolean").fillna(False) if "Meets Threshold?" in pairs else None
    return {
        "sdm_quality": float(report.get_score()),
        "sdm_shapes": float(props.get("Column Shapes", float("nan"))),
        "sdm_pairs": float(props.get("Column Pair Trends", float("nan"))),
        # The pairs the Column Pair Trends average counts (a property of the real table), of all pairs.
        "sdm_pairs_counted": int(counted.sum()) if counted is not None else len(pairs),
        "sdm_pairs_total": len(pairs),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", type=Path, required=True)
    ap.add_argument("--synthetic", type=Path, required=True)
    ap.add_argument("--metadata", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from importlib.metadata import version

    import numpy as np

    np.random.seed(args.seed)
    start = time.perf_counter()
    metadata = json.loads(args.metadata.read_text())
    real, synthetic = read_table(args.real, metadata), read_table(args.synthetic, metadata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = quality(real, synthetic, metadata)
    scores["sdm_version"] = version("sdmetrics")
    scores["sdm_s"] = round(time.perf_counter() - start, 2)
    args.out.write_text(json.dumps(scores))


if __name__ == "__main__":
    main()
