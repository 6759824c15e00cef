"""SPLICE: differentially private synthetic tables from sliced Chebyshev moments.

The package root is the algorithm library (no Dagster import). The orchestration layer lives in
``splice_assets.dagster_layer`` and only wires these modules together.
"""

__version__ = "0.1.0"
