"""The privacy audit that ships with the product: claimed against audited epsilon for every noisy step of a release.

``python -m bench.audit`` runs the library's release path (``Synthesizer.prepare`` then ``measure``: the DP estimate
of the schema's ``auto`` entries, then the main measurement) on a table and on worst-case neighbours of it, under
both neighbouring relations, and reports for each step an empirical lower bound on epsilon at the claimed delta
beside the claimed epsilon. ``--quick`` is the size CI runs (``tests/test_audit.py``); ``--write`` puts the table in
``bench/results/audit.md`` and docs/privacy.md (between its audit markers).

Gaussian steps (the estimate's histograms, value counts and knot counts; the main measurement) are audited through
the privacy-loss distribution of the released vector. The sampler is replaced by a recorder that hands every
neighbour the base table's noisy outputs, so later steps see the same public choices (adaptive composition fixes
the earlier outputs), and records the exact vector each step would noise. For a Gaussian release the privacy loss
between neighbours is fixed by mu = ||f(D) - f(D')|| / sigma, so the audited epsilon is that of a Gaussian
mechanism with the largest mu found, where sigma is the upper 1e-6 confidence bound of the standard deviation of
draws from the real sampler at the step's sigma (a sampler that draws too little noise shows there). A step whose
noise was calibrated to half its true sensitivity (``--plant half-delta``) audits above its claim.

The ``values: auto`` selection releases a set, not a vector: it gets a distinguishing test instead. The real
``select_values`` runs many times on the counts of two neighbouring tables (a code held by one row, or by none,
beside 40 codes held at 2.5 sigma; the threshold lowered to 1 sigma, which the guarantee does not depend on, so
that the telling event is common), and the event "the code is kept" gives epsilon >= log((p - delta) / p') with
Clopper-Pearson bounds at 1e-3 a side. The rule that ranked the empty candidates last (``--plant empty-last``, the
defect of issue 65) audits far above its claim.

The ``categories: auto`` threshold (``select_categories``) gets one too, on the partition only one neighbour holds:
a key held by one row on one side and by none on the other (under replace-one the other side's row holds another
key). Its kept probability must stay below the delta ``category_threshold`` charges for it, so the threshold is
set by the product's own function at the estimate's sigma for a measurable column delta (``CATEGORY_DELTA``; the
product's delta is far too small to observe, and the threshold depends on it only through that function). The
real ``select_categories`` runs once on a column whose many keys are held by one row each (the keys are
independent trials: each its own noise, the cap above their number); "the key is kept" gives epsilon >= log((p -
delta) / p') with Clopper-Pearson bounds as above. A selection with no threshold (``--plant no-threshold``: the
cap alone, largest noisy counts) keeps such keys and audits far above its claim.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import yaml

from splice_assets.measurement import RELATION_ADD_REMOVE, RELATION_REPLACE_ONE
from splice_assets.private import bounds, mechanism
from splice_assets.private.gaussian_dp import epsilon_for
from splice_assets.schema import TableSchema, parse_schema

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "audit.md"
DOCS = REPO / "docs" / "privacy.md"
START, END = "<!-- audit:start -->", "<!-- audit:end -->"
EPSILON, DELTA = 1.0, 1e-6
#: Confidence of the one-sided Clopper-Pearson bounds, and of the sampler's sd bound (tighter: a claim met exactly,
#: as the estimate's is by a duplicated row, would otherwise fail one audit in a thousand by chance).
ALPHA, ALPHA_SD = 1e-3, 1e-6
#: Draws of the real sampler per step to bound its standard deviation; selection draws per table.
SAMPLER_DRAWS, SELECTION_DRAWS = {"quick": 20_000, "full": 200_000}, {"quick": 1_500, "full": 6_000}
SELECTION_Z, SELECTION_HELD, SELECTION_LEVEL = 1.0, 40, 2.5
#: ``categories: auto``: the column delta the audited threshold is set for (observable at SELECTION_DRAWS trials).
CATEGORY_DELTA = 0.02

REGIONS = ", ".join(f"r{i:02d}" for i in range(40))
SCHEMA_YAML = f"""
name: audit_table
version: 1
n_min: 100
target: grade
columns:
  - {{name: amount, kind: continuous, bounds: auto, values: auto, decimals: auto}}
  - {{name: age, kind: integer, bounds: [0, 100000], values: [5, auto], step: auto}}
  - {{name: score, kind: continuous, bounds: [0, 50], knots: auto}}
  - {{name: colour, kind: categorical, categories: [red, green, blue, grey]}}
  - {{name: grade, kind: ordinal, categories: [1, 2, 3]}}
  - {{name: region, kind: categorical, categories: [{REGIONS}]}}
  - {{name: when, kind: datetime, bounds: auto, resolution: auto}}
