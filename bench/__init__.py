"""Benchmark harness (issue 8): SPLICE vs AIM/MST on the shared datasets, and a scaling grid."""
