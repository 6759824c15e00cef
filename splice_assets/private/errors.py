"""The privacy-parameter error, in a module of its own that imports nothing.

The ledger raises it for a bad budget and ``mechanism`` for a bad calibration; keeping it here lets the ledger load
without numpy, so ``splice releases`` and ``splice show`` start quickly.
"""

from __future__ import annotations


class PrivacyParameterError(ValueError):
    """An (epsilon, delta, k, L, n) parameter is invalid; the message quotes the offending value."""
