"""Sampling rows from a fitted mixture, decoding them to a table, and storing/loading fitted models.

Rows are drawn in the cube encoding: component by the weights, each discrete coordinate exactly on its grid
levels, the continuous block as mu + U g + sqrt(D) g' (vectorised per component), then clipped to [-1, 1].
A model is stored as ``<stem>.npz`` (arrays) + ``<stem>.json`` (layout, config and fit record).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from .encoding import Coordinate, EncodingLayout, decode, layout_for
from .fit import FitConfig, FittedMixture, MarginalTargets
from .model import MixtureParameters
from .schema import TableSchema

FORMAT_VERSION = 1


def sample_cube(model: FittedMixture, n_rows: int, seed: int, match_marginals: bool = False) -> np.ndarray:
    """``n_rows`` rows (n, d) in [-1, 1] from the fitted mixture; deterministic given ``seed``.

    With ``match_marginals`` and noisy 1-way marginals in the model, each coordinate is then re-mapped onto
    them keeping row ranks (``match_to_marginals``): post-processing of mechanism outputs, no privacy cost.
    Off by default: measured at eps = 1 it helps adult (1-way TVD 0.042 -> 0.034, 2-way 0.160 -> 0.150) but hurts
    the 5k-row demo (0.037 -> 0.044), where the noisy cells are noisier than the fitted model's marginals.
    """
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    layout, p = model.layout, model.params
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5A3B1E]))
    counts = rng.multinomial(n_rows, p.weights)
    out = np.empty((n_rows, layout.d))
    disc, cont = layout.discrete_index, layout.continuous_index
    grids = [layout.coordinates[i].grid() for i in disc]
    start = 0
    for c, n_c in enumerate(counts):
        block = out[start : start + n_c]
        for t, i in enumerate(disc):
            cdf = np.cumsum(p.probs[t][c])
            idx = np.searchsorted(cdf / cdf[-1], rng.random(n_c), side="right")
            block[:, i] = grids[t][np.minimum(idx, len(grids[t]) - 1)]
        if len(cont):
            g = rng.standard_normal((n_c, p.R)) if p.R else np.zeros((n_c, 0))
            gauss = p.means[c] + g @ p.factors[c].T + rng.standard_normal((n_c, len(cont))) * np.sqrt(p.diag[c])
            block[:, cont] = gauss
        start += n_c
    out = out[rng.permutation(n_rows)]
    np.clip(out, -1.0, 1.0, out=out)
    if match_marginals and model.marginal_targets is not None and n_rows:
        out = match_to_marginals(out, layout, model.marginal_targets, rng)
    return out


def target_counts(frequencies: np.ndarray, n_rows: int) -> np.ndarray:
    """Integer cell counts summing to ``n_rows`` from noisy frequencies (clipped at 0, largest remainder)."""
    p = np.clip(np.nan_to_num(np.asarray(frequencies, dtype=np.float64)), 0.0, None)
    p = p / p.sum() if p.sum() > 0 else np.full(p.shape, 1.0 / p.size)
    raw = p * n_rows
    counts = np.floor(raw).astype(np.int64)
    short = n_rows - counts.sum()
    counts[np.argsort(counts - raw, kind="stable")[:short]] += 1
    return counts


def match_to_marginals(
    cube: np.ndarray, layout: EncodingLayout, targets: MarginalTargets, rng: np.random.Generator
) -> np.ndarray:
    """Re-map every coordinate onto its noisy 1-way marginal, keeping the order of the rows' values.

    Rows are sorted by value (ties broken at random) and cut into consecutive runs of the target cell counts.
    A discrete coordinate takes its cell's grid level; a continuous value already inside its cell stays, one
    outside is clipped to the cell (so spikes at the public bounds survive). Joint structure is kept as far as
    ranks carry it; only rows at the cut points move.
    """
    out = cube.copy()
    n = len(cube)
    for i, (coord, freq) in enumerate(zip(layout.coordinates, targets.per_coordinate(layout))):
        counts = target_counts(freq, n)
        order = np.lexsort((rng.random(n), cube[:, i]))
        cells = np.repeat(np.arange(len(counts)), counts)
        assigned = np.empty(n, dtype=np.int64)
        assigned[order] = cells
        if coord.is_discrete:
            out[:, i] = coord.grid()[assigned]
        else:
            width = 2.0 / targets.numeric_bins
            start = -1.0 + assigned * width
            # A hair inside the cell so floating-point binning agrees; the outer edges stay exactly at +-1.
            lo = np.where(assigned == 0, -1.0, start + 1e-9 * width)
            hi = np.where(assigned == targets.numeric_bins - 1, 1.0, start + (1 - 1e-9) * width)
            out[:, i] = np.clip(cube[:, i], lo, hi)
    return out


def sample_table(
    model: FittedMixture, schema: TableSchema, n_rows: int, seed: int, match_marginals: bool = False
) -> pd.DataFrame:
    """Sample and decode into the schema's columns, order and dtypes."""
    if layout_for(schema) != model.layout:
        raise ValueError(f"the model's layout does not match schema {schema.name!r}")
    return decode(sample_cube(model, n_rows, seed, match_marginals), schema)


