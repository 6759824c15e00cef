"""A light check of a local input file before Dagster loads (`splice release --input FILE`).

The release's first step refuses an input whose structure does not match the schema, but only after Dagster has
loaded (several seconds). This check reads the file first and calls the same checks as ``Synthesizer.check``
(``validation.check_structure`` and the measured rows against n_min) without loading the model (torch), so a wrong
header, a missing column, a share of unparseable cells over the limit or too few rows under replace-one are refused
in about a second, with the release's own message. Nothing is charged and nothing is written. A file over
``WHOLE_FILE_BYTES`` is checked on its header only (the release counts its rows and checks its cells); a glob, a URL
or a folder is left to the release.
"""

from __future__ import annotations

import csv
from pathlib import Path

from splice_assets.private.validation import (
    StructuralError,
    check_columns,
    check_row_count,
    check_structure,
    is_parquet,
    open_csv_text,
    read_table,
)
from splice_assets.release.settings import ReleaseSettings
from splice_assets.schema import TableSchema

#: Files up to this size are read whole and checked exactly as the release checks them (the demo table: 0.2 MB).
WHOLE_FILE_BYTES = 64 * 2**20

__all__ = ["WHOLE_FILE_BYTES", "StructuralError", "check_input_file"]


def check_input_file(path: str | Path, settings: ReleaseSettings, schema: TableSchema) -> None:
    """Raise ``StructuralError`` (the release's message) if the release would refuse this local file's structure."""
    path = Path(path)
    if path.stat().st_size <= WHOLE_FILE_BYTES:
        raw = read_table(path)
        check_structure(raw, schema, settings.schema_version, require_bounds=False,
                        max_unparseable_share=settings.max_unparseable_share, relation=settings.relation)
        n_measured = len(raw) - int(round(settings.holdout_fraction * len(raw)))  # holdout_split.measured_size
        check_row_count(n_measured, schema, settings.relation, "after the holdout (lower it) the measured part has")
        return
    check_columns(_header(path), schema, settings.schema_version, require_bounds=False)


def _header(path: Path) -> list[str]:
    if is_parquet(path):
        import pyarrow.parquet as pq

        return [str(name) for name in pq.read_schema(path).names]
    with open_csv_text(path) as handle:
        header = next(csv.reader(handle), [])
    if not header:
        raise StructuralError(f"input file {str(path)!r} is empty or has no header row")
    return header
