"""Parquet files of an export (``--export-format parquet``; pyarrow, the ``parquet`` extra): a table's
CSV columns, in the same order, each of the type ``cgbench.results.export_schema`` fixes for it (the
same in every run and sweep, so the files concatenate into one dataset; an empty cell is a null, a
per-rank list a list), with each column's unit, meaning and type (``columns.csv``'s) in the field
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
        from cgbench.results.extras import needs

        raise ConfigError(needs(what, "pyarrow")) from e


def arrow_type(pa, kind: str):
    """The Arrow type of an export column type (``cgbench.results.export_schema.TYPES``)."""
    return {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(), "string": pa.string(),
            "list<int64>": pa.list_(pa.int64()), "list<float64>": pa.list_(pa.float64())}[kind]


def cast_cell(value: Any, kind: str, column: str) -> Any:
    """``value`` as a cell of a ``kind`` column (None stays a null); a value that is not of the
    column's type is a bug of the schema, named."""
    if value is None:
        return None
    if kind == "string":
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    if kind == "float64" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "int64" and not isinstance(value, bool):
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return int(value)
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind.startswith("list<") and isinstance(value, list):
        item = kind[5:-1]
        return [cast_cell(v, item, column) for v in value]
    raise TypeError(f"export column {column}: {value!r} is not {kind}")


def parquet_bytes(table: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                  meta: Mapping[str, tuple[str, str]], types: Mapping[str, str]) -> bytes:
    """The Parquet file of table ``table``'s ``rows`` (a missing key is a null) with ``columns`` in
    order, each of its ``types`` kind; ``meta``: column -> (unit, meaning). Each field's metadata holds
    its unit, meaning and type; the file's, the table and the cgbench version."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cgbench import __version__

    arrays, fields = [], []
    for c in columns:
        kind = types[c]
        unit, meaning = meta.get(c, ("", ""))
        arrays.append(pa.array([cast_cell(r.get(c), kind, c) for r in rows], type=arrow_type(pa, kind)))
        fields.append(pa.field(c, arrow_type(pa, kind), metadata={"unit": unit, "meaning": meaning, "type": kind}))
    schema = pa.schema(fields, metadata={"cgbench_table": table, "cgbench_version": __version__})
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), buf)
    return buf.getvalue()
