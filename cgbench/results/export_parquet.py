"""Parquet files of an export (``--export-format parquet``; pyarrow, the ``parquet`` extra): a table's
CSV columns, in the same order, each typed by what it holds (booleans, 64-bit integers, doubles, else
text; an empty cell is a null), with each column's unit and meaning (``columns.csv``'s) in the field
metadata. pyarrow is imported only here, and only when Parquet is asked for."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from cgbench.config.schema import ConfigError

FORMATS = ("csv", "jsonl", "parquet")
DEFAULT_FORMATS = ("csv", "jsonl")


def parse_formats(text: str, key: str = "--export-format") -> tuple[str, ...]:
    """``csv,jsonl,parquet`` (any non-empty subset, comma-separated) as a tuple in FORMATS' order."""
    asked = [f.strip().lower() for f in text.split(",") if f.strip()]
    unknown = [f for f in asked if f not in FORMATS]
    if unknown or not asked:
        raise ConfigError(f"{key}: {text!r}: give one or more of {', '.join(FORMATS)}, comma-separated "
                          "(e.g. csv,parquet)")
    if "parquet" in asked:
        require_pyarrow(f"{key} parquet")
    return tuple(f for f in FORMATS if f in asked)


def require_pyarrow(what: str = "--export-format parquet") -> None:
    """ConfigError with the install command when pyarrow is missing (checked before any work)."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as e:
        from cgbench.extras import needs

        raise ConfigError(needs(what, "pyarrow")) from e


def _column_type(pa, values: list[Any], unit: str):
    present = [v for v in values if v is not None]
    if not present:  # every cell empty: typed by the unit, so that the files of several runs concatenate
        from cgbench.results.names import FLAG, TEXT

        return pa.string() if unit in ("", TEXT) else pa.bool_() if unit == FLAG else pa.float64()
    if all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.float64()
    return pa.string()


def _as(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "string":
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    if kind == "double":
        return float(value)
    return value


def parquet_bytes(columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                  meta: Mapping[str, tuple[str, str]]) -> bytes:
    """The Parquet file of ``rows`` (a missing key is a null) with ``columns`` in order; ``meta``:
    column -> (unit, meaning), stored as each field's metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays, fields = [], []
    for c in columns:
        values = [r.get(c) for r in rows]
        unit, meaning = meta.get(c, ("", ""))
        kind = _column_type(pa, values, unit)
        arrays.append(pa.array([_as(v, str(kind)) for v in values], type=kind))
        fields.append(pa.field(c, kind, metadata={"unit": unit, "meaning": meaning}))
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), buf)
    return buf.getvalue()