"""
#: A workload 3-way table in the main measurement, at its units (docs/decisions/0073): audited with the rest.
WORKLOAD = (("colour", "region", "score"),)
#: A row at the far end of every column: other decades, other decimals, other step cells, the top knot cell, the
#: last month of the grid on a second.
EXTREME_ROW = {"amount": 987654.321, "age": 99999, "score": 50.0, "colour": "grey", "grade": 3, "region": "r39",
               "when": "2099-12-31 23:59:59"}


def audit_schema() -> TableSchema:
    return parse_schema(yaml.safe_load(SCHEMA_YAML))


def audit_table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Rows as a CSV gives them: amounts in two decades with a tenth at 60, even ages, scores skewed low."""
    amount = rng.gamma(2.0, 20.0, n).clip(1, 99).round(2)
    amount[rng.uniform(size=n) < 0.1] = 60.0
    return pd.DataFrame({
        "amount": amount, "age": 2 * rng.integers(9, 45, n), "score": rng.exponential(5.0, n).clip(0, 50).round(3),
        "colour": rng.choice(["red", "green", "blue"], n), "grade": rng.integers(1, 4, n),
        "region": rng.choice([f"r{i:02d}" for i in range(30)], n),
        "when": (pd.Timestamp("2019-03-01") + pd.to_timedelta(60 * rng.integers(0, 31 * 24 * 60, n), unit="s")
                 ).astype(str),
    })


def neighbours(rng: np.random.Generator, table: pd.DataFrame, relation: str) -> dict[str, pd.DataFrame]:
    """Named neighbours of ``table`` under ``relation``: the rows the sensitivity arguments call worst."""
    row = int(rng.integers(len(table)))
    extreme = pd.DataFrame([EXTREME_ROW])
    missing = pd.DataFrame([{**EXTREME_ROW, "amount": None, "score": None, "colour": "purple", "when": None}])
    shuffled = lambda t: t.sample(frac=1.0, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)  # noqa: E731
    if relation == RELATION_ADD_REMOVE:
        return {
            "add an extreme row": pd.concat([table, extreme], ignore_index=True),
            "add an extreme row, reorder": shuffled(pd.concat([table, extreme], ignore_index=True)),
            "add missing cells and an unseen category": pd.concat([table, missing], ignore_index=True),
            "add a duplicate": pd.concat([table, table.iloc[[row]]], ignore_index=True),
            "remove a row": table.drop(index=row).reset_index(drop=True),
        }
    replaced, blank = table.copy(), table.copy()
    replaced.iloc[row] = pd.Series(EXTREME_ROW)
    blank.iloc[row] = missing.iloc[0]
    return {"replace by an extreme row": replaced, "replace by an extreme row, reorder": shuffled(replaced),
            "replace by missing cells and an unseen category": blank}


# -- tracing the Gaussian steps -------------------------------------------------------------------------------------

FIRST_STEP = "estimate: bounds, decimals, step, month, unit histograms"
STEP_OF_CALLER = {"estimate_bounds_from_counts": FIRST_STEP,
                  "select_knots": "estimate: knot histograms", "add_noise_joint": "measurement"}
VALUES_STEP = "estimate: values counts"


class _Stop(Exception):
    """Raised once the main measurement's input is recorded: nothing after it is audited here."""


@dataclass
class Trace:
    """What one run handed each noisy step: the exact vectors, their sigma, and the noisy outputs it got back."""

    steps: list[str]
    vectors: list[np.ndarray]
    sigmas: list[float]
    outputs: list[object]
    multipliers: dict[str, float]


def _dense(counts: list[tuple[np.ndarray, np.ndarray]], columns: list) -> np.ndarray:
    parts = []
    for (held, count), spec in zip(counts, columns):
        candidates = bounds.value_candidates(spec)
        dense = np.zeros(0 if candidates is None else candidates.size)
        dense[held] = count
        parts.append(dense)
    return np.concatenate(parts) if parts else np.zeros(0)


