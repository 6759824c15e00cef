"""A release's fitted mixture as an MLflow pyfunc model (no Dagster import).

``predict`` takes a row count (and optionally a seed) and returns synthetic rows in the original schema:

    model = mlflow.pyfunc.load_model("models:/splice-fair_affairs@latest")
    model.predict(pd.DataFrame({"n_rows": [500]}))            # 500 rows, the release's public seed
    model.predict(pd.DataFrame({"n_rows": [500], "seed": [7]}))   # one input row = one request (concatenated)
    model.predict({"n_rows": 500, "seed": 7})
    model.predict({"n_rows": 500}, params={"seed": 7})
    model.predict({"n_rows": 500}, params={"where": "status == 'paid'"})   # conditional sampling
    model.predict(pd.DataFrame({"n_rows": [500, 500], "where": ["status == 'paid'", "amount between 10 and 100"]}))

``where`` (a param, or an input column that overrides it per request) samples from the model's conditional law
given a condition in ``splice sample --where``'s text form (``conditions.parse_where``); "" is no condition.

An input with a ``query`` column answers questions instead of sampling, one row of answer per query, with a 95%
interval and its kind (``splice query``'s form; ``queries.QueryAnswerer``; the first query with a bootstrap
interval refits the re-noised measurement 20 times in the serving process, once):

    model.predict(pd.DataFrame({"query": ["count where status == 'paid'", "mean(amount) where region == 'n'"]}))

The logged signature (inputs ``n_rows`` long, optional ``seed`` long and ``where`` string; params ``seed`` and
``where``) lets MLflow validate
requests and serve the model; a bare int is accepted by ``unwrap_python_model().predict(None, 500)`` and by
``unwrap_python_model().sample(500, seed)``, not through the schema-enforcing pyfunc wrapper.

Artifacts are the public bundle's ``model.npz`` + ``model.json`` (``sampling.save_model``), ``schema.yaml``, the
noisy measurement (``measurement.npz`` + ``.json``) and the release's public parameters (``parameters.json``, for the
queries' refits): mechanism outputs and public metadata only. The model is logged from code (``pyfunc_entry.py``),
not pickled.
Registered per dataset as ``splice-<dataset>`` through the client API (the fluent ``registered_model_name=`` prints
"Registered model ... already exists" on every release); MLflow reserves the alias ``latest`` and resolves
``models:/<name>@latest`` to the highest version, i.e. the newest release.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.pyfunc import PythonModel
from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

BUNDLE = "bundle"
MODEL_STEM = "model"
SCHEMA_FILE = "schema.yaml"
MEASUREMENT_STEM = "measurement"
PARAMETERS_FILE = "parameters.json"
MAX_ROWS = 10_000_000


def registered_model_name(dataset: str) -> str:
    return f"splice-{dataset}"


def latest_model_uri(dataset: str) -> str:
    return f"models:/{registered_model_name(dataset)}@latest"


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value.strip())
    raise ValueError(f"{what} must be an integer, got {value!r}")


def _as_where(value: Any) -> str | None:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if not isinstance(value, str):
        raise ValueError(f"where must be a condition text such as \"status == 'paid'\", got {value!r}")
    return value if value.strip() else None


def parse_requests(model_input: Any, default_seed: int, params: dict[str, Any] | None = None
                   ) -> list[tuple[int, int, str | None]]:
    """(n_rows, seed, where) requests from an int, a dict, a list of ints, or a DataFrame with n_rows[, seed][, where];
    ``params``' seed and where are the defaults of every request."""
    seed_param = None if not params or params.get("seed") is None else _as_int(params["seed"], "seed")
    fallback = default_seed if seed_param is None else seed_param
    where_param = _as_where((params or {}).get("where"))
    if isinstance(model_input, pd.Series):
        model_input = model_input.to_frame("n_rows") if model_input.name != "n_rows" else model_input.to_frame()
    if isinstance(model_input, dict):
        model_input = pd.DataFrame({k: np.atleast_1d(v) for k, v in model_input.items()})
    if isinstance(model_input, np.ndarray):
        model_input = model_input.reshape(-1).tolist()
    if isinstance(model_input, (list, tuple)):
        requests = [(_as_int(v, "n_rows"), fallback, where_param) for v in model_input]
    elif isinstance(model_input, pd.DataFrame):
        if "n_rows" not in model_input.columns:
            if model_input.shape[1] != 1:
                raise ValueError("model input must have a column 'n_rows' (and optionally 'seed' and 'where')")
            model_input = model_input.set_axis(["n_rows"], axis=1)
        seeds = model_input["seed"] if "seed" in model_input.columns else [None] * len(model_input)
        wheres = model_input["where"] if "where" in model_input.columns else [None] * len(model_input)
        requests = [
            (_as_int(n, "n_rows"), fallback if s is None or pd.isna(s) else _as_int(s, "seed"),
             _as_where(w) or where_param)
            for n, s, w in zip(model_input["n_rows"], seeds, wheres)
        ]
    else:
        requests = [(_as_int(model_input, "n_rows"), fallback, where_param)]
    if not requests:
        raise ValueError("model input holds no request")
    for n, _, _ in requests:
        if not 0 <= n <= MAX_ROWS:
            raise ValueError(f"n_rows must be in [0, {MAX_ROWS}], got {n}")
    return requests


