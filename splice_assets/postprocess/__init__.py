"""Post-processing of the fitted mixture toward the noisy tables: the fit's targets, the fine tables, links, cell
tilt, pairwise field, the post-processed model they make (``SyntheticModel``), its draws, and the chain that applies
them. Reads only the Measurement and the public schema."""
