"""The one planner of a release: its privacy split, its measurement plan and calibration, and what it will spend.

Everything here is a function of public inputs (the schema, the settings, a row count that is public under
replace-one and ignored under add-remove), and imports no data stack: ``splice plan``, the refresh schedule, the
pre-flight and ``Synthesizer`` all plan through ``ReleasePlanner``, so they agree on every number and refusal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from splice_assets.config import SynthesizerSettings
from splice_assets.defaults import ESTIMATE_MECHANISM
from splice_assets.private.bounds import needs_estimate, selection_delta
from splice_assets.private.errors import PrivacyParameterError
from splice_assets.private.gaussian_dp import sigma_for
from splice_assets.private.ledger import Part
from splice_assets.private.measuring import MeasurementPlan, make_plan
from splice_assets.private.mechanism import SIGMA_MARGIN, Calibration, delta_for, epsilon_of, split_privacy
from splice_assets.schema import TableSchema

#: The names of a release's parts in its reservation (``BudgetLedger.reserve_release``).
ESTIMATE, MEASUREMENT = "estimate", "measurement"


@dataclass(frozen=True)
class ReleasePlanner:
    """A release of ``schema`` under ``settings``. ``estimate_spent``: the schema is already resolved by a DP estimate
    this release paid for (its share stays out of the measurement's privacy)."""

    schema: TableSchema
    settings: SynthesizerSettings
    estimate_spent: bool = False

    @classmethod
    def of(cls, schema: TableSchema, settings: SynthesizerSettings) -> ReleasePlanner:
        """The planner of a release as ``Synthesizer`` would run it: the measurement settings resolved for the
        schema and the settings checked against it (the same refusals, the same messages)."""
        settings.check_schema(schema)
        return cls(schema, _for_schema(settings, schema))

    def privacy_split(self) -> tuple[float, float | None]:
        """(the measurement's epsilon, the DP estimate's noise multiplier): with ``auto`` entries the estimate takes
        ``bounds_share`` of the release's Gaussian privacy (``split_privacy``), else the measurement takes all."""
        s = self.settings
        if not needs_estimate(self.schema) and not self.estimate_spent:
            return s.epsilon, None
        held = selection_delta(self.schema, s.delta)
        if held > 0:  # categories: auto: the estimate's noise pays for the threshold's delta
            return selection_split(s.epsilon, s.delta, s.bounds_share, held)
        return split_privacy(s.epsilon, s.delta, s.bounds_share)

    def plan(self, n_measured: int) -> tuple[MeasurementPlan, Calibration]:
        """The measurement's public plan and calibration for ``n_measured`` rows (n enters under replace-one)."""
        s, m = self.settings, self.settings.measurement
        return make_plan(
            self.schema, n_measured, self.privacy_split()[0], s.delta, m.n_directions, m.k, s.seed,
            # the plan hashes, and the measurement stores, the relation's value (a plain string)
            marginal_share=m.marginal_share, pair_share=m.pair_share, relation=s.relation, fine_bins=m.fine_bins,
            grid_weight=m.grid_weight, interval_weight=m.interval_weight, target_triples=m.target_triples,
            level_units=m.level_units, workload=m.workload,
        )

    def release_parts(self, n_measured: int) -> list[Part]:
        """What this release will spend, priced from public parameters before anything is drawn: the measurement
        and, while the schema has ``auto`` entries, the DP estimate, each a Gaussian with its noise multiplier (that
        of the calibration: it depends on (epsilon, delta) only, not on n or the resolved schema)."""
        return self.parts(*self.plan(max(n_measured, 1)))

    def parts(self, plan: MeasurementPlan, calibration: Calibration) -> list[Part]:
        s = self.settings
        parts = [Part(MEASUREMENT, plan.mechanism, calibration.noise_multiplier, plan.epsilon, s.delta)]
        estimate = self.privacy_split()[1]
        if estimate is not None and needs_estimate(self.schema):
            # the estimate's thresholds (categories: auto) spend selection_delta beside its Gaussian: the ledger
            # composes the Gaussian entries at delta_total less it
            parts.insert(0, Part(ESTIMATE, ESTIMATE_MECHANISM, estimate, epsilon_of(estimate, s.delta), s.delta,
                                 selection_delta(self.schema, s.delta)))
        return parts


def _multiplier(epsilon: float, delta: float) -> float:
    """The noise multiplier that alone is (epsilon, delta)-DP, as ``split_privacy`` computes it."""
    z = sigma_for(float(epsilon), float(delta)) * (1.0 + SIGMA_MARGIN)
    while delta_for(z, epsilon) > delta:
        z *= 1.0 + SIGMA_MARGIN
    return z


def selection_split(epsilon: float, delta: float, share: float, held: float) -> tuple[float, float]:
    """``split_privacy`` for a schema with ``categories: auto``: the main measurement is planned exactly as without
    them (z / sqrt(1 - share) at (epsilon, delta): the resolved schema, which no longer says it had an open list,
    plans it the same way), and the estimate's multiplier is raised so that the two compose to one Gaussian that is
    (epsilon, delta - ``held``)-DP: z_e^-2 = z_g^-2 - z_m^-2 (Dong, Roth & Su 2022, Cor. 3.3). The thresholds spend
    ``held`` (``bounds.category_threshold``), so the release is (epsilon, delta)-DP. Refused when the estimate's
    share leaves no room."""
    main_epsilon, _ = split_privacy(epsilon, delta, share)
    main = _multiplier(epsilon, delta) / math.sqrt(1.0 - share)
    room = _multiplier(epsilon, delta - held) ** -2 - main**-2
    if room <= 0.0:
        raise PrivacyParameterError(
            f"categories: auto spends {held:g} of delta on its threshold, which the DP estimate's share "
            f"{share:g} cannot pay for at epsilon={epsilon:g}, delta={delta:g}: raise bounds_share")
    return main_epsilon, room**-0.5


def _for_schema(settings: SynthesizerSettings, schema: TableSchema) -> SynthesizerSettings:
    from dataclasses import replace

    return replace(settings, measurement=settings.measurement.for_schema(schema))

