"""Where per-partition work runs: in this process (``LocalEngine``) or on a Dask ``distributed`` cluster
(``DaskEngine``). An engine maps one function over partitions and hands the results back to the driver in order.

The engine is only a transport. What runs on it decides what it returns: the measurement's passes return exact
integer sums and counts (private, reduced and noised on the driver, ``private.partitions``), the sampler returns the
paths of the Parquet files it wrote (``sampling.write_partitions``). Dask is imported only when a ``DaskEngine`` is
made. ``engine_from_env`` reads ``SPLICE_ENGINE`` (``local`` or ``dask``), ``SPLICE_DASK_SCHEDULER`` (a scheduler
address; without it a ``LocalCluster`` of ``SPLICE_DASK_WORKERS`` single-threaded workers is started).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

ENGINES = ("local", "dask")


class Engine(Protocol):
    name: str

    def map(self, fn: Callable[..., T], items: Sequence[Any], **kwargs: Any) -> list[T]:
        """``[fn(item, **kwargs) for item in items]``, in the order of ``items``."""
        ...

    def close(self) -> None: ...


class LocalEngine:
    """Every partition in this process, one after another: memory is that of one partition's batch."""

    name = "local"

    def map(self, fn: Callable[..., T], items: Sequence[Any], **kwargs: Any) -> list[T]:
        return [fn(item, **kwargs) for item in items]

    def close(self) -> None:
        pass


class DaskEngine:
    """Partitions as tasks on a ``distributed`` cluster; results are gathered to the driver in order.

    ``scheduler`` is an address (``tcp://host:8786``); None starts a ``LocalCluster`` of ``workers`` processes with
    one thread each. Workers of that cluster never spill to disk (what they hold is private: exact sums and rows
    of the input); a remote cluster's workers must be configured the same way (docs/operations.md).
    """

    name = "dask"

    def __init__(self, scheduler: str | None = None, workers: int = 2) -> None:
        import dask
        from distributed import Client, LocalCluster

        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"Dask workers must be an integer >= 1, got {workers!r}")
        self._cluster = None
        if scheduler:
            self.client = Client(scheduler)
        else:
            # Dask sets MALLOC_TRIM_THRESHOLD_ for its workers, which turns off glibc's adaptive mmap threshold:
            # every batch's large arrays are then mapped and faulted in afresh, 1.7x the CPU of the same partition
            # in-process (bench/scale_out.py). Unset, a worker runs within about 20% of this process.
            # The nanny writes these variables into this process's own environment too, so NUMBA_NUM_THREADS is not
            # one of them: numba refuses a thread count that changes after its threads started (each worker's
            # Gibbs sweep may then use a thread per core).
            with dask.config.set({"distributed.worker.memory.spill": False,
                                  "distributed.worker.memory.target": False,
                                  "distributed.worker.daemon": False,
                                  "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
                self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                             dashboard_address=None)
            self.client = Client(self._cluster)

    @property
    def workers(self) -> int:
        return len(self.client.scheduler_info()["workers"])

    def map(self, fn: Callable[..., T], items: Sequence[Any], **kwargs: Any) -> list[T]:
        if not items:
            return []
        # pure=False: identical arguments (e.g. two empty partitions) are still separate tasks.
        futures = self.client.map(fn, list(items), pure=False, **kwargs)
        return list(self.client.gather(futures))

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_engine(name: str, scheduler: str | None = None, workers: int = 2) -> Engine:
    """An engine by name (``ENGINES``), validated here with a message that quotes the bad value."""
    if name == "local":
        return LocalEngine()
    if name == "dask":
        return DaskEngine(scheduler or None, workers)
    raise ValueError(f"engine must be one of {list(ENGINES)}, got {name!r}")


def engine_from_env(environ: dict[str, str] | None = None) -> Engine:
    """The engine the environment asks for (``SPLICE_ENGINE``, default local; see the module docstring)."""
    env = os.environ if environ is None else environ
    workers = env.get("SPLICE_DASK_WORKERS", "2")
    if not workers.isdigit():
        raise ValueError(f"SPLICE_DASK_WORKERS must be a positive integer, got {workers!r}")
    return make_engine(env.get("SPLICE_ENGINE", "local"), env.get("SPLICE_DASK_SCHEDULER"), int(workers))
