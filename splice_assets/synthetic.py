"""The release artifact: a post-processed model (``SyntheticModel``) stored as ``<stem>.npz`` (arrays) +
``<stem>.json`` (layout, config and fit record), and read back."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from splice_assets.layout import Coordinate, EncodingLayout
from splice_assets.model.fit import FitConfig, MarginalTargets
from splice_assets.model.mixture import MixtureParameters
from splice_assets.postprocess.field import FieldChoice, PairwiseField
from splice_assets.postprocess.fine_tables import FineTables
from splice_assets.postprocess.links import Link
from splice_assets.postprocess.synthetic_model import SyntheticModel
from splice_assets.postprocess.tilt import CellTilt

# Model files: version 2 is written only for a model with joint parts, a pairwise field or fine tables, so that a
# reader that predates them refuses the file instead of silently sampling without them; every other model stays 1.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)


def save_model(model: SyntheticModel, stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.npz`` and ``<stem>.json``; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    npz, meta_path = stem.with_suffix(".npz"), stem.with_suffix(".json")
    p = model.params
    arrays: dict[str, Any] = {
        "weights": p.weights,
        "means": p.means,
        "factors": p.factors,
        "diag": p.diag,
        "loss_curve": model.loss_curve,
    }
    arrays.update({f"probs_{t}": table for t, table in enumerate(p.probs)})
    arrays.update({f"joint_{u}": table for u, table in enumerate(p.joint)})
    if model.marginal_targets is not None:
        arrays["marginal_frequencies"] = np.asarray(model.marginal_targets.frequencies, dtype=np.float64)
    if model.fine is not None:
        arrays["fine_frequencies"] = np.asarray(model.fine.frequencies, dtype=np.float64)
    tilt, target_tilt = model.tilt, model.target_tilt
    if tilt is not None:
        arrays["tilt_potentials"] = tilt.potentials
    if target_tilt is not None:
        arrays["target_tilt_potentials"] = target_tilt.potentials
    arrays.update({f"link_conditional_{i}": link.conditional for i, link in enumerate(model.links)})
    pairwise = model.field
    if pairwise is not None:
        arrays["field_potentials"], arrays["field_chains"] = pairwise.potentials, pairwise.chains
    np.savez(npz, **arrays)
    meta = {
        "format_version": FORMAT_VERSION if (p.joint_pairs or pairwise is not None or model.fine is not None
                                             or target_tilt is not None) else 1,
        "layout": [[c.column, c.role, c.levels] for c in model.layout.coordinates],
        "n_probs": len(p.probs),
        "joint_pairs": [list(pair) for pair in p.joint_pairs],
        "k": model.k,
        "final_loss": model.final_loss,
        "noise_floor": model.noise_floor,
        "steps": model.steps,
        "converged": model.converged,
        "device": model.device,
        "seconds": model.seconds,
        "seconds_per_step": model.seconds_per_step,
        "config": asdict(model.config),
        "marginal_weight": None if model.marginal_targets is None else model.marginal_targets.weight,
        "numeric_bins": None if model.marginal_targets is None else model.marginal_targets.numeric_bins,
        "tilt": None if tilt is None else _tilt_meta(tilt),
        "target_tilt": None if target_tilt is None else _tilt_meta(target_tilt),
        "links": [[link.source, link.target, link.strength] for link in model.links],
        "fine": None if model.fine is None else {
            "noise_std": model.fine.noise_std, "fine_bins": model.fine.fine_bins, "threshold": model.fine.threshold,
            "couplings": [list(c) for c in model.fine.couplings],
            "shrink": model.fine.shrink, "level_first": model.fine.level_first,
            "exponential_tails": model.fine.exponential_tails, "knot_shapes": model.fine.knot_shapes,
            "stratified": model.fine.stratified,
            "grid_weight": model.fine.grid_weight, "interval_weight": model.fine.interval_weight,
            "followers": list(model.fine.followers),
            "capacity_shapes": model.fine.capacity_shapes, "corrected_spikes": model.fine.corrected_spikes,
        },
        "field": None if pairwise is None else {
            "numeric_bins": pairwise.numeric_bins, "pairs": [list(pair) for pair in pairwise.pairs],
            "sweeps": pairwise.sweeps, "iterations": pairwise.iterations, "residual": pairwise.residual,
        },
        "field_choice": None if model.field_choice is None else asdict(model.field_choice),
    }
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return npz, meta_path


def _tilt_meta(tilt: CellTilt) -> dict[str, Any]:
    """A cell tilt's JSON part (its potentials go to the npz)."""
    return {
        "numeric_bins": tilt.numeric_bins, "pairs": [list(pair) for pair in tilt.pairs],
        "triples": [list(triple) for triple in tilt.triples], "pool_factor": tilt.pool_factor,
        "chi2_start": tilt.chi2_start, "chi2_end": tilt.chi2_end, "iterations": tilt.iterations,
    }


def _tilt_from(tilt_meta: dict[str, Any] | None, data: Any, potentials: str) -> CellTilt | None:
    """Inverse of ``_tilt_meta`` with the npz's ``potentials`` array (models written before 0049 hold no triples)."""
    if tilt_meta is None:
        return None
    return CellTilt(
        numeric_bins=int(tilt_meta["numeric_bins"]),
        pairs=tuple((int(a), int(b)) for a, b in tilt_meta["pairs"]),
        potentials=data[potentials],
        pool_factor=int(tilt_meta["pool_factor"]),
        chi2_start=float(tilt_meta["chi2_start"]),
        chi2_end=float(tilt_meta["chi2_end"]),
        iterations=int(tilt_meta["iterations"]),
        triples=tuple((int(t), int(a), int(b)) for t, a, b in tilt_meta.get("triples", [])),
    )