def save_model(model: FittedMixture, stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.npz`` and ``<stem>.json``; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    npz, meta_path = stem.with_suffix(".npz"), stem.with_suffix(".json")
    p = model.params
    arrays = {
        "weights": p.weights,
        "means": p.means,
        "factors": p.factors,
        "diag": p.diag,
        "loss_curve": model.loss_curve,
    }
    arrays.update({f"probs_{t}": table for t, table in enumerate(p.probs)})
    if model.marginal_targets is not None:
        arrays["marginal_frequencies"] = np.asarray(model.marginal_targets.frequencies, dtype=np.float64)
    np.savez(npz, **arrays)
    meta = {
        "format_version": FORMAT_VERSION,
        "layout": [[c.column, c.role, c.levels] for c in model.layout.coordinates],
        "n_probs": len(p.probs),
        "k": model.k,
        "final_loss": model.final_loss,
        "noise_floor": model.noise_floor,
        "steps": model.steps,
        "converged": model.converged,
        "device": model.device,
        "seconds": model.seconds,
        "seconds_per_step": model.seconds_per_step,
        "config": asdict(model.config),
        "holdout_losses": {str(k): v for k, v in model.holdout_losses.items()},
        "marginal_weight": None if model.marginal_targets is None else model.marginal_targets.weight,
        "numeric_bins": None if model.marginal_targets is None else model.marginal_targets.numeric_bins,
    }
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return npz, meta_path


def load_model(stem: str | Path) -> FittedMixture:
    """Inverse of ``save_model``."""
    stem = Path(stem)
    meta = json.loads(stem.with_suffix(".json").read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"model {str(stem)!r} has an unsupported format version")
    layout = EncodingLayout(tuple(Coordinate(col, role, int(levels)) for col, role, levels in meta["layout"]))
    with np.load(stem.with_suffix(".npz")) as data:
        params = MixtureParameters(
            weights=data["weights"],
            probs=tuple(data[f"probs_{t}"] for t in range(meta["n_probs"])),
            means=data["means"],
            factors=data["factors"],
            diag=data["diag"],
        )
        curve = data["loss_curve"]
        targets = None
        if "marginal_frequencies" in data:
            targets = MarginalTargets(
                data["marginal_frequencies"], float(meta["marginal_weight"]), int(meta["numeric_bins"])
            )
    params.check(layout)
    cfg = dict(meta["config"])
    cfg["candidate_K"] = tuple(cfg.get("candidate_K", ()))
    return FittedMixture(
        layout=layout,
        params=params,
        k=int(meta["k"]),
        loss_curve=curve,
        final_loss=float(meta["final_loss"]),
        noise_floor=float(meta["noise_floor"]),
        steps=int(meta["steps"]),
        converged=bool(meta["converged"]),
        device=str(meta["device"]),
        seconds=float(meta["seconds"]),
        seconds_per_step=float(meta["seconds_per_step"]),
        config=FitConfig(**cfg),
        holdout_losses={int(k): float(v) for k, v in meta["holdout_losses"].items()},
        marginal_targets=targets,
    )


def from_parameters(params: MixtureParameters, layout: EncodingLayout, k: int = 0) -> FittedMixture:
    """Wrap bare parameters (e.g. a hand-made model in a test) as a ``FittedMixture`` with an empty fit record."""
    params.check(layout)
    return FittedMixture(
        layout=layout, params=params, k=k, loss_curve=np.zeros(0), final_loss=float("nan"), noise_floor=float("nan"),
        steps=0, converged=False, device="cpu", seconds=0.0, seconds_per_step=0.0, config=FitConfig(K=params.K, R=params.R),
    )
