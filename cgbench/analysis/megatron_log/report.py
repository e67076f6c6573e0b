"""What ``cgbench report`` shows of ``cgbench explain --megatron-log``'s document: the log, every rank's
headline, the eager steps by reason and their shapes, the what-ifs, the flags and notes (tables only:
everything is a count or a time the document holds)."""

from __future__ import annotations

from typing import Any

from cgbench.analysis.megatron_log.explain import KIND
from cgbench.analysis.report import Cell, Report, Section, Table, cell, text_cells
from cgbench.results.formatting import percent

MEGATRON_LOG = "megatron-log"


def _frac(x: Any) -> Cell:
    return Cell(percent(x), float(x)) if isinstance(x, (int, float)) else Cell("-")


def _ms(x: Any) -> Cell:
    return Cell("-") if x is None else Cell(f"{x:,.1f}", float(x))


def _provenance(doc: dict[str, Any]) -> list[tuple[str, str]]:
    version = str(doc.get("cgbench_version", "?"))
    if doc.get("git_sha"):
        version += f" (git {str(doc['git_sha'])[:12]}" + (", dirty)" if doc.get("git_dirty") else ")")
    return [("cgbench", version), ("created", str(doc.get("created_at", "?")))]


def megatron_log_report(doc: dict[str, Any], source: str) -> Report:
    log, grid = doc["log"], doc["grid"]
    ranks = doc["ranks"]
    headline = Section("Headline", [Table("every rank (click a column to sort)", (
        "rank", "steps", "sampling", "graphed", "eager", "eager-step fraction", "eager time (ms)", "step time (ms)",
        "eager time fraction", "longest eager streak", "deferral-like waits"), tuple(
        (cell(r["rank"]), cell(r["steps"]), Cell(r["sampling"]), cell(r["graphed_steps"]), cell(r["eager_steps"]),
         _frac(r["eager_step_fraction"]), _ms(r["eager_time_ms"]), _ms(r["step_time_ms"]),
         _frac(r["eager_time_fraction"]), cell(r["longest_eager_streak"]["steps"]),
         cell(r["deferral_like_waits"]["steps"])) for r in ranks))])
    reasons = Section("Eager steps by reason")
    rows = []
    for r in ranks:
        for reason, e in r["eager_by_reason"].items():
            for s in e["shapes"]:
                rows.append((cell(r["rank"]), Cell(reason), cell(e["steps"]), Cell(str(tuple(s["real"]))),
                             cell(s["steps"]), _ms(s["mean_ms"]), Cell(s["detail"])))
    if rows:
        reasons.tables.append(Table("each real shape re-matched against the grid (the most-logged shapes of each "
                                    "reason)", ("rank", "reason", "reason's steps", "real (T, P, D)", "steps",
                                                "mean (ms)", "what the grid lacks"), tuple(rows)))
    else:
        reasons.notes.append("no eager step on any rank")
    what_if = Section("What if")
    wrows = []
    for r in ranks:
        for w in r["what_if"]:
            wrows.append((cell(r["rank"]), Cell(w["label"]), cell(w["graphs"]), cell(w["eager_steps"]),
                          cell(w["eager_steps_saved"]), cell(w["eager_steps_added"]), cell(w["prompt_tokens_moved"]),
                          cell(w["requests_deferred"]), _ms(w["time_change_ms"]), _frac(w["time_change_fraction"])
                          if w["time_change_fraction"] is not None else Cell("not priced")))
    if wrows:
        what_if.tables.append(Table("the log's shapes re-matched against another grid or policy", (
            "rank", "alternative", "graphs", "eager steps", "saved", "added", "prompt tokens moved", "deferred",
            "time change (ms)", "of step time"), tuple(wrows)))
        what_if.notes += sorted({w["note"] for r in ranks for w in r["what_if"] if w.get("note")})
    else:
        what_if.notes.append("no alternative was asked for (--what-if)")
    flags = Section("Flags and notes")
    if doc["flags"]:
        flags.tables.append(Table(f"{len(doc['flags'])} flag(s)", ("flag", "message"),
                                  tuple(text_cells(f["code"], f["message"]) for f in doc["flags"])))
    flags.notes += list(doc.get("notes") or []) or ["no flags: the log agrees with the grid it is read against"]
    facts = [("explanation", source), ("log", str(log["path"]) + (" (gzip)" if log.get("gzip") else "")),
             ("lines", f"{log['lines']:,} ({log['step_lines']:,} step lines, {log['other_lines']:,} other, "
                       f"{log['malformed_lines']:,} malformed)"),
             ("formats", ", ".join(f"{k}: {v:,}" for k, v in log["formats"].items())),
             ("grid", f"{grid['description']}; {'strict' if grid['strict'] else 'non-strict'} matching "
                      f"({grid['strict_source']})"),
             ("config", doc.get("config") or "none"), ("prices", doc.get("pricing") or "none"),
             *_provenance(doc)]
    return Report(MEGATRON_LOG, f"cgbench explain --megatron-log: {log['path']}", facts,
                  [headline, reasons, what_if, flags])


# what the report reads: key -> JSON type(s), at the top, in ``log`` and in each rank
_TOP = {"log": dict, "grid": dict, "ranks": list, "flags": list}
_LOG = {"path": str, "lines": int, "step_lines": int, "other_lines": int, "malformed_lines": int, "formats": dict}
_GRID = {"description": str, "strict": bool, "strict_source": str}
_RANK = {"rank": int, "steps": int, "sampling": str, "graphed_steps": int, "eager_steps": int,
         "eager_step_fraction": (int, float), "eager_time_ms": (int, float), "step_time_ms": (int, float),
         "eager_time_fraction": (int, float), "longest_eager_streak": dict, "deferral_like_waits": dict,
         "eager_by_reason": dict, "what_if": list}


def checked_document(doc: dict[str, Any], path: Any) -> dict[str, Any]:
    """``doc`` with every key the report reads, of its JSON type (else one ConfigError naming it)."""
    from cgbench.config.schema import ConfigError
    from cgbench.results.document import SCHEMA_VERSION

    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {doc.get('schema_version')!r}, expected {SCHEMA_VERSION}")

    def need(obj: Any, keys: dict[str, Any], where: str) -> None:
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}: {where} must be an object")
        for key, kind in keys.items():
            v = obj.get(key)
            if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
                raise ConfigError(f"{path}: {where}{key} is missing or of the wrong type")

    need(doc, _TOP, "")
    need(doc["log"], _LOG, "log.")
    need(doc["grid"], _GRID, "grid.")
    for i, r in enumerate(doc["ranks"]):
        need(r, _RANK, f"ranks[{i}].")
    return doc


def megatron_log_page(doc: dict[str, Any], source: str) -> Report:
    """The report of an explanation read from ``source`` (checked first)."""
    return megatron_log_report(checked_document(doc, source), source)


# what cgbench report hands build_report: the document kinds this module reports
READERS = {KIND: megatron_log_page}
