"""The progress display and Dagster's console log at default verbosity (what the CLI and `make demo` show)."""

from __future__ import annotations

import io
import logging

import dagster as dg
import pytest

from splice_assets import progress
from splice_assets.dagster_layer.console import console_level, with_console_level, with_splice_console


def test_stages_are_silent_unless_shown_and_plain_lines_off_a_terminal():
    with progress.stage("nobody listens"):
        progress.advance()  # no display: a no-op
    out = io.StringIO()
    with progress.showing(progress.display_for(out)):  # a StringIO is no terminal: plain lines
        with progress.stage("fit"):
            with progress.stage("steps", total=10):
                progress.advance(3)
        with pytest.raises(ValueError), progress.stage("broken"):
            raise ValueError("x")
    lines = out.getvalue().splitlines()
    assert [line.split()[:2] for line in lines] == [["done", "steps"], ["done", "fit"], ["FAILED", "broken"]]
    assert lines[0].startswith("  done") and lines[0].endswith(" s")


def test_rich_display_shows_steps_and_eta_on_a_terminal():
    out = io.StringIO()
    display = progress.RichDisplay(out, force_terminal=True)  # as on a real terminal
    with progress.showing(display):
        with progress.stage("mixture: gradient steps", total=600):
            progress.advance(150)
            task = display.progress.tasks[0]
            assert task.completed == 150 and task.fields["steps"] == "150/600 steps"
            display.progress.refresh()
            assert "150/600 steps" in out.getvalue() and "ETA" in out.getvalue()
    assert display.progress.tasks[0].finished  # converged early or not, the finished stage is complete


@dg.op
def _chatty(context) -> None:
    context.log.info("INFO_LINE from the op")
    context.log.debug("DEBUG_LINE from the op")
    context.log.error("ERROR_LINE\nwith a second line")


@dg.job
def _chatty_job() -> None:
    _chatty()


def _run(level: str, capfd: pytest.CaptureFixture[str]) -> str:
    job = with_splice_console(_chatty_job)
    with dg.DagsterInstance.ephemeral() as instance:
        assert job.execute_in_process(run_config=with_console_level({}, level), instance=instance).success
    captured = capfd.readouterr()
    return captured.out + captured.err


def test_console_log_is_info_by_default_and_debug_when_verbose(capfd):
    quiet = _run(console_level(verbose=False), capfd)
    assert "INFO_LINE from the op" in quiet and "DEBUG" not in quiet and "STEP_START" not in quiet
    assert "ERROR_LINE" not in quiet  # the CLI prints a failure's reason itself, in one line
    assert [line for line in quiet.splitlines() if line.strip()] == ["dagster _chatty: INFO_LINE from the op"]
    loud = _run(console_level(verbose=True), capfd)
    assert "DEBUG_LINE" in loud and "STEP_START" in loud and loud.count("\n") > 10


def test_with_console_level_keeps_the_rest_of_the_run_config():
    config = with_console_level(dg.RunConfig(ops={"x": {"config": {"a": 1}}}), "INFO")
    assert config["ops"] == {"x": {"config": {"a": 1}}}
    assert config["loggers"]["console"]["config"]["log_level"] == "INFO"
    assert logging.getLevelName(console_level(False)) == logging.INFO
