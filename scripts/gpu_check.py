"""Helper of ``scripts/gpu_check.sh``: each stage that needs Python, as a subcommand.

    python scripts/gpu_check.py env --out DIR [--require-cuda]   # torch / CUDA facts -> DIR/env.json
    python scripts/gpu_check.py unpack --wheels W --target T     # install wheels without pip (fallback)
    python scripts/gpu_check.py sweep --out DIR --device cuda    # the real-engine sweep -> DIR/sweep/*.json
    python scripts/gpu_check.py summarize --out DIR              # the short table -> DIR/summary.{json,md}

Only ``env`` and ``unpack`` run before the dependencies are importable, so they use the standard library
(and torch) alone; cgbench and Rich are imported inside the other subcommands.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MODELS = ("tiny_transformer", "tiny_hybrid")
POLICIES = ("budget", "megatron", "defer")
REFERENCE = "eager-ref"  # the same workload on cg=none: every step eager, the token reference
# engine=small holds 8 requests; 64 arriving at once keep the batch at max_requests, so a hybrid's strict
# matching misses some mixed shapes under `budget` (cgbench's own simulator shows which). float64, so that
# "the same tokens as the eager reference" cannot fail on a near-tie that a padded GEMM rounds differently.
SWEEP_OVERRIDES = ("engine=small", "engine.chunked_prefill=false", "workload=small",
                   "workload.num_requests=64", "backend=torch", "backend.dtype=float64")
MEDIAN_ERROR_TARGET = 0.10
DECODE_RATIO_TARGET = 2.0


def _write(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


# ------------------------------------------------------------------------------------------------ env


def _git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def cmd_env(args: argparse.Namespace) -> int:
    doc: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(terse=True),
                           "git_sha": _git_sha(),
                           "created_at": datetime.now(UTC).isoformat(timespec="seconds")}
    try:
        import torch
    except ImportError as e:
        print(f"torch is not importable ({e}); install a CUDA build of torch first", file=sys.stderr)
        return 4
    doc.update(torch=torch.__version__, cuda_build=torch.version.cuda, cuda=torch.cuda.is_available())
    if doc["cuda"]:
        doc.update(device=torch.cuda.get_device_name(0), device_count=torch.cuda.device_count(),
                   capability=list(torch.cuda.get_device_capability(0)),
                   memory_gb=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    _write(Path(args.out) / "env.json", doc)
    print(" ".join(f"{k}={v}" for k, v in doc.items() if k != "created_at"))
    if args.require_cuda and not doc["cuda"]:
        print("no CUDA device visible to torch (run with --cpu for the CPU dry run)", file=sys.stderr)
        return 3
    return 0


# --------------------------------------------------------------------------------------------- unpack


def _wheel_fits(name: str) -> bool:
    """Pure wheels, or ones built for this interpreter and machine."""
    parts = name[:-4].split("-")
    if len(parts) < 5:
        return False
    py, abi, plat = parts[-3:]
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"
    py_ok = any(t in ("py3", cp) or t == f"py{sys.version_info.major}" for t in py.split("."))
    abi_ok = abi in ("none", "abi3", cp)
    plat_ok = plat == "any" or (sys.platform == "linux" and platform.machine() in plat and "linux" in plat)
    return py_ok and abi_ok and plat_ok


def cmd_unpack(args: argparse.Namespace) -> int:
    """A wheel is a zip of importable files: without pip, unzip each fitting one (newest name last wins)."""
    target = Path(args.target)
    target.mkdir(parents=True, exist_ok=True)
    wheels = sorted(p for p in Path(args.wheels).glob("*.whl") if _wheel_fits(p.name))
    if not wheels:
        print(f"no wheel for Python {platform.python_version()} in {args.wheels}", file=sys.stderr)
        return 2
    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            z.extractall(target)
        for data in target.glob("*.data"):  # purelib / platlib payloads belong at the top level
            for sub in ("purelib", "platlib"):
                if (data / sub).is_dir():
                    shutil.copytree(data / sub, target, dirs_exist_ok=True)
            shutil.rmtree(data)
        print(f"unpacked {whl.name}")
    return 0


# ---------------------------------------------------------------------------------------------- sweep


def _decode_step_ms(doc: dict) -> dict[int, float]:
    """Median step time (ms) of the decode-only steps of a traced run, per D."""
    by_d: dict[int, list[float]] = {}
    for s in doc.get("steps", []):
        t, p, d = s["real"]
        if p == 0 and d > 0:
            by_d.setdefault(d, []).append(1e3 * s["dt_s"])
    return {d: statistics.median(v) for d, v in sorted(by_d.items())}


def cmd_sweep(args: argparse.Namespace) -> int:
    from cgbench.config.compose import load_config
    from cgbench.pipeline import run_point
    from cgbench.results.document import write_json_atomic

    out = Path(args.out) / "sweep"
    failed = 0
    if args.device == "cpu":
        import torch

        torch.set_num_threads(1)  # a dry run on a busy CPU: parallel regions stall for whole time slices
    for model in args.models:
        points = [(REFERENCE, ["cg=none", "policy=budget"])] + [(p, ["cg=megatron", f"policy={p}"])
                                                                for p in args.policies]
        for label, extra in points:
            ovr = [f"model={model}", *SWEEP_OVERRIDES, f"backend.device={args.device}", *extra, *args.extra]
            t0 = time.perf_counter()
            try:
                doc = run_point(load_config(ovr), ovr, trace=True, requests=True)
            except Exception as e:  # noqa: BLE001 - one failed point must not lose the others
                failed += 1
                print(f"{model} {label}: FAILED {type(e).__name__}: {e}", flush=True)
                continue
            doc["wall_s"] = round(time.perf_counter() - t0, 3)
            write_json_atomic(out / f"{model}_{label}.json", doc)
            m, rep = doc["metrics"], doc.get("backend_report") or {}
            print(f"{model} {label}: {m['steps']} steps, matcher eager {matcher_eager(m)}, replayed "
                  f"{rep.get('steps_replayed')}, measured eager {rep.get('steps_eager')} "
                  f"({doc['wall_s']:.1f} s)", flush=True)
    return 1 if failed else 0


# ------------------------------------------------------------------------------------------ summarize


def matcher_eager(metrics: dict) -> int:
    """Eager steps the grid had no graph for: the engine's eager steps but those whose graph the backend
    had not captured (``not_captured``: every graph-matched step on a CPU, past a capture budget on a GPU)."""
    return metrics["eager_steps"] - (metrics.get("eager_steps_by_reason") or {}).get("not_captured", 0)


def _tokens(doc: dict) -> dict[int, list[int]]:
    return {r["id"]: r.get("token_ids", []) for r in doc.get("requests", [])}


def _pytest_counts(log: Path) -> dict[str, int] | None:
    if not log.exists():
        return None
    counts = {k: 0 for k in ("passed", "failed", "skipped", "errors", "deselected")}
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for line in reversed(lines):
        found = re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", line)
        if found:
            for n, key in found:
                counts["errors" if key.startswith("error") else key] = int(n)
            return counts
    return counts


def summarize(out: Path) -> dict[str, Any]:
    """Everything the stages left under ``out`` -> one summary document (no printing)."""
    env = json.loads((out / "env.json").read_text()) if (out / "env.json").exists() else {}
    on_cuda = bool(env.get("cuda"))
    stages = []
    if (out / "stages.tsv").exists():
        for line in (out / "stages.tsv").read_text().splitlines():
            name, rc, secs, limit = line.split("\t")
            stages.append({"stage": name, "rc": int(rc), "seconds": int(secs), "limit_s": int(limit)})
    docs = {p.stem: json.loads(p.read_text()) for p in sorted((out / "sweep").glob("*.json"))}
    sweep, engine_ratio = [], {}
    for model in MODELS:
        ref = docs.get(f"{model}_{REFERENCE}")
        for label in (REFERENCE, *POLICIES):
            doc = docs.get(f"{model}_{label}")
            if doc is None:
                continue
            m, rep = doc["metrics"], doc.get("backend_report") or {}
            mismatched = None
            if ref is not None and label != REFERENCE:
                want, got = _tokens(ref), _tokens(doc)
                mismatched = sum(1 for rid, toks in want.items() if got.get(rid) != toks)
            sweep.append({"model": model, "policy": label, "steps": m["steps"],
                          "matcher_eager": matcher_eager(m), "replayed": rep.get("steps_replayed"),
                          "measured_eager": rep.get("steps_eager"),
                          "eager_instead_of_graph": rep.get("eager_instead_of_graph"),
                          "deferral_events": m.get("deferral_events"), "makespan_s": m.get("makespan_s"),
                          "token_mismatches": mismatched, "wall_s": doc.get("wall_s")})
        graphed = docs.get(f"{model}_budget")
        if ref is not None and graphed is not None:
            eager_ms, graph_ms = _decode_step_ms(ref), _decode_step_ms(graphed)
            per_d = {d: eager_ms[d] / graph_ms[d] for d in eager_ms if d in graph_ms and graph_ms[d] > 0}
            median = statistics.median(per_d.values()) if per_d else None
            engine_ratio[model] = {"per_D": per_d, "median": median}
    calibration = []
    for path in sorted((out / "calibration").glob("*.report.json")):
        rep = json.loads(path.read_text())
        modes = rep["holdout"]["modes"]
        calibration.append({"model": rep["model"], "device": rep["device"], "method": rep["graphed_method"],
                            "graphed_rows": rep["cases"]["graphed"], "eager_rows": rep["cases"]["eager"],
                            "decode_ratio": rep["decode_ratio"]["median"],
                            **{f"{mode}_{q}": modes[mode][f"{q}_rel_error"]
                               for mode in ("graphed", "eager", "all") for q in ("median", "p90")}})
    pytest_counts = _pytest_counts(out / "logs" / "pytest.log")
    return {"created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "mode": "gpu" if on_cuda else "cpu", "env": env, "stages": stages, "pytest": pytest_counts,
            "sweep": sweep, "engine_decode_ratio": engine_ratio, "calibration": calibration,
            "checks": _checks(on_cuda, stages, pytest_counts, sweep, calibration)}


def _checks(on_cuda: bool, stages: list[dict], pytest_counts: dict | None, sweep: list[dict],
            calibration: list[dict]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool | None, detail: str) -> None:
        checks.append({"check": name, "ok": ok, "detail": detail})

    check("CUDA device", True if on_cuda else None, "torch sees a CUDA device" if on_cuda else "CPU dry run")
    failed_stages = [s["stage"] for s in stages if s["rc"] != 0]
    check("stages", not failed_stages, "all finished in time" if not failed_stages else
          f"failed or timed out: {', '.join(failed_stages)}")
    if pytest_counts is not None:
        bad = pytest_counts["failed"] + pytest_counts["errors"]
        check("pytest -m gpu", bad == 0, ", ".join(f"{v} {k}" for k, v in pytest_counts.items() if v))
    mism = [r for r in sweep if r["token_mismatches"]]
    compared = [r for r in sweep if r["token_mismatches"] is not None]
    if compared:
        differ = [f"{r['model']}/{r['policy']}: {r['token_mismatches']} requests differ" for r in mism]
        detail = "; ".join(differ) or f"{len(compared)} runs vs the cg=none reference"
        check("tokens: graph replay = eager", not mism, detail)
    rows = {(r["model"], r["policy"]): r for r in sweep}
    budget, gated = rows.get(("tiny_hybrid", "budget")), rows.get(("tiny_hybrid", "megatron"))
    if budget and gated:
        key = "measured_eager" if on_cuda else "matcher_eager"
        ok = (budget[key] or 0) > 0 and gated[key] == 0
        what = "measured (not replayed)" if on_cuda else "matcher (CPU: every step runs eager)"
        check("hybrid: budget eager, megatron none", ok,
              f"{what} eager steps: budget {budget[key]}, megatron {gated[key]}")
    for cal in calibration:
        med = cal["all_median"]
        check(f"calibration {cal['model']}: median error < {MEDIAN_ERROR_TARGET:.0%}",
              None if med is None else (med < MEDIAN_ERROR_TARGET if on_cuda else None),
              f"held-out median {_pct(med)} (graphed {_pct(cal['graphed_median'])}, eager "
              f"{_pct(cal['eager_median'])})" + ("" if on_cuda else "; CPU timings are not the target"))
        ratio = cal["decode_ratio"]
        check(f"decode eager/graphed {cal['model']}",
              None if ratio is None or not on_cuda else ratio > DECODE_RATIO_TARGET,
              f"{_num(ratio)}x (expected > {DECODE_RATIO_TARGET:g}x on a GPU)")
    return checks


def _pct(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "-"


def _num(x: Any, digits: int = 2) -> str:
    if isinstance(x, bool) or x is None:
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _ok(v: bool | None) -> str:
    return "n/a" if v is None else ("PASS" if v else "FAIL")


def tables(summary: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of each table, shared by the terminal and the markdown output."""
    sweep_rows = [[r["model"], r["policy"], str(r["steps"]), str(r["matcher_eager"]), _num(r["replayed"]),
                   _num(r["measured_eager"]), _num(r["deferral_events"]), _num(r["makespan_s"], 3),
                   "ref" if r["token_mismatches"] is None else ("=" if r["token_mismatches"] == 0 else
                                                                f"{r['token_mismatches']} differ")]
                  for r in summary["sweep"]]
    cal_rows = [[c["model"], str(c["graphed_rows"]), str(c["eager_rows"]), _num(c["decode_ratio"]),
                 _pct(c["graphed_median"]), _pct(c["graphed_p90"]), _pct(c["eager_median"]),
                 _pct(c["eager_p90"]), _pct(c["all_median"])] for c in summary["calibration"]]
    ratio_rows = [[model, _num(r["median"]), ", ".join(f"D={d}: {v:.2f}" for d, v in r["per_D"].items())]
                  for model, r in summary["engine_decode_ratio"].items()]
    check_rows = [[c["check"], _ok(c["ok"]), c["detail"]] for c in summary["checks"]]
    stage_rows = [[s["stage"], str(s["rc"]), str(s["seconds"]), str(s["limit_s"])] for s in summary["stages"]]
    return [
        ("Stages", ["stage", "rc", "seconds", "limit s"], stage_rows),
        ("Real-engine sweep (engine=small, cg=megatron, non-chunked, 64 requests at once, float64)",
         ["model", "policy", "steps", "matcher eager", "replayed", "measured eager", "deferrals",
          "makespan s", "tokens vs eager"], sweep_rows),
        ("Decode steps in the sweep: eager (cg=none) / graphed (budget) step time",
         ["model", "median ratio", "per D"], ratio_rows),
        ("Calibration (held-out relative error)",
         ["model", "graphed rows", "eager rows", "decode eager/graphed", "graphed median", "graphed p90",
          "eager median", "eager p90", "all median"], cal_rows),
        ("Checks", ["check", "result", "detail"], check_rows),
    ]


