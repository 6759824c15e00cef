"""INTERNAL evaluation: metrics, the fidelity report and great-expectations suites. Reads real rows;
nothing here is ever released."""
