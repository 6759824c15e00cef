"""The install step's warm-up compiles the numba kernels into numba's cache, so the first release does not."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_warmup_fills_numba_s_cache(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "splice_assets.warmup"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    cached = {path.name.split(".")[1].rsplit("-", 1)[0] for path in tmp_path.rglob("*.nbi")}  # module.kernel-line...
    # the measurement's counts, the fit's tilt and the sampler's draws
    assert {"cells_into", "_row_sums", "draw_levels"} <= cached, sorted(cached)