def trace(table: pd.DataFrame, relation: str, sampler: Callable[[np.ndarray, float], np.ndarray],
          replay: Trace | None = None) -> Trace:
    """Run the release path on ``table`` up to the main measurement's noise, recording every noisy step. The base
    run (``replay`` None) gets real noise from ``sampler``; a neighbour gets the base run's outputs back."""
    from splice_assets import MeasurementSettings, Synthesizer

    out = Trace([], [], [], [], {})
    select_values = bounds.select_values

    def record(step: str, vector: np.ndarray, sigma: float, real: Callable[[], object]) -> object:
        index = len(out.steps)
        out.steps.append(step)
        out.vectors.append(np.array(vector, dtype=np.float64, copy=True))
        out.sigmas.append(float(sigma))
        if replay is not None and (index >= len(replay.steps) or replay.steps[index] != step
                                   or replay.vectors[index].shape != out.vectors[-1].shape):
            raise AssertionError(f"a neighbour took another path than the base table at step {index} ({step})")
        result = real() if replay is None else replay.outputs[index]
        out.outputs.append(result)
        if step == "measurement":
            raise _Stop
        return result

    def noise(values: np.ndarray, sigma: float) -> np.ndarray:
        step = STEP_OF_CALLER.get(sys._getframe(1).f_code.co_name, "other")
        return np.asarray(record(step, values, sigma, lambda: sampler(values, sigma)))

    def selection(counts, columns, sigma, entropy):  # noqa: ANN001 (the library's signature)
        def real() -> object:
            with _patched(mechanism, "gaussian_noise", sampler):  # its own draws are not a step of their own
                return select_values(counts, columns, sigma, entropy)

        return record(VALUES_STEP, _dense(counts, columns), sigma, real)

    synth = Synthesizer(audit_schema(), EPSILON, DELTA, relation, measurement=MeasurementSettings(workload=WORKLOAD))
    out.multipliers["estimate"] = float(synth.privacy_split()[1] or math.inf)
    with _patched(mechanism, "gaussian_noise", noise), _patched(bounds, "select_values", selection):
        cleaned = synth.prepare(table, None)
        x = synth.encode(cleaned.table)
        out.multipliers["measurement"] = synth.plan(x.shape[0])[1].noise_multiplier
        try:
            synth.measure(x, None)
        except _Stop:
            pass
    return out


@contextmanager
def _patched(module: object, name: str, value: object) -> Iterator[None]:
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def sampler_sd_upper(sampler: Callable[[np.ndarray, float], np.ndarray], sigma: float, draws: int) -> float:
    """Upper (1 - ALPHA_SD) confidence bound on the sd of ``draws`` draws of ``sampler`` at ``sigma`` (chi-square)."""
    from scipy.stats import chi2

    noise = sampler(np.zeros(draws), sigma)
    return float(np.sqrt(np.sum(noise**2) / chi2.ppf(ALPHA_SD, draws)))


def gaussian_epsilon(mu: float, delta: float = DELTA) -> float:
    """Epsilon at ``delta`` of a Gaussian mechanism whose neighbours' means lie ``mu`` noise sd apart."""
    return 0.0 if mu <= 0 else epsilon_for(1.0 / mu, delta)


@dataclass(frozen=True)
class Row:
    relation: str
    step: str
    claimed: float
    audited: float
    worst: str
    ratio: float  # largest shift over the declared sensitivity (Gaussian steps); nan for the distinguisher

    @property
    def holds(self) -> bool:
        return self.audited <= self.claimed


