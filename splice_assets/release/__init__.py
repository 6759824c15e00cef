"""Release management: public and internal bundles, MLflow records, zero-cost refits, locations."""
