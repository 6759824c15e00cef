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
#: (``FineTables.knot_shapes``; docs/decisions/0057-bin-shapes-across-knots.md).
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
#: ``FitConfig.marginal_tail_noise_share``: tails are cut only through bins whose noise std is within this share of
#: the rows. Above it the test has no power: a run of k bins within z sd of zero may hold (z + 2) sd sqrt(k) of real
#: mass, and at 65 columns on 1,438 rows (a bin's std .075) the cut took 70% of a column's rows into one bin; the
#: shared tables' bins are at .0008-.013 (docs/decisions/0074-tails-at-high-noise.md).
DEFAULT_TAIL_NOISE_SHARE = 0.03


@dataclass(frozen=True)
class FitConfig:
    """Fit settings (all public), checked on construction (messages quote the value)."""

    # Diagonal (R = 0) components, 20 of them: more than the paper's K = 5 / R = 2 beat it on every metric, and
    # K = 16 lost TSTR (docs/decisions/0006-twenty-components.md).
    K: int = 20
    #: How a component holds a numeric column: "histogram" (probabilities over public bins that refine the
    #: measured marginals' bins, uniform inside a bin) or "gaussian" (one diagonal/low-rank Gaussian over all
    #: numeric columns). A Gaussian per component cannot hold spikes (hours = 40, capital_gain = 0, capped house
    #: values); a histogram can (docs/decisions/0005-histogram-numeric-model.md).
    numeric_model: str = "histogram"
    #: Model bins per measured bin: uniform offsets in a 1/16-wide bin smear spikes at a bound, so 4, not 1
    #: (docs/decisions/0005-histogram-numeric-model.md).
    bin_refinement: int = 4
    R: int = 0
    max_steps: int = 600
    min_steps: int = 100
    lr: float = 0.03
    # Relative improvement of the best loss per window below which the fit stops: 3e-3, not 1e-3, fewer steps at
    # equal quality (docs/decisions/0012-fit-stopping-rule.md).
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
    #: A moments-only fit plus rank matching onto the noisy marginals beats putting them in the loss
    #: (docs/decisions/0004-tables-in-fit-and-matching.md).
    marginal_loss_weight: float = 0.0
    #: Multiplier on the mechanism's weight w2 for the noisy 2-way marginals in the loss (when measured). At 1 (the
    #: weight that makes the loss a Gaussian log-likelihood) the histograms swamp the moments
    #: (docs/decisions/0004-tables-in-fit-and-matching.md).
    pair_loss_weight: float = 0.1
    #: Composite-EM iterations on the noisy 1-/2-way histograms that set the starting weights and probabilities
    #: (``product_em``; only with histogram numerics and measured pairs; 0 = the jittered moment start).
    #: The EM start lowers TVD and SW1 and about halves the fit steps; few iterations denoise, so 20
    #: (docs/decisions/0007-composite-em-start.md).
    em_iterations: int = 20
    #: Cell tilt (``tilt``; with measured pairs): chi^2 per cell of the noisy 1-/2-way tables at which its fit
    #: stops (1 = the noise level; 0 = no tilt), pool rows per output row, and its iteration cap.
    tilt_chi2: float = 1.0
    tilt_pool_factor: int = 4
    tilt_max_iterations: int = 300
    #: The tilt toward the target's 3-way tables (``chain.fit_target_tilt``; with measured triples) stops at this
    #: chi^2 per cell of the 1-, 2- and 3-way tables, or where its holdout pool stops improving (0 = no target tilt).
    #: Below the noise level on purpose: the class boundary is a few cells of many, and the average over all cells
    #: reaches 1 before it is fitted (docs/decisions/0049-target-triples.md). At 0.5 the holdout pool stops it.
    target_tilt_chi2: float = 0.5
    #: When the holdout stops the tilt short of ``tilt_chi2`` (the pool's support, not the noise, is the limit: at
    #: high eps), it is refitted from there on pools this many times min(n, 25,000) rows in total, and sampling then
    #: draws half this many pool rows per output row (0 = never). At eps <= 1 nothing changes; it costs fit time
    #: (docs/decisions/0008-cell-tilt.md).
    tilt_wide_pool_factor: int = 16
    #: Linked coordinates (``links``; with measured pairs): the Goodman-Kruskal lambda of a noisy 2-way table at
    #: or above which its (discrete) target is redrawn from the table given its source when sampling (0 = none).
    #: 0.6: lower TVD, while 0.4 let a spurious link in (docs/decisions/0009-linked-coordinates.md).
    link_lambda: float = 0.6
    #: A link's conditional is balanced to its two columns' 1-way targets (``links.balanced``): noised apart, they
    #: made the matching move hundreds of adult rows off the link (docs/decisions/0075-link-margins.md).
    link_balance: bool = True
    #: A link's conditional keeps, in each source cell's row, only the cells whose noisy count clears this many pair
    #: noise std (a row with none keeps all): the positive noise of the empty cells put hundreds of adult rows off
    #: its code-label link (0 = keep all; docs/decisions/0075-link-margins.md).
    link_cell_z: float = 3.0
    #: Joint parts (``model``): up to this many disjoint measured pairs whose noisy 2-way table the product EM
    #: start misfits by a mean squared standardised residual of at least ``joint_min_misfit`` (1 = the noise
    #: level; ``product_em.pair_misfit``), largest chi^2 excess first, get one joint table per component instead
    #: of two independent ones (0 = none; only with histogram numerics and measured pairs). Ranked by excess, not
    #: misfit; 6 pairs lower 2-/3-way TVD at about 20% dearer fit steps (docs/decisions/0010-joint-parts.md).
    joint_pairs: int = 6
    joint_min_misfit: float = 2.0
    #: Pairwise field (``field``; with the tilt and histogram numerics): iterations of its fit to the tilted
    #: mixture's tables (0 = none), its persistent chains (the rows of the tilted mixture's sample it is fitted to),
    #: and the Gibbs sweeps each sampled row takes from its chain. The tilt is then refitted on the field's pools and
    #: sampling draws from the field times the tilt. It lowers 3-way TVD, 2-way TVD no worse; these defaults cost a
    #: third of the measured run (docs/decisions/0011-pairwise-field.md).
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
    #: wide public bounds became rows far outside the data. z = 1, not 2 (whose cut took thin real tails under
    #: replace-one) nor 0.5 (docs/decisions/0021-tails-and-shrinkage.md, docs/decisions/alternatives.md).
    marginal_tail_z: float = DEFAULT_TAIL_Z
    #: After that cut, an outer run of bins separated from the others by bins within ``marginal_tail_z`` noise std of
    #: zero is cut too while its mass stays within this many noise std (``trimmed_tails``; 0 = never): one bin of
    #: noise above z sd ends the run the first cut may take, and in a narrow bin of an integer column (a log-scale
    #: count's 0-1) its mass became a spike at one value; z = 3, not 2 (docs/decisions/0054-islands-of-noise.md).
    marginal_island_z: float = DEFAULT_ISLAND_Z
    #: Both cuts stop at a bin whose pooled noise std is above this share of the rows (``trimmed_tails``; inf =
    #: never): such a table is projected whole (docs/decisions/0074-tails-at-high-noise.md).
    marginal_tail_noise_share: float = DEFAULT_TAIL_NOISE_SHARE
    #: Pool each numeric column's noisy fine table into its coarse 1-way target (``pooled_marginals``).
    pool_fine_tables: bool = True
    #: Shrink each categorical column's pooled 1-way target toward its mean cell (``fine_tables.shrunk_toward``).
    shrink_categories: bool = True
    #: Shrink each ordinal column's pooled 1-way target toward its nearest log-quadratic shape (``ordinal_shape``)
    #: instead of its mean cell, its frequent cells left alone (docs/decisions/0056-ordinal-shapes.md).
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
                               ("marginal_island_z", False), ("marginal_tail_noise_share", False),
                               ("link_cell_z", False)):
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
            if not ok or value < 0 or (positive and not 0 < value < math.inf):
                raise ValueError(f"{name} must be a number {'in (0, inf)' if positive else '>= 0'}, got {value!r}")
        for name in ("link_balance", "pool_fine_tables", "shrink_categories", "smooth_ordinals", "fine_level_first",
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
