"""The code file of the logged pyfunc model (MLflow "models from code"): MLflow stores this file beside the model
and runs it when the model is loaded, so nothing is pickled (no CloudPickle of a Python object, no warning about
it). The release's default seed reaches the model through ``model_config``."""

import mlflow.models

from splice_assets.release.mlflow_model import SpliceSynthesizer

mlflow.models.set_model(SpliceSynthesizer())
