"""Per-stage wall time, CPU time (user + system, all threads) and peak RSS inside one process (a 20 ms /proc
sampler thread)."""

from __future__ import annotations

import re
import resource
import threading
import time
from contextlib import contextmanager
from pathlib import Path


def _rss_kb() -> int:
    try:
        m = re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text())
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


class StageTimer:
    def __init__(self, interval: float = 0.02) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.peak_mb: dict[str, float] = {}
        self._current = 0
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._current = max(self._current, _rss_kb())
            time.sleep(self._interval)

    @contextmanager
    def stage(self, name: str):
        self._current = _rss_kb()
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 4)
            self.cpu_seconds[name] = round(time.process_time() - cpu_start, 4)
            self._current = max(self._current, _rss_kb())
            self.peak_mb[name] = round(self._current / 1024, 1)

    def close(self) -> dict[str, object]:
        self._stop.set()
        self._thread.join(timeout=1)
        return {
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "stage_peak_rss_mb": self.peak_mb,
            "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
