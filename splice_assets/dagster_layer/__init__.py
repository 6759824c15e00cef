"""Dagster orchestration for SPLICE releases: thin wiring of the library modules (no algorithm here)."""
