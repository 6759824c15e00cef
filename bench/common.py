"""Shared helpers of the benchmark: paths, the 80/20 split, /usr/bin/time -v subprocesses, machine info.

Everything here runs in the project venv except ``run_timed`` children, which may be any interpreter.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
# Raw rows (train/test splits, synthetic tables) live here: git-ignored, never committed.
RAW_DIR = RESULTS_DIR / "raw"
#: The environment variable naming the folder of the bench's tables: one ``<name>/data.csv.gz`` per table, used where
#: ``schemas/<name>.yaml`` exists (docs/benchmarks.md, "Data"). There is no default: the tables are not in the repo.
DATASETS_ENV = "SPLICE_BENCH_DATASETS"
DATASETS_HELP = (f"set {DATASETS_ENV} to a folder holding one <name>/data.csv.gz per table, named like the schemas "
                 "in schemas/ (adult, california_housing, churn, ...); see docs/benchmarks.md, \"Data\"")
DATASETS_DIR: Path | None = Path(os.environ[DATASETS_ENV]) if os.environ.get(DATASETS_ENV) else None
TIME_BIN = "/usr/bin/time"
DELTA = 1e-9
TEST_FRACTION = 0.2
SPLIT_SEED = 0


def datasets_dir(folder: Path | None = None) -> Path:
    """The bench's data folder (``folder``, else ``$SPLICE_BENCH_DATASETS``); exits with how to set it when it is not
    set or is not a folder."""
    folder = DATASETS_DIR if folder is None else folder
    if folder is None:
        raise SystemExit(f"[bench] {DATASETS_ENV} is not set: {DATASETS_HELP}")
    if not folder.is_dir():
        raise SystemExit(f"[bench] {DATASETS_ENV}={folder} is not a folder: {DATASETS_HELP}")
    return folder


#: Tables that ship inside a package the main venv installs: written on first use to the git-ignored
#: ``BUNDLED_DIR`` and read from there when the data folder has no copy (nothing is downloaded).
BUNDLED = ("digits",)
BUNDLED_DIR = BENCH_DIR / ".cache" / "datasets"


def bundled_table(name: str) -> pd.DataFrame:
    """A bundled table as the bench reads it: ``digits`` is scikit-learn's ``load_digits`` (1,797 rows, 64 integer
    pixel counts 0..16 named ``pixel_<row>_<col>``, target ``digit`` 0..9; schemas/digits.yaml)."""
    if name != "digits":
        raise KeyError(f"no bundled table {name!r}; bundled: {BUNDLED}")
    from sklearn.datasets import load_digits

    frame = load_digits(as_frame=True).frame.rename(columns={"target": "digit"})
    return frame.astype("int64")


def bundled_file(name: str, cache: Path | None = None) -> Path:
    """``<cache>/<name>/data.csv.gz`` (default ``BUNDLED_DIR``), written from ``bundled_table`` if absent."""
    path = (BUNDLED_DIR if cache is None else cache) / name / "data.csv.gz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.gz")
        bundled_table(name).to_csv(tmp, index=False)
        tmp.replace(path)
    return path


def dataset_file(name: str, folder: Path | None = None) -> Path:
    """``<data folder>/<name>/data.csv.gz`` (``datasets_dir``); a ``BUNDLED`` table without a copy there (or with no
    data folder set) comes from its package instead (``bundled_file``)."""
    if name in BUNDLED:
        folder = DATASETS_DIR if folder is None else folder
        if folder is None or not (folder / name / "data.csv.gz").is_file():
            return bundled_file(name)
    return datasets_dir(folder) / name / "data.csv.gz"


def code_version() -> str:
    """Short HEAD of the repo, with '+dirty:<hash of the diff>' when splice_assets/ differs from it (the code a run
    measured)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO_DIR), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        diff = subprocess.run(["git", "-C", str(REPO_DIR), "diff", "HEAD", "--", "splice_assets"], capture_output=True,
                              check=True).stdout
        return head + (f"+dirty:{hashlib.sha1(diff).hexdigest()[:8]}" if diff else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def thread_env(threads: int) -> dict[str, str]:
    """Environment for a method subprocess: the same thread caps for every method (fairness)."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = str(threads)
    env["SPLICE_BENCH_THREADS"] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(REPO_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@contextmanager
def seeded_noise(seed: int) -> Iterator[None]:
    """The Gaussian sampler and the frequent-value selection's entropy replaced by generators seeded with ``seed``
    (experiments only; ``SPLICE_BENCH_ESTIMATE_SEED`` for the bench's DP estimate, ``estimate_seed``)."""
    from splice_assets.private import bounds, mechanism

    rng = np.random.default_rng(seed)
    product, select = mechanism.gaussian_noise, bounds.select_values

    def seeded(values: np.ndarray, sigma: float) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        return values + sigma * rng.standard_normal(values.shape)

    def seeded_selection(counts, columns, sigma, entropy):  # noqa: ANN001, ARG001 (the product's signature)
        return select(counts, columns, sigma, np.random.default_rng([seed, 1]))

    mechanism.gaussian_noise, bounds.select_values = seeded, seeded_selection
    try:
        yield
    finally:
        mechanism.gaussian_noise, bounds.select_values = product, select


def estimate_seed() -> int | None:
    """``SPLICE_BENCH_ESTIMATE_SEED``: when set, the bench's DP estimate of a schema's ``auto`` entries (bounds,
    values, decimals, steps, knots) draws its noise from this seed (``seeded_noise``), so that runs in different
    processes start from the same public schema (bench data only; a release always draws from OS entropy)."""
    value = os.environ.get("SPLICE_BENCH_ESTIMATE_SEED", "")
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"SPLICE_BENCH_ESTIMATE_SEED must be an integer, got {value!r}") from None


def split_train_test(table: pd.DataFrame, seed: int = SPLIT_SEED) -> tuple[pd.DataFrame, pd.DataFrame]:
    """80/20 split by a seeded permutation: test = floor(0.2 n) rows, train = the rest (row order kept)."""
    n = len(table)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(np.floor(TEST_FRACTION * n))
    test_idx, train_idx = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    return table.iloc[train_idx].reset_index(drop=True), table.iloc[test_idx].reset_index(drop=True)


def machine_info() -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, AttributeError):
        pass
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "memory": mem,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def ensure_time_binary() -> None:
    """GNU time is needed for whole-process wall time and peak RSS; install Debian's package if missing."""
    if Path(TIME_BIN).exists():
        return
    print("[bench] /usr/bin/time missing: installing Debian package 'time'", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=False)
    subprocess.run(["apt-get", "install", "-y", "-qq", "time"], check=True)


