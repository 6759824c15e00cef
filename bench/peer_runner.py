"""One AIM or MST run (smartnoise-synth) in the peers' own virtualenv (bench/.venv-peers).

Runs under a different interpreter from the project (pandas < 3, old mbi/opacus), so it imports nothing from
``splice_assets``: the public domain comes as JSON written by ``bench.run`` from our schema.

Fairness choices (docs/benchmarks.md, "Methods"):
* Numeric columns -> 16 equal-width bins over the PUBLIC schema bounds (the TVD metric's grid); discrete
  columns -> their public category positions; a nullable column gets one extra "missing" code.
* The smartnoise transformer is fitted on the public code lists only (every code of every column), so it needs
  no privacy budget and sees no rows: preprocessing epsilon = 0, no DP bound estimation.
* Sampling: i.i.d. draws from the fitted graphical model (mbi ``synthetic_data(method="sample")``), not
  smartnoise's default ``sample()`` whose grouped rounding sampler in mbi 1.1.0 makes sibling columns move
  together (78-83% duplicate rows on adult). Post-processing, no privacy cost.
* Decoding: bin code -> bin midpoint (integer columns rounded), category code -> category, missing -> empty.
* Neighbouring relation: smartnoise calibrates AIM and MST for add/remove-one neighbours (a count query has
  sensitivity 1), SPLICE for replace-one (one row leaves a cell and enters another: sqrt 2). ``--relation
  replace_one`` gives the peer the epsilon at which it is (epsilon, delta)-DP under replace-one, like SPLICE: in
  zCDP a replaced row doubles the rho of a Gaussian count measurement (sensitivity 1 -> sqrt 2) and quadruples that
  of an exponential-mechanism selection (score sensitivity 1 -> 2). AIM spends 90% of each round's rho on
  measurements and 10% on selection, so replace-one rho = 2.2 x its add/remove rho; MST spends thirds (1-way
  measurements, selection, 2-way measurements): 8/3 x. The peer runs at rho(epsilon, delta) / that factor.

    python bench/peer_runner.py --method aim --train T.csv --domain D.json --epsilon 1 --delta 1e-9 \
        --seed 0 --out synth.csv --stats stats.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

BINS = 16
#: Replace-one rho / add/remove rho of each peer's mechanism (see the module docstring).
REPLACE_ONE_FACTOR = {"aim": 0.9 * 2 + 0.1 * 4, "mst": (2 + 4 + 2) / 3}


def replace_one_epsilon(method: str, epsilon: float, delta: float, to_rho=None) -> tuple[float, float]:
    """The add/remove epsilon to give smartnoise so that the peer is (epsilon, delta)-DP under replace-one, and the
    rho it then spends: the largest eps' (bisection, 40 steps, lower end kept) with to_rho(eps', delta) <=
    to_rho(epsilon, delta) / REPLACE_ONE_FACTOR[method]. ``to_rho`` is smartnoise's own conversion, ``cdp_rho``."""
    if to_rho is None:
        from snsynth.utils import cdp_rho as to_rho

    target = to_rho(epsilon, delta) / REPLACE_ONE_FACTOR[method]
    lo, hi = 0.0, epsilon
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if to_rho(mid, delta) <= target:
            lo = mid
        else:
            hi = mid
    return lo, to_rho(lo, delta)


def encode_codes(df, domain):
    import numpy as np
    import pandas as pd

    out = {}
    for col in domain["columns"]:
        name = col["name"]
        raw = df[name]
        if col["numeric"]:
            lo, hi = col["bounds"]
            v = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
            missing = np.isnan(v)
            b = np.floor((np.nan_to_num(v, nan=lo) - lo) / (hi - lo) * BINS)
            codes = np.clip(b, 0, BINS - 1).astype(np.int64)
        else:
            lookup = {str(c): i for i, c in enumerate(col["categories"])}
            s = raw.astype(object)
            missing = s.isna().to_numpy()
            codes = np.array([lookup.get(str(x), 0) if not m else 0 for x, m in zip(s, missing)], dtype=np.int64)
        codes[missing] = col["levels"] - 1 if col["nullable"] else 0
        out[name] = codes
    return pd.DataFrame(out)