def query_requests(model_input: Any) -> list[str] | None:
    """The query texts of an input with a ``query`` column (a DataFrame or a dict), else None (a sampling request)."""
    if isinstance(model_input, dict) and "query" in model_input:
        model_input = pd.DataFrame({k: np.atleast_1d(v) for k, v in model_input.items()})
    if not isinstance(model_input, pd.DataFrame) or "query" not in model_input.columns:
        return None
    texts = [q for q in model_input["query"] if isinstance(q, str) and q.strip()]
    if len(texts) != len(model_input):
        raise ValueError("every row of a query request needs its query text, such as \"count where status == 'paid'\"")
    return texts


# MLflow warns (once per process, at class creation) that predict has no type hints; it has none on purpose:
# the logged signature describes the input. record=True keeps that notice off the CLI's stderr.
with warnings.catch_warnings(record=True):

    class SpliceSynthesizer(PythonModel):
        """Samples synthetic rows from a release's fitted mixture (post-processing: no privacy cost)."""

        def __init__(self, default_seed: int = 0) -> None:
            self.default_seed = int(default_seed)

        def load_context(self, context: Any) -> None:
            from splice_assets.sampling import load_model
            from splice_assets.schema import load_schema

            # Logged from code, the instance is built without arguments: the release's seed is in model_config.
            self.default_seed = int((context.model_config or {}).get("default_seed", self.default_seed))
            self._bundle = Path(context.artifacts[BUNDLE])
            self._model = load_model(self._bundle / MODEL_STEM)
            self._schema = load_schema(self._bundle / SCHEMA_FILE)
            self._answerer: Any = None  # built by the first query

        def sample(self, n_rows: int, seed: int | None = None, where: str | dict[str, Any] | None = None
                   ) -> pd.DataFrame:
            """``n_rows`` rows; ``where``: from the model's conditional law given it (``conditions.parse_where``)."""
            from splice_assets.sampling import sample_table

            return sample_table(
                self._model, self._schema, int(n_rows), self.default_seed if seed is None else int(seed), where=where
            )

        def answer(self, query: str) -> dict[str, Any]:
            """The release's answer to ``query`` with its 95% interval (``queries``), as one output row."""
            if self._answerer is None:
                from splice_assets.api import Synthesizer
                from splice_assets.measurement import Measurement
                from splice_assets.queries import QueryAnswerer
                from splice_assets.release.settings import ReleaseSettings

                settings = ReleaseSettings.from_parameters(json.loads((self._bundle / PARAMETERS_FILE).read_text()))
                synth = Synthesizer.from_settings(self._schema, settings.synthesizer_settings())
                synth.measurement, synth.model = Measurement.load(self._bundle / MEASUREMENT_STEM), self._model
                self._answerer = QueryAnswerer(synth.measurement, self._schema)  # exact answers need no basis
                self._synth = synth
            if self._answerer.basis is None and self._answerer.exact(query) is None:
                from splice_assets.queries import QueryAnswerer

                self._answerer = QueryAnswerer(self._answerer.measurement, self._schema, self._synth.query_basis())
            return self._answerer.answer(query).as_dict()

        def predict(self, context, model_input, params=None):  # no type hints: MLflow would treat them as a schema
            queries = query_requests(model_input)
            if queries is not None:
                return pd.DataFrame([self.answer(q) for q in queries])
            requests = parse_requests(model_input, self.default_seed, params)
            tables = [self.sample(n, seed, where) for n, seed, where in requests]
            return tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)