def audit_relation(relation: str, size: str, sampler: Callable[[np.ndarray, float], np.ndarray],
                   rng: np.random.Generator) -> list[Row]:
    """Claimed and audited epsilon of every Gaussian step, of the estimate and of the release, under ``relation``."""
    table = audit_table(rng, 400)
    base = trace(table, relation, sampler)
    others = {name: trace(other, relation, sampler, base) for name, other in neighbours(rng, table, relation).items()}
    sd_upper = {sigma: sampler_sd_upper(sampler, sigma, SAMPLER_DRAWS[size]) for sigma in set(base.sigmas)}
    groups = {step: [i for i, s in enumerate(base.steps) if s == step] for step in dict.fromkeys(base.steps)}
    groups_of = {"estimate": [i for i, s in enumerate(base.steps) if s.startswith("estimate")],
                 "measurement": groups.get("measurement", [])}
    rows = []

    def mu(indices: list[int], other: Trace) -> float:
        return math.sqrt(sum((float(np.linalg.norm(other.vectors[i] - base.vectors[i])) / sd_upper[base.sigmas[i]])
                             ** 2 for i in indices))

    def row(step: str, indices: list[int], multiplier: float, claimed: float) -> Row:
        mus = {name: mu(indices, other) for name, other in others.items()}
        worst = max(mus, key=lambda name: mus[name])
        declared = base.sigmas[indices[0]] / multiplier if math.isfinite(multiplier) else math.nan
        shift = max(math.sqrt(sum(float(np.linalg.norm(o.vectors[i] - base.vectors[i])) ** 2 for i in indices))
                    for o in others.values())
        return Row(relation, step, claimed, gaussian_epsilon(mus[worst]), worst, shift / declared)

    for step, indices in groups.items():
        part = "estimate" if step.startswith("estimate") else "measurement"
        rows.append(row(step, indices, base.multipliers[part], mechanism.epsilon_of(base.multipliers[part], DELTA)))
    rows.append(temporal_row(relation, base, others, groups[FIRST_STEP][0], sd_upper))
    rows.append(row("estimate (composed)", groups_of["estimate"], base.multipliers["estimate"],
                    mechanism.epsilon_of(base.multipliers["estimate"], DELTA)))
    release = {name: math.hypot(mu(groups_of["estimate"], o), mu(groups_of["measurement"], o))
               for name, o in others.items()}
    worst = max(release, key=lambda name: release[name])
    rows.append(Row(relation, "release (composed)", EPSILON, gaussian_epsilon(release[worst]), worst, math.nan))
    estimate_sigma = base.sigmas[groups[VALUES_STEP][0]]
    rows.append(selection_row(relation, estimate_sigma, SELECTION_DRAWS[size]))
    rows.append(category_row(relation, estimate_sigma, SELECTION_DRAWS[size]))
    return rows


def temporal_row(relation: str, base: Trace, others: dict[str, Trace], index: int, sd_upper: dict[float, float]
                 ) -> Row:
    """The datetime's month and unit histograms alone: the tail of the first step's vector, audited against their
    own share of the sensitivity (one cell each per row: Delta^2 = f (M + U), ``bounds.estimate_sensitivity``), so
    that a miscounted datetime histogram shows even beside the others' larger sensitivity. Claimed: the Gaussian
    epsilon of the step's sigma over that share."""
    from splice_assets.kinds.temporal import MONTH_CELLS, UNIT_CELLS

    schema = audit_schema()
    months, units = len(bounds.period_auto_columns(schema)), len(bounds.resolution_auto_columns(schema))
    cells = months * MONTH_CELLS + units * len(UNIT_CELLS)
    share = bounds.estimate_sensitivity(0, 0, relation, period_columns=months, resolution_columns=units)
    sigma = base.sigmas[index]
    shifts = {name: float(np.linalg.norm(o.vectors[index][-cells:] - base.vectors[index][-cells:]))
              for name, o in others.items()}
    worst = max(shifts, key=lambda name: shifts[name])
    return Row(relation, "estimate: month, unit histograms (datetime, of the first step)",
               gaussian_epsilon(share / sigma), gaussian_epsilon(shifts[worst] / sd_upper[sigma]), worst,
               shifts[worst] / share)


# -- the values: auto selection ---------------------------------------------------------------------------------------


def clopper_pearson(hits: int, draws: int) -> tuple[float, float]:
    """(lower, upper) one-sided Clopper-Pearson bounds at ``ALPHA`` on a binomial rate."""
    from scipy.stats import beta

    low = 0.0 if hits == 0 else float(beta.ppf(ALPHA, hits, draws - hits + 1))
    high = 1.0 if hits == draws else float(beta.ppf(1 - ALPHA, hits + 1, draws - hits))
    return low, high


def selection_row(relation: str, sigma: float, draws: int) -> Row:
    """The distinguishing test of ``select_values`` at the estimate's ``sigma`` (module docstring). The two tables
    differ by one row in one column's candidate counts: add-remove sensitivity 1 under either relation (a
    replace-one neighbour is this plus a row moved elsewhere), so the claim is the Gaussian epsilon at 1 / sigma."""
    spec = parse_schema({"name": "codes", "version": 1, "n_min": 10, "columns": [
        {"name": "code", "kind": "integer", "bounds": [0, 300], "values": "auto"}]}).columns[0]
    held = np.arange(200, 200 + SELECTION_HELD)
    level = max(1, round(SELECTION_LEVEL * sigma))
    tables = {rows: [(np.concatenate([[100], held]) if rows else held,
                      np.concatenate([[rows], np.full(len(held), level)]) if rows else np.full(len(held), level))]
              for rows in (0, 1)}
    entropy = np.random.default_rng()  # OS entropy, as in a release
    hits = {}
    with _patched(bounds, "selection_z", lambda candidates: SELECTION_Z):
        for rows, counts in tables.items():
            hits[rows] = sum(100 in bounds.select_values(counts, [spec], sigma, entropy)["code"] for _ in range(draws))
    (low_one, high_one), (low_none, high_none) = clopper_pearson(hits[1], draws), clopper_pearson(hits[0], draws)
    ratios = [(low_one - DELTA) / high_none, (low_none - DELTA) / high_one]
    audited = max(0.0, *(math.log(r) for r in ratios if r > 0))
    return Row(relation, "estimate: values selection (distinguisher)", gaussian_epsilon(1.0 / sigma), audited,
               f"a code held by one row or none ({hits[1]} / {hits[0]} of {draws} kept)", math.nan)


