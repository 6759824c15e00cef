"""The mixture fit's settings (``FitConfig``) and the fine tables' post-processing defaults.

Plain data with its own checks and no numerical imports, so that planning a release, validating settings and the
CLI can read the defaults without loading torch (``model.fit`` runs the fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NUMERIC_MODELS = ("histogram", "gaussian")

#: The fine tables' post-processing defaults (``postprocess.fine_tables``), read by ``FitConfig`` and ``FineTables``.
#: Fine cells whose noisy frequency is at most this many noise standard deviations are read as empty before the
#: projection (0 = the projection alone, measured best in docs/decisions/0017).
DEFAULT_FINE_THRESHOLD = 0.0
#: Shrink each coarse bin's noisy fine cells toward the bin's coarse shape before the projection (``shrunk_toward``).
DEFAULT_FINE_SHRINK = True
#: ... after moving them to the bin's mass, so that the gap between their noisy sum and the (better measured) mass
#: is not read as shape (``FineTables.level_first``).
DEFAULT_FINE_LEVEL_FIRST = True
#: ... and a column's tail bins toward an exponential density where it fits them better than a straight one
#: (``FineTables.exponential_tails``; docs/decisions/0043).
DEFAULT_FINE_EXPONENTIAL_TAILS = True
#: ... and the bin shapes read densities on the column's scale where its bins have unequal widths
#: (``FineTables.knot_shapes``; magic's qtvd1 -9 to -14%, values beyond the real extremes -36%: docs/decisions/0057).
DEFAULT_FINE_KNOT_SHAPES = True
#: Draw the rows of a bin at evenly spaced quantiles of its fine table, in random order (``FineTables.stratified``;
#: docs/decisions/0045).
DEFAULT_FINE_STRATIFIED = True
#: ... each cell weighted by the values it holds (``FineTables.capacity_shapes``; docs/decisions/0061).
DEFAULT_FINE_CAPACITY_SHAPES = True
#: ... a cell left as measured (a spike) only above ``spike_z`` of its column's cell count, not above 3 noise std
#: (``FineTables.corrected_spikes``; docs/decisions/0063).
DEFAULT_FINE_CORRECTED_SPIKES = True
#: Numeric pairs whose noisy coarse table shows at least this Gaussian-copula correlation couple their draws inside
#: the bins (``choose_couplings``).
DEFAULT_FINE_COUPLING = 0.5
#: ``FitConfig.marginal_tail_z``: a run of outer coarse bins within this many noise std of zero is read as empty.
DEFAULT_TAIL_Z = 1.0
#: ``FitConfig.marginal_island_z``: an outer run of coarse bins cut off from the rest by bins that look empty is read
#: as noise while its mass stays within this many noise std (0 = never).
DEFAULT_ISLAND_Z = 3.0


@dataclass(frozen=True)
class FitConfig:
    """Fit settings (all public), checked on construction (messages quote the value)."""

    # Diagonal (R = 0) components, more of them: measured at eps = 1 with rank matching, K = 10 / R = 0 beat the
    # paper's K = 5 / R = 2 on every metric (adult 2-way TVD 0.093 vs 0.098, SW1 0.0058 vs 0.0080, MMD 0.012 vs
    # 0.016, TSTR AUC 0.862 vs 0.828; california 2-way 0.199 vs 0.240): low-rank factors let the fit put mass on
    # thin curves that rank matching then stretches into false near-deterministic relations. With the 2-way
    # marginals in the loss, K = 20 beat 10 (adult 2-way 0.077 vs 0.095) and K = 30 added little (0.073). With joint
    # parts K = 16 matched K = 20 on TVD (paired, 3 seeds) at ~15% less per step, but california lost TSTR R^2
    # (paired .571 / .505 against .584 / .515 at eps = 1 / 0.5; its bench .514 / .524 against .544 / .581) and had up
    # to 1.6% duplicate rows.
    K: int = 20
    #: How a component holds a numeric column: "histogram" (probabilities over public bins that refine the
    #: measured marginals' bins, uniform inside a bin) or "gaussian" (one diagonal/low-rank Gaussian over all
    #: numeric columns). One fit each at eps = 1 (pairs in the loss, K = 20), gaussian -> histogram with 4 model
    #: bins per measured bin: adult 2-way / 3-way TVD 0.081 / 0.170 -> 0.069 / 0.142, SW1 0.0055 -> 0.0062, MMD
    #: 0.010 -> 0.015, TSTR AUC 0.868 -> 0.846; california 0.134 / 0.271 -> 0.113 / 0.234, SW1 0.0078 -> 0.0064,
    #: MMD 0.018 -> 0.022, TSTR R^2 0.577 -> 0.546. A Gaussian per component cannot hold spikes (hours = 40,
    #: capital_gain = 0, capped house values); a histogram can.
    numeric_model: str = "histogram"
    #: Model bins per measured bin. 1 measured the same TVD but worse SW1 / MMD (adult 0.0075 / 0.027) and
    #: california TSTR (0.48): uniform offsets in a 1/16-wide bin smear spikes at a bound.
    bin_refinement: int = 4
    R: int = 0
    max_steps: int = 600
    min_steps: int = 100
    lr: float = 0.03
    # Relative improvement of the best loss per window below which the fit stops. 3e-3 instead of 1e-3 cut the
    # steps by 25-50% (adult 445 -> 307, california 383 -> 275) at equal quality within seed noise (eps = 1:
    # adult 2-way TVD 0.098 vs 0.094, TSTR AUC 0.843 vs 0.856; california 0.184 vs 0.195).
    tol: float = 3e-3
    window: int = 50
    seed: int = 0
    tail_sigmas: float = 6.0
    sd_min: float = 1e-3
    tail_penalty: float = 10.0
    init_jitter: float = 0.7
    threads: int | None = 1
    device: str | None = None
    #: Multiplier on the mechanism's weight w for the noisy 1-way marginals in the loss; 0 = moments only.
    #: Measured (adult, california at eps = 1): moments-only fit + rank matching onto the noisy marginals
    #: beats putting them in the loss on every metric (california TSTR R^2 0.60 vs 0.02).
    marginal_loss_weight: float = 0.0
    #: Multiplier on the mechanism's weight w2 for the noisy 2-way marginals in the loss (when measured). At 1 (the
    #: weight that makes the loss a Gaussian log-likelihood) the histograms swamp the moments: california TSTR R^2
    #: 0.27 (0.3: 0.29, 0.1: 0.58); adult 2-way TVD 0.074 / 0.075 / 0.081, MMD 0.021 / 0.023 / 0.010.
    pair_loss_weight: float = 0.1
    #: Composite-EM iterations on the noisy 1-/2-way histograms that set the starting weights and probabilities
    #: (``product_em``; only with histogram numerics and measured pairs; 0 = the jittered moment start).
    #: Bench medians of 3 seeds, no EM -> EM: 2-way TVD adult 0.063 -> 0.057 at eps = 1, 0.055 -> 0.044 at 3;
    #: california 0.108 -> 0.091, 0.096 -> 0.069; SW1 lower, fit steps about halved. Fewer iterations denoise:
    #: one fit each at eps = 1, 200 / 100 / 50 / 20 iterations gave adult 0.059 / 0.058 / 0.058 / 0.056,
    #: california 0.094 / 0.093 / 0.088 / 0.086.
    em_iterations: int = 20
    #: Cell tilt (``tilt``; with measured pairs): chi^2 per cell of the noisy 1-/2-way tables at which its fit
    #: stops (1 = the noise level; 0 = no tilt), pool rows per output row, and its iteration cap.
    tilt_chi2: float = 1.0
    tilt_pool_factor: int = 4
    tilt_max_iterations: int = 300
    #: The tilt toward the target's 3-way tables (``chain.fit_target_tilt``; with measured triples) stops at this
    #: chi^2 per cell of the 1-, 2- and 3-way tables, or where its holdout pool stops improving (0 = no target tilt).
    #: Below the noise level on purpose: the class boundary is a few cells of many, and the average over all cells
    #: reaches 1 before it is fitted. Paired refits on nursery (docs/decisions/0049), TSTR at 1 -> 0.5: .956 ->
    #: .978, decile 2-way TVD .0193 -> .0186. At 0.5 the holdout pool stops it (chi^2 .83-.90).
    target_tilt_chi2: float = 0.5
    #: When the holdout stops the tilt short of ``tilt_chi2`` (the pool's support, not the noise, is the limit: at
    #: eps >= 3 on adult and california), it is refitted from there on pools this many times min(n, 25,000) rows in
    #: total, and sampling then draws half this many pool rows per output row (0 = never). Paired (add-remove, 3
    #: seeds), 3-way TVD without -> with: california .1439 -> .1396 at eps = 3, .1394 -> .1338 at eps = 10; adult
    #: .0756 -> .0732 at eps = 3. At eps <= 1 the narrow tilt reaches chi^2 = 1 and nothing changes (wide pools
    #: there regardless: adult .0886 -> .0899 at eps = 1). Cost, the whole fit at eps = 3: adult 12.6 -> 18.2 s,
    #: california 10.3 -> 11.8 s; the 400,000 x 24 scaling cell 35.8 -> 53.5 s (the refit runs at any large n).
    tilt_wide_pool_factor: int = 16
    #: Linked coordinates (``links``; with measured pairs): the Goodman-Kruskal lambda of a noisy 2-way table at
    #: or above which its (discrete) target is redrawn from the table given its source when sampling (0 = none).
    #: Bench medians of 3 seeds, adult 2-way / 3-way TVD without -> with: eps = 1 0.051 / 0.112 -> 0.050 / 0.106,
    #: eps = 3 0.040 / 0.093 -> 0.037 / 0.085. 0.4 let a spurious link in (native_country -> capital_loss).
    link_lambda: float = 0.6
    #: Joint parts (``model``): up to this many disjoint measured pairs whose noisy 2-way table the product EM
    #: start misfits by a mean squared standardised residual of at least ``joint_min_misfit`` (1 = the noise
    #: level; ``product_em.pair_misfit``), largest chi^2 excess first, get one joint table per component instead
    #: of two independent ones (0 = none; only with histogram numerics and measured pairs). Ranking by excess
    #: rather than misfit: california 3-way TVD eps = 1 .1856 -> .1758, eps = 10 .1457 -> .1383, adult eps = 1
    #: .1014 -> .1026 (paired, medians of 3 seeds). Paired A/B, medians of 3 seeds, 0 -> 6 pairs
    #: (2-way / 3-way TVD): adult eps = 0.5 .0675 / .135 -> .0656 / .128, eps = 1 .0521 / .110 -> .0491 / .101,
    #: eps = 3 .0369 / .083 -> .0355 / .078 (TSTR AUC .868 / .877 / .890 -> .876 / .887 / .900); california
    #: .1146 / .230 -> .1119 / .224, .0845 / .188 -> .0828 / .186, .0644 / .159 -> .0637 / .149. Cost: fit steps
    #: about 20% dearer (california eps = 1: 52 -> 61 ms with the torch fast path; 37 ms with ``kernels``). At
    #: most 3 pairs (misfit >= 5) kept most of adult's gain but little of california's.
    joint_pairs: int = 6
    joint_min_misfit: float = 2.0
    #: Pairwise field (``field``; with the tilt and histogram numerics): iterations of its fit to the tilted
    #: mixture's tables (0 = none), its persistent chains (the rows of the tilted mixture's sample it is fitted to),
    #: and the Gibbs sweeps each sampled row takes from its chain. The tilt is then refitted on the field's pools and
    #: sampling draws from the field times the tilt. Paired (add-remove, 3 seeds, means; 50 iterations on 25,000
    #: chains, 4 sweeps, the field's pools resampled by the tilt), 3-way TVD without -> with: california .2036 ->
    #: .1883 / .1650 -> .1515 / .1396 -> .1269 / .1338 -> .1206 at eps = 0.5 / 1 / 3 / 10, adult .1098 -> .1067 /
    #: .0886 -> .0865 / .0732 -> .0709 / .0697 -> .0660; 2-way TVD no worse anywhere, adult TSTR AUC +.004 to +.007,
    #: california SW1 +5-7% and TSTR R^2 .591 -> .575 at eps = 1 (+.005 / +.010 at 3 / 10). These defaults (40 on
    #: 12,500, 2 sweeps, sampled from the folded field) cost a third as much: california eps = 1 .1515, adult eps =
    #: 0.5 .1075 (the fit 6.5 -> 8.8 s and 6.5 -> 10.8 s with two runs sharing the 2 cores).
    field_iterations: int = 40
    field_chains: int = 12_500
    field_sweeps: int = 2
    #: Fine tables (``postprocess.fine_tables``): a fine cell whose noisy frequency is at most this many noise std is
    #: read as empty when values are drawn inside their coarse bin.
    fine_threshold: float = DEFAULT_FINE_THRESHOLD
    #: Numeric pairs whose noisy coarse 2-way table shows a Gaussian-copula |correlation| >= this couple their draws
    #: inside the bins (``fine_tables.choose_couplings``; 0 = none).
    fine_coupling: float = DEFAULT_FINE_COUPLING
    #: A numeric column's outermost coarse bins are read as empty while their pooled noisy mass stays within this
    #: many noise std of zero (``trimmed_tails``; 0 = never). Without it, the positive noise of the empty bins of
    #: wide public bounds became rows far outside the data (churn at eps = 1: 1% of international minutes above
    #: 1,000 where the data end at 20). z = 1 kept churn's gain and, unlike z = 2, cost California nothing under
    #: replace-one, whose larger noise let z = 2 cut thin real tails (docs/decisions/0021); z = 0.5 left more values
    #: beyond the real extremes on eight of nine tables (0040, docs/decisions/alternatives.md).
    marginal_tail_z: float = DEFAULT_TAIL_Z
    #: After that cut, an outer run of bins separated from the others by bins within ``marginal_tail_z`` noise std of
    #: zero is cut too while its mass stays within this many noise std (``trimmed_tails``; 0 = never): one bin of
    #: noise above z sd ends the run the first cut may take, and in a narrow bin of an integer column (a log-scale
    #: count's 0-1) its mass became a spike at one value. z = 2 left California's spikes (docs/decisions/0054).
    marginal_island_z: float = DEFAULT_ISLAND_Z
    #: Pool each numeric column's noisy fine table into its coarse 1-way target (``pooled_marginals``).
    pool_fine_tables: bool = True
    #: Shrink each categorical column's pooled 1-way target toward its mean cell (``fine_tables.shrunk_toward``).
    shrink_categories: bool = True
    #: Shrink each ordinal column's pooled 1-way target toward its nearest log-quadratic shape (``ordinal_shape``)
    #: instead of its mean cell, its frequent cells left alone: coil2000's qtvd1 .0309 -> .0286, qtvd2 .0836 ->
    #: .0797 (docs/decisions/0056).
    smooth_ordinals: bool = True
    #: Move a bin's noisy fine cells to the bin's mass before shrinking them (``FineTables.level_first``).
    fine_level_first: bool = True
    #: Shrink a column's tail bins toward an exponential density where it fits them better than a straight one
    #: (``FineTables.exponential_tails``).
    fine_exponential_tails: bool = DEFAULT_FINE_EXPONENTIAL_TAILS
    #: The bin shapes read densities on the column's scale where its knots make the bins unequal
    #: (``FineTables.knot_shapes``).
    fine_knot_shapes: bool = DEFAULT_FINE_KNOT_SHAPES
    #: Draw a bin's rows at evenly spaced quantiles of its fine table (``FineTables.stratified``).
    fine_stratified: bool = DEFAULT_FINE_STRATIFIED
    #: A coupled follower's rows far outside its copula's band take their bins from the copula where the noisy tables
    #: that hold it stay within this many sd of their chi^2 without it (``chain.choose_followers``; None = never).
    fine_follow_z: float | None = 3.0
    #: Weight the bin shapes by the values each fine cell holds (``FineTables.capacity_shapes``).
    fine_capacity_shapes: bool = DEFAULT_FINE_CAPACITY_SHAPES
    #: Leave a fine cell as measured only above a spike threshold that grows with its column's cell count
    #: (``FineTables.corrected_spikes``).
    fine_corrected_spikes: bool = DEFAULT_FINE_CORRECTED_SPIKES

    def __post_init__(self) -> None:
        for name in ("K", "bin_refinement", "max_steps", "window", "field_chains", "field_sweeps", "tilt_pool_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("R", "min_steps", "em_iterations", "joint_pairs", "tilt_max_iterations", "tilt_wide_pool_factor",
                     "field_iterations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        for name, positive in (("lr", True), ("tol", False), ("tail_sigmas", True), ("sd_min", True),
                               ("tail_penalty", False), ("init_jitter", False), ("marginal_loss_weight", False),
                               ("pair_loss_weight", False), ("joint_min_misfit", False), ("fine_threshold", False),
                               ("fine_coupling", False), ("marginal_tail_z", False),
                               ("marginal_island_z", False)):
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
            if not ok or value < 0 or (positive and not 0 < value < math.inf):
                raise ValueError(f"{name} must be a number {'in (0, inf)' if positive else '>= 0'}, got {value!r}")
        for name in ("pool_fine_tables", "shrink_categories", "smooth_ordinals", "fine_level_first",
                     "fine_exponential_tails", "fine_knot_shapes", "fine_stratified", "fine_capacity_shapes",
                     "fine_corrected_spikes"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        z = self.fine_follow_z
        if z is not None and (isinstance(z, bool) or not isinstance(z, (int, float)) or not 0 <= z < math.inf):
            raise ValueError(f"fine_follow_z must be a finite number >= 0 or null (never), got {z!r}")
        if self.numeric_model not in NUMERIC_MODELS:
            raise ValueError(f"numeric_model must be one of {NUMERIC_MODELS}, got {self.numeric_model!r}")


def check_post_processing(config: FitConfig) -> None:
    """The tilt and link settings, checked before any fitting (and where a release config enters); messages quote
    the bad value."""
    for name in ("tilt_chi2", "target_tilt_chi2"):
        chi2 = getattr(config, name)
        if isinstance(chi2, bool) or not isinstance(chi2, (int, float)) or not math.isfinite(chi2) or chi2 < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {chi2!r}")
    strength = config.link_lambda
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not 0 <= strength <= 1:
        raise ValueError(f"link_lambda must be a number in [0, 1] (0 = no links), got {strength!r}")
    for name, least in (("tilt_pool_factor", 1), ("tilt_wide_pool_factor", 0), ("tilt_max_iterations", 0),
                        ("field_iterations", 0), ("field_chains", 1), ("field_sweeps", 1)):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
