"""``knots: auto`` (docs/decisions/0039): each dataset's repository schema against the same schema with the coarse
bins of the given numeric columns (default: all) placed at DP quantiles, compared by
``schema_variants.compare`` (each seed its own DP estimate and add-remove release at epsilon 1, scored against the
train split; TSTR on the test split). ``--scale-share`` overrides ``bounds.KNOT_SCALE_SHARE`` for the variant.

    .venv/bin/python -m bench.experiments.knots --datasets magic house_16h --seeds 0 1
    .venv/bin/python -m bench.experiments.knots --datasets shuttle --scale-share 0.6
"""

from __future__ import annotations

import argparse
import dataclasses

from bench.experiments.schema_variants import compare
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private import bounds
from splice_assets.schema import TableSchema


def knotted(schema: TableSchema, columns: list[str] | None) -> TableSchema:
    """The schema with ``knots: auto`` on the named numeric columns (all when None)."""
    return dataclasses.replace(schema, columns=tuple(
        dataclasses.replace(c, knots=(), knots_auto=True) if c.is_numeric and (columns is None or c.name in columns)
        else c for c in schema.columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["magic", "house_16h", "california_housing", "shuttle"])
    parser.add_argument("--columns", nargs="*", default=None, help="Numeric columns to knot (default: all).")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--scale-share", type=float, default=None)
    args = parser.parse_args()
    if args.scale_share is not None:
        bounds.KNOT_SCALE_SHARE = args.scale_share
    for name in args.datasets:
        schema = load_schema(schema_path(name))
        plain = dataclasses.replace(schema, columns=tuple(dataclasses.replace(c, knots=(), knots_auto=False)
                                                          for c in schema.columns))
        compare(name, {"without knots": plain, "knots: auto": knotted(plain, args.columns)}, args.seeds)


if __name__ == "__main__":
    main()