def _parse_time_v(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    if m:
        parts = [float(p) for p in m.group(1).split(":")]
        secs = 0.0
        for p in parts:
            secs = secs * 60 + p
        out["wall_s"] = secs
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        out["peak_rss_mb"] = int(m.group(1)) / 1024
    for key, pat in (("user_s", r"User time \(seconds\): ([\d.]+)"), ("sys_s", r"System time \(seconds\): ([\d.]+)")):
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1))
    m = re.search(r"Exit status: (\d+)", text)
    if m:
        out["exit_status"] = int(m.group(1))
    return out


def _session_hwm_kb(sid: int) -> int:
    """Largest VmHWM (peak RSS, kB) among live processes of session ``sid`` (read just before a timeout kill)."""
    best = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getsid(int(proc.name)) != sid:
                continue
            m = re.search(r"VmHWM:\s+(\d+)", (proc / "status").read_text())
            if m:
                best = max(best, int(m.group(1)))
        except (OSError, ProcessLookupError):
            continue
    return best


def run_timed(cmd: list[str], log_path: Path, timeout: float | None, env: dict[str, str]) -> dict[str, object]:
    """Run ``cmd`` under ``/usr/bin/time -v`` in its own session; returns status, wall_s, peak_rss_mb, ...

    A timeout kills the whole session (only the processes this call started) and is reported as
    ``status="timeout"`` with the wall time so far and the peak RSS seen up to the kill.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    time_out = log_path.with_suffix(".time")
    full = [TIME_BIN, "-v", "-o", str(time_out), *cmd]
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        peak_kb = 0
        status = "ok"
        while True:
            try:
                proc.wait(timeout=2.0)
                break
            except subprocess.TimeoutExpired:
                peak_kb = max(peak_kb, _session_hwm_kb(proc.pid))
                if timeout is not None and time.perf_counter() - start > timeout:
                    status = "timeout"
                    peak_kb = max(peak_kb, _session_hwm_kb(proc.pid))
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
    elapsed = time.perf_counter() - start
    info: dict[str, object] = {"status": status, "wall_s": elapsed, "peak_rss_mb": peak_kb / 1024 if peak_kb else None}
    if status == "ok":
        parsed = _parse_time_v(time_out.read_text() if time_out.exists() else "")
        info.update(parsed)
        if proc.returncode != 0 or parsed.get("exit_status", 0) != 0:
            info["status"] = "error"
    return info


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def log_tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(t.strip() for t in text[-lines:])[-400:]
