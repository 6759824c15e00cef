"""The row count of an input file, read cheaply (no pandas): a CSV's records, a Parquet file's metadata.

Under replace-one the row count is public, so ``splice plan --input FILE`` may read it; it reads nothing else.
The count equals ``len(validation.read_table(path))``: a CSV is parsed as records (a quoted cell may span lines)
and, as pandas does, blank and white-space-only lines are not rows.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

#: As ``validation.CSV_ENCODING``: UTF-8 that drops a leading byte-order mark.
CSV_ENCODING = "utf-8-sig"


def _is_blank(record: list[str]) -> bool:
    return not record or (len(record) == 1 and not record[0].strip())


def input_row_count(path: str | Path) -> int:
    """Rows of a CSV (optionally .gz) or Parquet input, header excluded; ``ValueError`` quoting the path if the
    file cannot be read."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"input file {str(path)!r} does not exist")
    suffixes = [s.lower() for s in path.suffixes]
    try:
        if ".parquet" in suffixes or ".pq" in suffixes:
            import pyarrow.parquet as pq

            return int(pq.read_metadata(path).num_rows)
        raw = gzip.open(path, "rb") if suffixes[-1:] == [".gz"] else open(path, "rb")
        with io.TextIOWrapper(raw, encoding=CSV_ENCODING, newline="") as handle:
            records = (r for r in csv.reader(handle) if not _is_blank(r))
            if next(records, None) is None:
                raise ValueError(f"input file {str(path)!r} is empty or has no header row")
            return sum(1 for _ in records)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"cannot read input file {str(path)!r}: {type(exc).__name__}") from None
