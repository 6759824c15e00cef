"""Everything that sees private rows or exact statistics: validation, encoding, exact statistics, the
mechanism, the holdout split, the ledger, DP bounds and pre-flight. Nothing outside this package reads a row
of the input, except the internal evaluation."""