# -- the categories: auto threshold -----------------------------------------------------------------------------------

CATEGORY_STEP = f"estimate: categories threshold (distinguisher, δ = {CATEGORY_DELTA:g})"


def category_row(relation: str, sigma: float, draws: int) -> Row:
    """The distinguishing test of ``select_categories`` on the one-sided partition (module docstring): ``draws``
    keys held by one row each on one side, none (add-remove) or other keys (replace-one) on the other, thresholded
    at ``category_threshold(sigma, CATEGORY_DELTA, relation)``. Each key's being kept is one trial; a kept share
    whose lower bound exceeds CATEGORY_DELTA (plus e^epsilon times the other side's upper bound) audits above the
    claim, the Gaussian epsilon at 1 / sigma (that of a shared key's count, as for the values selection)."""
    spec = parse_schema({"name": "keys", "version": 1, "n_min": 10, "columns": [
        {"name": "key", "kind": "categorical", "categories": "auto", "other": "rest",
         "max_categories": draws}]}).columns[0]
    threshold = bounds.category_threshold(sigma, CATEGORY_DELTA, relation)
    held = {f"t{i:05d}": 1 for i in range(draws)}
    other = {f"u{i:05d}": 1 for i in range(draws)} if relation == RELATION_REPLACE_ONE else {}
    hits = {}
    for side, counts in (("one", held), ("none", other)):
        kept = bounds.select_categories([counts], [spec], sigma, threshold)["key"]
        hits[side] = sum(key in held for key in kept)
    (low_one, high_one), (low_none, high_none) = clopper_pearson(hits["one"], draws), clopper_pearson(hits["none"],
                                                                                                       draws)
    ratios = [(low_one - CATEGORY_DELTA) / high_none, (low_none - CATEGORY_DELTA) / high_one]
    audited = max([0.0, *(math.log(r) for r in ratios if r > 0)])
    return Row(relation, CATEGORY_STEP, gaussian_epsilon(1.0 / sigma), audited,
               f"a key held by one row or none ({hits['one']} / {hits['none']} of {draws} kept, threshold "
               f"{threshold:.4g} = 1 + {(threshold - 1) / sigma:.3f} sigma)", math.nan)


# -- planted defects --------------------------------------------------------------------------------------------------


def _rank_empty_last(counts, columns, sigma, entropy):  # noqa: ANN001 (the library's signature)
    """The selection before issue 65: the empty candidates that pass get z sigma and rank below every held one."""
    found = {}
    for spec, (held, count) in zip(columns, counts):
        candidates = bounds.value_candidates(spec)
        if candidates is None:
            continue
        z = bounds.selection_z(candidates.size)
        noisy = mechanism.gaussian_noise(count.astype(np.float64), sigma)
        chosen = sorted(((float(v), int(i)) for v, i in zip(noisy, held) if v > z * sigma), key=lambda t: -t[0])
        others = np.setdiff1d(np.arange(candidates.size), held)
        passing = entropy.choice(others, size=entropy.binomial(len(others), NormalDist().cdf(-z)), replace=False)
        kept = [i for _, i in chosen + [(z * sigma, int(i)) for i in passing]][: bounds.MAX_FOUND]
        found[spec.name] = tuple(float(v) for v in candidates.value(np.sort(np.array(kept, dtype=np.int64))))
    return found


def _no_threshold(select: Callable[..., dict[str, tuple[str, ...]]]) -> Callable[..., dict[str, tuple[str, ...]]]:
    """``select_categories`` with no threshold: every held key's noisy count competes for the cap alone."""
    def selection(counts, columns, sigma, threshold):  # noqa: ANN001, ARG001 (the library's signature)
        return select(counts, columns, sigma, -math.inf)

    return selection


