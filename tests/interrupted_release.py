"""``splice ARGS`` in a process of its own with one function replaced by a Ctrl-C or a failure: the interrupted
releases of test_interrupt_resume. A KeyboardInterrupt raised inside an in-process Dagster run could leave the
pytest worker's own output capture closed (every later test on that worker then errored at setup), so these runs
do not happen inside the test process.

    python tests/interrupted_release.py MODULE:ATTRIBUTE BEHAVIOUR [MODES_JSON] -- SPLICE ARGS...

BEHAVIOUR is ``interrupt`` (KeyboardInterrupt) or ``fail`` (RuntimeError "injected fitting failure"). With
MODES_JSON, the replacement first writes the permission bits of the running release's private step folder and
files there (``{name: mode}``), as they are while the release runs.
"""

from __future__ import annotations

import importlib
import json
import os
import stat
import sys
from pathlib import Path


def _private_step_modes() -> dict[str, int]:
    steps = next(Path(os.environ["SPLICE_ARTIFACT_DIR"]).glob("*/*/internal/steps"))
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in [steps.parent, steps, *steps.iterdir()]}


def main() -> None:
    split = sys.argv.index("--")
    target, behaviour, *modes_json = sys.argv[1:split]
    module_name, path = target.split(":")
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)

    def replacement(*args: object, **kwargs: object) -> None:
        if modes_json:
            Path(modes_json[0]).write_text(json.dumps(_private_step_modes()))
        if behaviour == "interrupt":
            raise KeyboardInterrupt  # as Ctrl-C
        raise RuntimeError("injected fitting failure")

    setattr(owner, name, replacement)
    from splice_assets.cli import main as splice

    splice(sys.argv[split + 1:], prog_name="splice")


if __name__ == "__main__":
    main()
