"""Post-processing of the fitted mixture toward the noisy tables: links, cell tilt, pairwise field, and the
chain that applies them. Reads only the Measurement and the public schema."""