@contextmanager
def planted(defect: str | None) -> Iterator[None]:
    """``half-delta``: every step's noise calibrated to half its declared sensitivity; ``empty-last``: the old
    selection; ``no-threshold``: open categories kept by the cap alone. None: the product as it is."""
    if defect is None:
        yield
    elif defect == "half-delta":
        sensitivity, estimate = mechanism.sensitivity, bounds.estimate_sensitivity
        with _patched(mechanism, "sensitivity", lambda *a, **k: sensitivity(*a, **k) / 2), \
                _patched(bounds, "estimate_sensitivity", lambda *a, **k: estimate(*a, **k) / 2):
            yield
    elif defect == "empty-last":
        with _patched(bounds, "select_values", _rank_empty_last):
            yield
    elif defect == "no-threshold":
        with _patched(bounds, "select_categories", _no_threshold(bounds.select_categories)):
            yield
    else:
        raise ValueError(f"unknown defect {defect!r}: {', '.join(DEFECTS)}")


#: The planted defects ``--plant`` names, each caught by the audit.
DEFECTS = ("half-delta", "empty-last", "no-threshold")


def run(size: str = "full", defect: str | None = None, seed: int = 0,
        relations: tuple[str, ...] = (RELATION_ADD_REMOVE, RELATION_REPLACE_ONE)) -> list[Row]:
    """The audit under ``relations``. ``seed`` shapes the tables only; every noise draw uses OS entropy."""
    rows = []
    with planted(defect):
        sampler = mechanism.gaussian_noise
        for relation in relations:
            rows += audit_relation(relation, size, sampler, np.random.default_rng(seed))
    return rows


def markdown(rows: list[Row], size: str, defect: str | None) -> str:
    lines = [f"Privacy audit (`python -m bench.audit{' --quick' if size == 'quick' else ''}"
             f"{f' --plant {defect}' if defect else ''}`): ε = {EPSILON}, δ = {DELTA:g}, a 400-row table with "
             "every kind of `auto` entry, a workload 3-way table in the measurement, and its worst-case neighbours. "
             "Audited ε is a lower bound at the claimed δ "
             f"(confidence 1 − {ALPHA:g} per Clopper-Pearson bound, 1 − {ALPHA_SD:g} on the sampler's sd); a step "
             "holds when it does not exceed its claim.", "",
             "| relation | step | claimed ε | audited ε | shift / Δ | worst neighbour | holds |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "" if math.isnan(r.ratio) else f"{r.ratio:.3f}"
        lines.append(f"| {r.relation} | {r.step} | {r.claimed:.4f} | {r.audited:.4f} | {ratio} | {r.worst} | "
                     f"{'yes' if r.holds else '**no**'} |")
    return "\n".join(lines) + "\n"


def write(text: str) -> None:
    """The tables into bench/results/audit.md and docs/privacy.md between its audit markers."""
    RESULTS.write_text(text)
    doc = DOCS.read_text()
    found = re.search(f"^{re.escape(START)}$(.*?)^{re.escape(END)}$", doc, re.MULTILINE | re.DOTALL)
    if found is None:
        raise SystemExit(f"{DOCS.relative_to(REPO)} has no {START} ... {END} markers")
    DOCS.write_text(f"{doc[: found.start(1)]}\n{text.strip()}\n{doc[found.end(1):]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CI size (fewer sampler and selection draws)")
    parser.add_argument("--plant", choices=list(DEFECTS), default=None,
                        help="plant a known defect; the audit must then fail")
    parser.add_argument("--write", action="store_true",
                        help="also audit each planted defect (add-remove) and write all the tables to "
                        "bench/results/audit.md and docs/privacy.md")
    args = parser.parse_args(argv)
    size = "quick" if args.quick else "full"
    rows = run(size, args.plant)
    text = markdown(rows, size, args.plant)
    print(text)
    holds = all(r.holds for r in rows)
    if args.write:
        if args.plant:
            raise SystemExit("--write records the product's audit and every planted defect: give no --plant")
        for defect in DEFECTS:
            planted_rows = run(size, defect, relations=(RELATION_ADD_REMOVE,))
            caught = not all(r.holds for r in planted_rows)
            text += "\n" + markdown(planted_rows, size, defect) + (
                "\nThe planted defect is caught.\n" if caught else "\n**The planted defect escaped the audit.**\n")
            holds &= caught
        write(text)
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
