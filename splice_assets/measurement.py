"""The measurement artifact: noisy sliced moments plus the public facts needed to re-fit them.

Everything in a ``Measurement`` is either public (seed, L, k, scaling, relation, (epsilon, delta), and n under
replace-one) or the output of the Gaussian mechanism (noisy moments and histograms, sigma, and the noisy n under
add-remove), so it can be stored, shipped and re-fitted any number of times at zero privacy cost. Saved as
``<stem>.npz`` (the moments) + ``<stem>.json`` (the rest).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from splice_assets.defaults import RELATION_ADD_REMOVE as RELATION_ADD_REMOVE
from splice_assets.defaults import RELATION_REPLACE_ONE as RELATION_REPLACE_ONE
from splice_assets.defaults import RELATIONS as RELATIONS
from splice_assets.layout import ScalingMode, direction_scales, draw_directions
from splice_assets.limits import Relation

FORMAT_VERSION = 1
#: Fields of measurements stored before issue 66 removed their options (pair selection, docs/decisions/
#: alternatives.md; the second fine table, 0017): 0 (off) is read as absent, any other value is refused.
REMOVED_FIELDS = {"pair_candidates": "pair selection (pairs_per_coordinate)",
                  "fine_split": "the second fine table (fine_split)"}


def level_units(sizes: tuple[int, ...], numeric_bins: int) -> tuple[int, ...]:
    """How many 1-way tables each coarse table counts as in Delta^2: round((s / numeric_bins)^(2/3)), at least 1.

    A table's TVD from noise grows with its s cells times their noise std, so for a fixed Delta^2 the summed error
    of the tables is least with weights proportional to s^(1/3), i.e. units s^(2/3) (docs/decisions/0064). A table of
    up to about 1.5 numeric_bins cells (every numeric column's coarse table) keeps one unit; a category column of 41
    levels gets 2 and its cells 1/sqrt(2) of the noise. A public function of the schema's sizes."""
    return tuple(max(1, round((size / numeric_bins) ** (2.0 / 3.0))) for size in sizes)


def units_or_ones(units: tuple[int, ...], tables: int) -> tuple[int, ...]:
    """Stored ``marginal_units``, or one unit for each of ``tables`` where none are stored (every table at one)."""
    return units or (1,) * tables


def pooled_row_count(
    noisy_count: float,
    count_std: float,
    marginals: np.ndarray,
    marginal_sizes: tuple[int, ...],
    marginal_std: float,
    pairs: np.ndarray,
    pair_sizes: tuple[int, ...],
    pair_std: float,
    marginal_units: tuple[int, ...] = (),
) -> float:
    """The add-remove estimate of n (post-processing, >= 1): the noisy count pooled by inverse variance with the totals
    of the noisy histograms. Every row falls in exactly one cell of each histogram, so a histogram of s cells with
    noise std t per cell totals n + N(0, s t^2), independently of the count and of the other histograms; a 1-way
    table of u ``marginal_units`` has t = ``marginal_std`` / sqrt(u)."""
    estimates, precisions = [noisy_count], [count_std**-2]
    units = units_or_ones(marginal_units, len(marginal_sizes))
    for cells, sizes, stds in ((marginals, marginal_sizes, [marginal_std / math.sqrt(u) for u in units]),
                               (pairs, pair_sizes, [pair_std] * len(pair_sizes))):
        for block, std in zip(np.split(np.asarray(cells, dtype=np.float64), np.cumsum(sizes)[:-1]) if sizes else (),
                              stds):
            estimates.append(float(block.sum()))
            precisions.append(1.0 / (block.size * std**2))
    return max(1.0, float(np.dot(estimates, precisions) / np.sum(precisions)))


@dataclass(frozen=True)
class Measurement:
    """Noisy moments ``noisy_moments[j-1, l]`` ~ m_{j,l} + N(0, j * sigma^2), optional noisy 1-way marginal
    frequencies (+ N(0, (sigma/w)^2 / u) per cell, u the table's ``marginal_units``) and 2-way frequencies of
    coordinate ``pairs`` (+ N(0, (sigma/w2)^2)), and their public context.

    ``sigma`` is always on the frequency scale the fit reads. Under replace-one it is the mechanism's sigma and ``n``
    the public row count; under add-remove the mechanism noised sums, ``n`` is the noisy row count they were divided
    by and ``sigma`` the mechanism's sigma over it. ``noise_multiplier`` (sigma/Delta of the mechanism) is the privacy
    cost either way."""

    dataset: str
    schema_version: int
    seed: int
    n_directions: int
    k: int
    n: int
    d: int
    scaling: ScalingMode
    noisy_moments: np.ndarray
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    relation: Relation = Relation.REPLACE_ONE  # a plain string (the stored JSON) is taken
    ledger_entry_id: str | None = None
    noisy_marginals: np.ndarray = field(default_factory=lambda: np.zeros(0))
    marginal_sizes: tuple[int, ...] = ()
    marginal_weight: float = 0.0
    numeric_bins: int = 16
    #: How many 1-way tables each coarse table counts as in Delta^2 (``level_units``; empty: one each, as before).
    marginal_units: tuple[int, ...] = ()
    noisy_pairs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    pairs: tuple[tuple[int, int], ...] = ()
    pair_sizes: tuple[int, ...] = ()
    pair_weight: float = 0.0
    noise_multiplier: float = 0.0
    #: Noisy fine 1-way frequencies of the numeric columns (``fine_cells``), at ``fine_noise_std``.
    noisy_fine: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fine_sizes: tuple[int, ...] = ()
    fine_bins: int = 0
    #: A per-value fine table counted as this many 1-way tables in Delta^2, a fine table of intervals as
    #: ``interval_weight`` (1 before the settings existed).
    grid_weight: int = 1
    interval_weight: int = 1
    #: Noisy 3-way frequencies (t-major) of the target with pairs of other columns, then of the workload's
    #: marginals, each table at the 2-way noise std over sqrt(its ``triple_units``).
    noisy_triples: np.ndarray = field(default_factory=lambda: np.zeros(0))
    triples: tuple[tuple[int, int, int], ...] = ()
    triple_sizes: tuple[int, ...] = ()
    #: How many pair-family tables each 3-way table counts as in Delta^2 (empty: one each, as before workloads).
    triple_units: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "marginal_sizes", tuple(int(v) for v in self.marginal_sizes))
        object.__setattr__(self, "marginal_units", tuple(int(v) for v in self.marginal_units))
        if self.marginal_units and len(self.marginal_units) != len(self.marginal_sizes):
            raise ValueError("marginal units do not match the marginal sizes")
        object.__setattr__(self, "pairs", tuple((int(a), int(b)) for a, b in self.pairs))
        object.__setattr__(self, "pair_sizes", tuple(int(v) for v in self.pair_sizes))
        object.__setattr__(self, "fine_sizes", tuple(int(v) for v in self.fine_sizes))
        object.__setattr__(self, "triples", tuple((int(t), int(a), int(b)) for t, a, b in self.triples))
        object.__setattr__(self, "triple_sizes", tuple(int(v) for v in self.triple_sizes))
        object.__setattr__(self, "triple_units", tuple(int(v) for v in self.triple_units))
        if self.triple_units and len(self.triple_units) != len(self.triples):
            raise ValueError("3-way table units do not match the triples")
        if len(self.triple_sizes) != len(self.triples) or int(np.sum(self.triple_sizes)) != self.noisy_triples.size:
            raise ValueError("noisy 3-way tables do not match the triples and their sizes")
        if int(np.sum(self.fine_sizes)) != self.noisy_fine.size:
            raise ValueError("noisy fine tables do not match the fine sizes")
        if int(np.sum(self.marginal_sizes)) != self.noisy_marginals.size:
            raise ValueError("noisy marginals do not match the marginal sizes")
        if len(self.pair_sizes) != len(self.pairs) or int(np.sum(self.pair_sizes)) != self.noisy_pairs.size:
            raise ValueError("noisy 2-way marginals do not match the pairs and their sizes")
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        object.__setattr__(self, "relation", Relation(self.relation))
        if self.noise_multiplier == 0.0 and self.relation == Relation.REPLACE_ONE and self.sensitivity > 0:
            # Stored before the field existed: under replace-one sigma and Delta share the frequency scale.
            object.__setattr__(self, "noise_multiplier", self.sigma / self.sensitivity)

    def marginals(self) -> list[np.ndarray]:
        """The noisy 1-way frequencies split per coordinate (empty list without marginal queries)."""
        cuts = np.cumsum(self.marginal_sizes)[:-1]
        return list(np.split(self.noisy_marginals, cuts)) if self.marginal_sizes else []

    def pair_noise_std(self) -> float:
        """Noise std of one noisy 2-way frequency: sigma / w2."""
        return self.sigma / self.pair_weight if self.pair_weight > 0 else float("inf")

    def triple_noise_stds(self) -> np.ndarray:
        """Noise std of each 3-way table's cells: sigma / (sqrt(u) w2), u its ``triple_units``."""
        units = np.asarray(units_or_ones(self.triple_units, len(self.triples)), dtype=np.float64)
        return self.pair_noise_std() / np.sqrt(units)

    def triple_cell_noise_stds(self) -> np.ndarray:
        """``triple_noise_stds`` of every 3-way cell, in ``noisy_triples`` order."""
        return np.repeat(self.triple_noise_stds(), self.triple_sizes)

    def marginal_noise_std(self) -> float:
        """Noise std of one noisy marginal frequency of a table at one unit: sigma / w."""
        return self.sigma / self.marginal_weight if self.marginal_weight > 0 else float("inf")

    def table_noise_stds(self) -> np.ndarray:
        """Noise std of each 1-way table's cells: sigma / (sqrt(u) w), u its ``marginal_units``."""
        units = np.asarray(units_or_ones(self.marginal_units, len(self.marginal_sizes)), dtype=np.float64)
        return self.marginal_noise_std() / np.sqrt(units)

    def marginal_cell_noise_stds(self) -> np.ndarray:
        """Noise std of every noisy 1-way frequency, in the order of ``noisy_marginals``."""
        return np.repeat(self.table_noise_stds(), self.marginal_sizes)

    def fine_noise_std(self, per_value: bool) -> float:
        """Noise std of one noisy fine frequency: sigma / (sqrt(grid_weight) w) in a per-value table (one cell per
        grid value, ``FineCells.per_value``), else sigma / (sqrt(interval_weight) w)."""
        return self.marginal_noise_std() / math.sqrt(self.grid_weight if per_value else self.interval_weight)

    def directions(self) -> np.ndarray:
        """The L unit directions, recomputed from the public seed."""
        return draw_directions(self.seed, self.n_directions, self.d)

    def scales(self) -> np.ndarray:
        """Public per-direction divisors (sqrt(d) or ||theta||_1)."""
        return direction_scales(self.directions(), self.scaling)

    def moment_noise_std(self) -> np.ndarray:
        """Noise standard deviation of each raw moment order j = 1..k: sigma * sqrt(j)."""
        return self.sigma * np.sqrt(np.arange(1, self.k + 1))

    def public_metadata(self) -> dict[str, Any]:
        meta = asdict(self)
        meta.pop("noisy_moments")
        meta.pop("noisy_marginals")
        meta.pop("noisy_pairs")
        meta.pop("noisy_fine")
        meta.pop("noisy_triples")
        meta["triples"] = [list(triple) for triple in self.triples]
        meta["triple_sizes"] = list(self.triple_sizes)
        meta["triple_units"] = list(self.triple_units)
        meta["fine_sizes"] = list(self.fine_sizes)
        meta["marginal_sizes"] = list(self.marginal_sizes)
        meta["marginal_units"] = list(self.marginal_units)
        meta["pairs"] = [list(pair) for pair in self.pairs]
        meta["pair_sizes"] = list(self.pair_sizes)
        meta["relation"] = self.relation.value  # stored as the plain string
        meta["format_version"] = FORMAT_VERSION
        return meta

    def save(self, stem: str | Path) -> tuple[Path, Path]:
        stem = Path(stem)
        stem.parent.mkdir(parents=True, exist_ok=True)
        npz, meta = stem.with_suffix(".npz"), stem.with_suffix(".json")
        np.savez(
            npz, noisy_moments=self.noisy_moments, noisy_marginals=self.noisy_marginals, noisy_pairs=self.noisy_pairs,
            noisy_fine=self.noisy_fine, noisy_triples=self.noisy_triples,
        )
        meta.write_text(json.dumps(self.public_metadata(), indent=2, sort_keys=True))
        return npz, meta

    @classmethod
    def load(cls, stem: str | Path) -> Measurement:
        stem = Path(stem)
        meta = json.loads(stem.with_suffix(".json").read_text())
        if meta.pop("format_version", None) != FORMAT_VERSION:
            raise ValueError(f"measurement {str(stem)!r} has an unsupported format version")
        for name, option in REMOVED_FIELDS.items():
            value = meta.pop(name, 0)
            if value:
                raise ValueError(
                    f"measurement {str(stem)!r} was taken with {option} on ({name} = {value!r}), an option "
                    "removed in issue 66; refit it with the release that wrote it"
                )
        with np.load(stem.with_suffix(".npz")) as data:
            moments = data["noisy_moments"].astype(np.float64)
            marginals = data["noisy_marginals"].astype(np.float64) if "noisy_marginals" in data else np.zeros(0)
            pairs = data["noisy_pairs"].astype(np.float64) if "noisy_pairs" in data else np.zeros(0)
            fine = data["noisy_fine"].astype(np.float64) if "noisy_fine" in data else np.zeros(0)
            triples = data["noisy_triples"].astype(np.float64) if "noisy_triples" in data else np.zeros(0)
        if moments.shape != (meta["k"], meta["n_directions"]):
            raise ValueError(f"measurement {str(stem)!r}: moments shape {moments.shape} does not match k, L")
        meta["marginal_sizes"] = tuple(meta.get("marginal_sizes", ()))
        meta["marginal_units"] = tuple(meta.get("marginal_units", ()))
        meta["triple_units"] = tuple(meta.get("triple_units", ()))
        meta["fine_sizes"] = tuple(meta.get("fine_sizes", ()))
        return cls(noisy_moments=moments, noisy_marginals=marginals, noisy_pairs=pairs, noisy_fine=fine,
                   noisy_triples=triples, **meta)
