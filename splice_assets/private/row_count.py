"""The row count of an input file, read cheaply (no pandas): a CSV's records, a Parquet file's metadata.

Under replace-one the row count is public, so ``splice plan --input FILE`` may read it; it reads nothing else.
The count equals ``len(validation.read_table(path))``: a CSV is parsed as records (a quoted cell may span lines)
and, as pandas does, blank and white-space-only lines are not rows.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path, PurePath

#: UTF-8 that drops a leading byte-order mark (Excel writes one): read as plain UTF-8 it would glue itself to the
#: first column's name, which then is "missing". Every CSV input is read with it.
CSV_ENCODING = "utf-8-sig"


def is_parquet(path: PurePath) -> bool:
    return bool({".parquet", ".pq"} & {s.lower() for s in path.suffixes})


def is_url_or_glob(source: str) -> bool:
    return "://" in source or any(ch in source for ch in "*?[")


def is_partitioned_source(source: str) -> bool:
    """A directory, a glob or an fsspec URL (anything but one local file): what a release streams."""
    return is_url_or_glob(source) or Path(source).is_dir()


def open_csv_text(path: Path) -> io.TextIOWrapper:
    """A CSV input (optionally gzipped) as text, for ``csv.reader``."""
    raw = gzip.open(path, "rb") if path.suffix.lower() == ".gz" else open(path, "rb")
    return io.TextIOWrapper(raw, encoding=CSV_ENCODING, newline="")


def _is_blank(record: list[str]) -> bool:
    return not record or (len(record) == 1 and not record[0].strip())


def input_row_count(path: str | Path) -> int:
    """Rows of a CSV (optionally .gz) or Parquet input, header excluded; ``ValueError`` quoting the path if the
    file cannot be read."""
    path = Path(path)
    if path.is_dir():  # a partitioned input: the sum over its Parquet and CSV files (as private.partitions reads it)
        parts = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))
                       and (is_parquet(p) or p.name.lower().endswith((".csv", ".csv.gz"))))
        if not parts:
            raise ValueError(f"input folder {str(path)!r} holds no Parquet or CSV file")
        return sum(input_row_count(p) for p in parts)
    if not path.is_file():
        raise ValueError(f"input file {str(path)!r} does not exist")
    try:
        if is_parquet(path):
            import pyarrow.parquet as pq

            return int(pq.read_metadata(path).num_rows)
        with open_csv_text(path) as handle:
            records = (r for r in csv.reader(handle) if not _is_blank(r))
            if next(records, None) is None:
                raise ValueError(f"input file {str(path)!r} is empty or has no header row")
            return sum(1 for _ in records)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"cannot read input file {str(path)!r}: {type(exc).__name__}") from None
