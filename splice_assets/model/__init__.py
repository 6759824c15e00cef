"""The mixture model and its fit. Reads only the Measurement (noisy statistics) and the public schema."""