def load_model(stem: str | Path) -> SyntheticModel:
    """Inverse of ``save_model``."""
    stem = Path(stem)
    meta = json.loads(stem.with_suffix(".json").read_text())
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise ValueError(f"model {str(stem)!r} has an unsupported format version")
    layout = EncodingLayout(tuple(Coordinate(col, role, int(levels)) for col, role, levels in meta["layout"]))
    with np.load(stem.with_suffix(".npz")) as data:
        params = MixtureParameters(
            weights=data["weights"],
            probs=tuple(data[f"probs_{t}"] for t in range(meta["n_probs"])),
            means=data["means"],
            factors=data["factors"],
            diag=data["diag"],
            joint_pairs=tuple((int(a), int(b)) for a, b in meta.get("joint_pairs", [])),
            joint=tuple(data[f"joint_{u}"] for u in range(len(meta.get("joint_pairs", [])))),
        )
        curve = data["loss_curve"]
        targets = None
        if "marginal_frequencies" in data:
            targets = MarginalTargets(
                data["marginal_frequencies"], float(meta["marginal_weight"]), int(meta["numeric_bins"])
            )
        tilt = _tilt_from(meta.get("tilt"), data, "tilt_potentials")
        target_tilt = _tilt_from(meta.get("target_tilt"), data, "target_tilt_potentials")
        links = tuple(
            Link(int(source), int(target), data[f"link_conditional_{i}"], float(strength))
            for i, (source, target, strength) in enumerate(meta.get("links", []))
        )
        fine_meta = meta.get("fine")
        if fine_meta is not None:
            _refuse_removed_fine_options(stem, fine_meta)
        fine = None if fine_meta is None else FineTables(
            data["fine_frequencies"], float(fine_meta["noise_std"]), int(fine_meta["fine_bins"]),
            float(fine_meta["threshold"]),
            tuple((int(f), int(l), float(r)) for f, l, r in fine_meta["couplings"]),
            shrink=bool(fine_meta.get("shrink", False)),  # models written before the shrinkage sample without it
            level_first=bool(fine_meta.get("level_first", False)),  # models written before it sample as they did
            exponential_tails=bool(fine_meta.get("exponential_tails", False)),
            stratified=bool(fine_meta.get("stratified", False)),
            knot_shapes=bool(fine_meta.get("knot_shapes", False)),
            grid_weight=int(fine_meta.get("grid_weight", 1)),
            interval_weight=int(fine_meta.get("interval_weight", 1)),
            followers=tuple(int(f) for f in fine_meta.get("followers", ())),
            capacity_shapes=bool(fine_meta.get("capacity_shapes", False)),  # written before it: as they did
            corrected_spikes=bool(fine_meta.get("corrected_spikes", False)),
        )
        field_meta = meta.get("field")
        pairwise = None if field_meta is None else PairwiseField(
            numeric_bins=int(field_meta["numeric_bins"]),
            pairs=tuple((int(a), int(b)) for a, b in field_meta["pairs"]),
            potentials=data["field_potentials"],
            chains=data["field_chains"],
            sweeps=int(field_meta["sweeps"]),
            iterations=int(field_meta["iterations"]),
            residual=float(field_meta["residual"]),
        )
    params.check(layout)
    known = {f.name for f in fields(FitConfig)}
    # Settings removed since the model was written (candidate_K, link_null, ...: issue 66) are dropped; the model
    # holds what they chose (its K, links and tables).
    cfg = {k: v for k, v in meta["config"].items() if k in known}
    return SyntheticModel(
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
        marginal_targets=targets,
        tilt=tilt,
        links=links,
        field=pairwise,
        fine=fine,
        target_tilt=target_tilt,
        field_choice=None if meta.get("field_choice") is None else FieldChoice(**meta["field_choice"]),
    )


#: FineTables options removed in issue 66 (docs/decisions/0037, 0057; ``split``, the second fine table: 0017): models
#: written before then carry them, false or 0.
_REMOVED_FINE_OPTIONS = ("smooth", "tail_runs", "split")


def _refuse_removed_fine_options(stem: Path, fine_meta: dict[str, Any]) -> None:
    """A model written with a removed fine-table option on would now sample differently: refused, naming it."""
    on = [name for name in _REMOVED_FINE_OPTIONS if fine_meta.get(name)]
    if on:
        raise ValueError(f"model {str(stem)!r} was written with the fine-table option(s) {on} on, removed in issue 66; "
                         "sample it with the release that wrote it")


def from_parameters(params: MixtureParameters, layout: EncodingLayout, k: int = 0) -> SyntheticModel:
    """Wrap bare parameters (e.g. a hand-made model in a test) as a ``SyntheticModel`` with an empty fit record."""
    params.check(layout)
    return SyntheticModel(
        layout=layout,
        params=params,
        k=k,
        loss_curve=np.zeros(0),
        final_loss=float("nan"),
        noise_floor=float("nan"),
        steps=0,
        converged=False,
        device="cpu",
        seconds=0.0,
        seconds_per_step=0.0,
        config=FitConfig(K=params.K, R=params.R),
    )


__all__ = ("FORMAT_VERSION", "READABLE_VERSIONS", "SyntheticModel", "from_parameters", "load_model", "save_model")
