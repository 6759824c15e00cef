"""Benchmark harness (issue 8): SPLICE vs AIM/MST on the tables in $SPLICE_BENCH_DATASETS, and a scaling grid."""
