"""The post-processed model: the fitted mixture with what post-processing attached to it (``tilt``, ``links``,
``field``, the noisy ``fine`` tables, the ``target_tilt``). Sampling reads it; a release stores it
(``synthetic.save_model``)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from splice_assets.model.fit import FittedMixture
from splice_assets.postprocess.field import FieldChoice, PairwiseField
from splice_assets.postprocess.fine_tables import FineTables
from splice_assets.postprocess.links import Link
from splice_assets.postprocess.tilt import CellTilt


@dataclass(frozen=True)
class SyntheticModel(FittedMixture):
    """A fitted mixture (``model.fit.FittedMixture``: its parameters, 1-way targets and fit record) and its
    post-processing toward the noisy tables (``postprocess.chain``): the release artifact sampling draws from."""

    #: Potentials that tilt the mixture toward the noisy tables (``tilt``); sampling applies them when matching.
    tilt: CellTilt | None = None
    #: Near-functional pairs redrawn from the noisy tables' conditionals when sampling is matched (``links``).
    links: tuple[Link, ...] = ()
    #: The tilted model's 1-/2-way tables as a pairwise field (``field``); matched sampling draws its cells from it.
    field: PairwiseField | None = None
    #: The noisy fine tables of the numeric columns (``fine_tables``); sampling draws values inside their bins from
    #: them.
    fine: FineTables | None = None
    #: Potentials toward the target's noisy 3-way tables, holding the 1-/2-way ones (``chain.fit_target_tilt``);
    #: sampling resamples the matched rows by them.
    target_tilt: CellTilt | None = None
    #: Whether the pairwise field was fitted and why it was kept or dropped (public diagnostics; None: not fitted).
    field_choice: FieldChoice | None = None

    @classmethod
    def of(cls, mixture: FittedMixture) -> SyntheticModel:
        """The fitted mixture with no post-processing attached yet."""
        return cls(**{f.name: getattr(mixture, f.name) for f in fields(FittedMixture)})