def decode_codes(codes, domain):
    import numpy as np
    import pandas as pd

    out = {}
    for col in domain["columns"]:
        name = col["name"]
        c = np.asarray(codes[name], dtype=np.int64)
        missing = (c == col["levels"] - 1) if col["nullable"] else np.zeros(len(c), dtype=bool)
        if col["numeric"]:
            lo, hi = col["bounds"]
            width = (hi - lo) / BINS
            values = lo + (np.clip(c, 0, BINS - 1) + 0.5) * width
            if col["integer"]:
                values = np.round(values)
            series = pd.Series(values, dtype=float)
            if col["integer"]:
                series = series.astype("Int64")
        else:
            cats = np.asarray(col["categories"], dtype=object)
            series = pd.Series(cats[np.clip(c, 0, len(cats) - 1)], dtype=object)
        series[missing] = None
        out[name] = series
    return pd.DataFrame(out)


def public_transformer(domain):
    """A TableTransformer fitted on the public code lists only (no rows, no budget)."""
    import pandas as pd
    from snsynth.transform.label import LabelTransformer
    from snsynth.transform.table import TableTransformer

    names = [c["name"] for c in domain["columns"]]
    m = max(c["levels"] for c in domain["columns"])
    public = pd.DataFrame({c["name"]: [i % c["levels"] for i in range(m)] for c in domain["columns"]})[names]
    tt = TableTransformer([LabelTransformer(nullable=False) for _ in names])
    tt.fit(public, epsilon=0.0)
    assert tt.fit_complete and tt.cardinality == [c["levels"] for c in domain["columns"]], tt.cardinality
    return tt


def sample_iid(synth, n_rows):
    """i.i.d. rows from the fitted mbi model, mapped back through smartnoise's own decompress/inverse steps."""
    data = synth.synthesizer.synthetic_data(rows=n_rows, method="sample")
    undo = getattr(synth, "undo_compress_fn", None)  # MST compresses rare cells; AIM does not
    if undo is not None:
        data = undo(data)
    colnames = ["col" + str(i) for i in range(synth._transformer.output_width)]
    rows = [tuple(t[1:]) for t in data.df[colnames].itertuples()]
    return synth._transformer.inverse_transform(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", choices=["aim", "mst"], required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--domain", required=True)
    ap.add_argument("--epsilon", type=float, required=True)
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--relation", choices=["add_remove", "replace_one"], default="add_remove",
                    help="the neighbouring relation --epsilon is meant under (smartnoise's own: add_remove)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--stats", required=True)
    args = ap.parse_args()
    seconds = {}
    stats_path = Path(args.stats)

    def dump(extra=None):
        payload = {"seconds": {k: round(v, 4) for k, v in seconds.items()}, "preprocess_eps": 0.0,
                   "bins": BINS, "sampler": "mbi synthetic_data(method='sample') i.i.d."}
        payload.update(extra or {})
        stats_path.write_text(json.dumps(payload, indent=1))

    t = time.perf_counter()
    import numpy as np
    import pandas as pd
    import snsynth
    from snsynth import Synthesizer

    seconds["import"] = time.perf_counter() - t
    np.random.seed(args.seed)
    random.seed(args.seed)
    try:
        import torch

        torch.manual_seed(args.seed)
        torch.set_num_threads(int(os.environ.get("SPLICE_BENCH_THREADS", "1")))
    except ImportError:
        pass

    domain = json.loads(Path(args.domain).read_text())
    t = time.perf_counter()
    train = pd.read_csv(args.train, dtype=str, keep_default_na=False, na_values=[""])
    codes = encode_codes(train, domain)
    seconds["discretise"] = time.perf_counter() - t

    t = time.perf_counter()
    epsilon = args.epsilon
    relation = {"relation": args.relation}
    if args.relation == "replace_one":
        epsilon, rho = replace_one_epsilon(args.method, args.epsilon, args.delta)
        relation.update(epsilon_add_remove=epsilon, rho=rho, replace_one_factor=REPLACE_ONE_FACTOR[args.method])
    seconds["relation"] = time.perf_counter() - t
    dump({"status": "fitting", **relation})

    t = time.perf_counter()
    synth = Synthesizer.create(args.method, epsilon=epsilon, delta=args.delta)
    synth.fit(codes, transformer=public_transformer(domain), preprocessor_eps=0.0)
    seconds["fit"] = time.perf_counter() - t
    eps_left = float(synth.epsilon)

    t = time.perf_counter()
    rows = sample_iid(synth, len(codes))
    synth_codes = pd.DataFrame(rows, columns=list(codes.columns))
    seconds["sample"] = time.perf_counter() - t

    t = time.perf_counter()
    decode_codes(synth_codes, domain).to_csv(args.out, index=False)
    seconds["write"] = time.perf_counter() - t
    dump({
        "status": "ok",
        **relation,
        "epsilon_training": eps_left,
        "versions": {"smartnoise-synth": getattr(snsynth, "__version__", "1.0.8"), "python": sys.version.split()[0]},
    })


if __name__ == "__main__":
    main()