def log_release_model(
    public_dir: Path,
    dataset: str,
    release_id: str,
    default_seed: int = 0,
    register: bool = True,
    privacy: dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Log the release's model in the ACTIVE MLflow run and register it as ``splice-<dataset>``.

    ``parameters``: the release's public parameters (the manifest's), from which a query's refits are set up.

    ``privacy``: the release's public facts (``bundle.public_facts``); its headline epsilon (``epsilon_cost``), delta
    and relation tag the model version beside its release id, so the registry's version page shows them.
    Returns the model URI, registered name and version (``None`` when not registered).
    """
    from splice_assets.release.locations import package_version

    with tempfile.TemporaryDirectory(prefix="splice-model-") as tmp:
        bundle = Path(tmp) / BUNDLE
        bundle.mkdir()
        for file_name in (f"{MODEL_STEM}.npz", f"{MODEL_STEM}.json", SCHEMA_FILE, f"{MEASUREMENT_STEM}.npz",
                          f"{MEASUREMENT_STEM}.json"):
            shutil.copy2(public_dir / file_name, bundle / file_name)
        (bundle / PARAMETERS_FILE).write_text(json.dumps({"dataset": dataset, **(parameters or {})}, default=str))
        name = registered_model_name(dataset) if register else None
        signature = ModelSignature(
            inputs=Schema([ColSpec("long", "n_rows", required=False), ColSpec("long", "seed", required=False),
                           ColSpec("string", "where", required=False), ColSpec("string", "query", required=False)]),
            params=ParamSchema([ParamSpec("seed", "long", int(default_seed)), ParamSpec("where", "string", "")]),
        )
        with warnings.catch_warnings():
            # The signature describes the input; an input example would make MLflow load and run the model here.
            warnings.filterwarnings("ignore", message=".*input example was not provided")
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=str(Path(__file__).with_name("pyfunc_entry.py")),  # models from code: nothing pickled
                model_config={"default_seed": int(default_seed)},
                artifacts={BUNDLE: str(bundle)},
                signature=signature,
                # Explicit requirements: no dependency inference (it would load the model in a subprocess).
                pip_requirements=[f"splice-assets=={package_version()}", "numpy", "pandas", "pyyaml", "torch"],
                metadata={"release_id": release_id, "dataset": dataset, "visibility": "public"},
                tags={"release_id": release_id, "dataset": dataset},
            )
    version = None if name is None else register_version(name, info, release_id, version_tags(privacy))
    return {
        "model_uri": info.model_uri,
        "registered_model_name": name,
        "registered_model_version": version,
    }


def version_tags(privacy: dict[str, Any] | None) -> dict[str, str]:
    """The model version's privacy tags: the release's headline epsilon (its whole guarantee, composed with the DP
    estimate of its ``auto`` entries; a refit's is its parent's), delta and relation, and ``epsilon_cost``, what
    the release charged the ledger (the headline, or 0 for a zero-cost refit)."""
    if not privacy:
        return {}
    tags = {key: privacy.get(key) for key in ("epsilon", "delta", "relation", "epsilon_cost")}
    return {key: str(value) for key, value in tags.items() if value is not None}


def register_version(name: str, info: Any, release_id: str, tags: dict[str, str] | None = None) -> int:
    """A new version of registered model ``name`` for the logged model, tagged with its release id (and ``tags``).
    The client API says nothing on stderr (the fluent registration prints a line per call)."""
    client = mlflow.MlflowClient()
    try:
        client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.create_registered_model(name, description="Synthetic data releases of one dataset (splice).")
    created = client.create_model_version(
        name, source=info.model_uri, run_id=info.run_id, tags={**(tags or {}), "release_id": release_id},
        model_id=info.model_id,
    )
    return int(created.version)
