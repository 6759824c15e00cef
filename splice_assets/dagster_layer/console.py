"""Dagster's console log for the in-process runs of the CLI and the demo: INFO by default, DEBUG with --verbose.

At DEBUG (``--verbose``) it is Dagster's own console logger: about a hundred lifecycle lines per release (every
step start, output, handled output, materialisation), errors with their stack traces. At INFO it is a compact one:
one line per message the assets log themselves (INFO and WARNING), on stderr like Dagster's; errors are left to
the caller, which prints the failure's reason in one line without stack trace or class path (``failure_reason``,
for the CLI and the demo), and the progress display marks the stage that FAILED.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from typing import Any

import dagster as dg


def console_level(verbose: bool) -> str:
    return "DEBUG" if verbose else "INFO"


def with_console_level(run_config: dg.RunConfig | Mapping[str, Any], level: str) -> dict[str, Any]:
    """``run_config`` (a RunConfig or its dict) with the console logger at ``level``; the rest kept as it is."""
    config = run_config.to_config_dict() if isinstance(run_config, dg.RunConfig) else dict(run_config)
    return {**config, "loggers": {**config.get("loggers", {}), "console": {"config": {"log_level": level}}}}


class _CompactHandler(logging.Handler):
    """``dagster <step>: <message>``, the first line only; errors dropped (the caller reports them in one line)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            return
        meta = getattr(record, "dagster_meta", None) or {}
        message = str(meta.get("orig_message") or record.getMessage()).strip().splitlines()
        first = message[0] if message else ""
        step = str(meta.get("step_key") or "").removeprefix("splice__")
        level = "" if record.levelno == logging.INFO else f"{record.levelname} "
        print(f"dagster {level}{step + ': ' if step else ''}{first}", file=sys.stderr, flush=True)


@dg.logger(
    {"log_level": dg.Field(str, is_required=False, default_value="INFO"),
     "name": dg.Field(str, is_required=False, default_value="dagster")},
    description="INFO: one line per message the assets log; DEBUG: Dagster's colored console logger.",
)
def splice_console(init_context: dg.InitLoggerContext) -> logging.Logger:
    level = str(init_context.logger_config["log_level"]).upper()
    if level == "DEBUG":
        return dg.colored_console_logger.logger_fn(init_context)
    logger = logging.Logger(init_context.logger_config["name"], level=level)
    logger.addHandler(_CompactHandler())
    return logger


def with_splice_console(job: dg.JobDefinition) -> dg.JobDefinition:
    """The job with ``splice_console`` as its console logger (configured by ``with_console_level``)."""
    return job.with_logger_defs({"console": splice_console})


def without_class_path(message: str | None, cls_name: str | None) -> str:
    """A Dagster error's first line without the ``package.module.Class: `` prefix that Python's traceback format
    puts in front of the message (``splice_assets.private.validation.StructuralError: column 'x': ...``)."""
    lines = (message or "").strip().splitlines()
    first = lines[0] if lines else ""
    if cls_name:
        first = re.sub(rf"^(?:[A-Za-z_]\w*\.)*{re.escape(cls_name)}: ?", "", first)
    return " ".join(first.split()) or "the step failed without a message (rerun with --verbose)"


def failure_reason(result: Any) -> str:
    """A failed run's reason in one line: a failed check's description, else the failing step's innermost
    error without its class path, else the first failed check."""
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed and evaluation.description:
            return f"check {evaluation.check_name} failed: {evaluation.description}"
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            while error is not None and error.cause is not None:
                error = error.cause
            if error is not None:
                return without_class_path(error.message, error.cls_name)
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            return f"check {evaluation.check_name} failed"
    return "see the Dagster event log (rerun with --verbose)"