def markdown(summary: dict[str, Any]) -> str:
    env = summary["env"]
    lines = [f"Device: {env.get('device', 'CPU (dry run)')}; torch {env.get('torch')} "
             f"(CUDA {env.get('cuda_build') or '-'}); Python {env.get('python')}; cgbench "
             f"{env.get('git_sha') or '-'}; {summary['created_at']}", ""]
    for title, header, rows in tables(summary):
        if not rows:
            continue
        lines += [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def cmd_summarize(args: argparse.Namespace) -> int:
    out = Path(args.out)
    summary = summarize(out)
    _write(out / "summary.json", summary)
    (out / "summary.md").write_text(markdown(summary))
    try:
        from rich import box
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(markdown(summary))
    else:
        console = Console(width=max(Console().width, 120))
        for title, header, rows in tables(summary):
            if rows:
                table = Table(*header, title=title, box=box.SIMPLE_HEAD, title_justify="left")
                for row in rows:
                    table.add_row(*row)
                console.print(table)
    failed = [c for c in summary["checks"] if c["ok"] is False]
    print(f"summary: {out / 'summary.md'} ({len(failed)} failed checks)")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("env", help="record torch / CUDA facts")
    p.add_argument("--out", required=True)
    p.add_argument("--require-cuda", action="store_true")
    p.set_defaults(fn=cmd_env)
    p = sub.add_parser("unpack", help="install wheels by unzipping them (no pip)")
    p.add_argument("--wheels", required=True)
    p.add_argument("--target", required=True)
    p.set_defaults(fn=cmd_unpack)
    p = sub.add_parser("sweep", help="the real-engine sweep")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--policies", nargs="+", default=list(POLICIES))
    p.add_argument("--extra", nargs="*", default=[], help="more overrides for every point")
    p.set_defaults(fn=cmd_sweep)
    p = sub.add_parser("summarize", help="print and write the summary")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_summarize)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
