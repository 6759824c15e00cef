"""Progress of a release's long stages, for whoever shows it (the CLI and the demo); silent by default.

The library marks its stages with ``stage(name, total)`` and ticks a loop with a known budget (the fit's steps)
with ``advance()``; a caller that wants to show them installs a display with ``showing(display)``. Only stage
names, step counts and times pass through here, never data, so any stage (private ones included) may report.
``display_for(stream)`` picks a live rich display on a terminal and one plain line per finished stage otherwise
(logs, CI, pipes), both on stderr so that stdout keeps a command's result (``--json``).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, Protocol, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


class Display(Protocol):
    def started(self, name: str, total: int | None, depth: int) -> None: ...
    def advanced(self, steps: int) -> None: ...
    def finished(self, name: str, seconds: float, depth: int, failed: bool = False) -> None: ...


_display: Display | None = None
_depth = 0


@contextmanager
def stage(name: str, total: int | None = None) -> Iterator[None]:
    """One stage (nested stages show indented); ``total`` is its step budget when it has one (ETA)."""
    global _depth
    display = _display
    if display is None:
        yield
        return
    started = time.perf_counter()
    display.started(name, total, _depth)
    _depth += 1
    failed = True
    try:
        yield
        failed = False
    finally:
        _depth -= 1
        display.finished(name, time.perf_counter() - started, _depth, failed)


def staged(name: str) -> Callable[[F], F]:
    """A function run as one stage."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with stage(name):
                return function(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


def advance(steps: int = 1) -> None:
    """``steps`` more steps of the innermost stage with a budget (a no-op when nothing is shown)."""
    if _display is not None:
        _display.advanced(steps)


@contextmanager
def showing(display: Display | None) -> Iterator[None]:
    """Show the stages run inside on ``display`` (None: stay silent). A display that is a context manager (the
    rich one) is entered for the duration."""
    global _display
    previous, _display = _display, display
    enter = getattr(display, "__enter__", None)
    try:
        if enter is not None:
            enter()
        yield
    finally:
        if enter is not None:
            display.__exit__(None, None, None)  # type: ignore[union-attr]  # has __enter__, so __exit__
        _display = previous


class PlainDisplay:
    """One line per finished stage (``  fit model  98.8 s``), indented by depth: readable in logs and CI."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream

    def started(self, name: str, total: int | None, depth: int) -> None:
        pass

    def advanced(self, steps: int) -> None:
        pass

    def finished(self, name: str, seconds: float, depth: int, failed: bool = False) -> None:
        stream = self.stream or sys.stderr
        word = "FAILED" if failed else "done"
        print(f"{'  ' * depth}{word} {name:<52} {seconds:7.1f} s", file=stream, flush=True)


class RichDisplay:
    """A live rich progress table on a terminal: a row per stage with its elapsed time, a bar, steps and ETA for
    the stages with a budget. Output printed meanwhile (Dagster's log) scrolls above it."""

    def __init__(self, stream: IO[str] | None = None, force_terminal: bool | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=stream or sys.stderr, force_terminal=force_terminal)
        self.progress = Progress(
            SpinnerColumn(finished_text="[green]✓"), TextColumn("{task.description}"), BarColumn(bar_width=24),
            TextColumn("{task.fields[steps]}"), TimeElapsedColumn(), _remaining_column(), console=self.console,
        )
        self.stack: list[Any] = []

    def __enter__(self) -> RichDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def started(self, name: str, total: int | None, depth: int) -> None:
        steps = f"0/{total} steps" if total else ""
        self.stack.append(self.progress.add_task("  " * depth + name, total=total, steps=steps))

    def advanced(self, steps: int) -> None:
        for task_id in reversed(self.stack):
            task = self.progress.tasks[task_id]
            if task.total is not None:
                done = int(task.completed) + steps
                self.progress.update(task_id, completed=done, steps=f"{done}/{int(task.total)} steps")
                return

    def finished(self, name: str, seconds: float, depth: int, failed: bool = False) -> None:
        task_id = self.stack.pop()
        task = self.progress.tasks[task_id]
        if failed:
            self.progress.update(task_id, description=f"[red]{task.description} (failed)")
            self.progress.stop_task(task_id)
            return
        # A fit that converges before its budget ends here: the bar completes, the count says where it stopped.
        self.progress.update(task_id, total=task.total or 1, completed=task.total or 1)
        self.progress.stop_task(task_id)


def _remaining_column() -> Any:
    from rich.progress import TimeRemainingColumn
    from rich.text import Text

    class Remaining(TimeRemainingColumn):
        """ETA only while a stage with a budget runs."""

        def render(self, task: Any) -> Text:
            if task.total is None or task.finished or not task.started or task.fields.get("steps", "") == "":
                return Text("")
            return Text("ETA ") + super().render(task)

    return Remaining()


def display_for(stream: IO[str] | None = None) -> Display:
    """A rich display when ``stream`` (default stderr) is a terminal, plain lines otherwise."""
    stream = stream or sys.stderr
    return RichDisplay(stream) if stream.isatty() else PlainDisplay(stream)
