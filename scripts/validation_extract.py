"""Rebuild ``scripts/validation_data.csv`` from Vidur's public profiles (a bare git mirror of
github:microsoft/vidur): per-layer linear-layer times and single-node NCCL all-reduce times.

    python scripts/validation_extract.py /path/to/microsoft+vidur/repo

Rows of Llama-2-7B are marked ``fit`` (the GEMM efficiency curve and the all-reduce alpha/beta are
chosen on them); every other model, and every all-reduce size not a power of four (on H100: below
4 MiB too), is ``check``.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "validation_data.csv"
COMMIT_NOTE = "github:microsoft/vidur data/profiling"
TOKENS = (1, 8, 32, 128, 512, 2048, 4096)
FIELDS = ("class", "source", "hardware", "model", "tp", "tokens", "bytes", "heads", "kv_heads", "hidden",
          "ffn", "gated", "measured_ms", "role")


def _load(git_dir: str, path: str) -> list[dict[str, str]]:
    text = subprocess.check_output(["git", "--git-dir", git_dir, "show", f"HEAD:{path}"]).decode()
    return list(csv.DictReader(io.StringIO(text)))


def _models(git_dir: str, hw: str) -> list[str]:
    names = subprocess.check_output(["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", "HEAD",
                                     f"data/profiling/compute/{hw}/"]).decode().split()
    return sorted({n.rsplit("/", 1)[0] for n in names if n.endswith("mlp.csv")})


def linear_rows(git_dir: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for hw in ("a100", "h100"):
        for folder in _models(git_dir, hw):
            model = folder.rsplit("/", 1)[1]
            for r in _load(git_dir, f"{folder}/mlp.csv"):
                tokens = int(r["num_tokens"])
                if tokens not in TOKENS:
                    continue
                ms = sum(float(r[f"time_stats.{op}.median"])
                         for op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"))
                out.append({"class": "linear", "source": f"{COMMIT_NOTE}/compute/{hw}/{model}/mlp.csv",
                            "hardware": hw, "model": model, "tp": int(r["num_tensor_parallel_workers"]),
                            "tokens": tokens, "bytes": 0, "heads": int(r["n_head"]),
                            "kv_heads": int(r["n_kv_head"]), "hidden": int(r["n_embd"]),
                            "ffn": int(r["n_expanded_embd"]), "gated": r["use_gated_mlp"] == "True",
                            "measured_ms": round(ms, 4), "role": "fit" if model == "Llama-2-7b-hf" else "check"})
    return out


def allreduce_rows(git_dir: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for hw in ("a100", "h100"):
        rows = _load(git_dir, f"data/profiling/network/{hw}_dgx/all_reduce.csv")
        for r in rows:  # one node (every worker on it), rank 0, sizes a power of two or four
            size, workers = int(r["size"]), int(r["num_workers"])
            if r["rank"] != "0" or int(r["devices_per_node"]) != workers or size & (size - 1):
                continue
            # fit: the sizes a power of four; on H100 only from 4 MiB (its smaller messages take the
            # low-latency protocol, fitted to CUDA-graph measurements: scripts/validation_kernels.csv)
            role = "fit" if (size.bit_length() - 1) % 2 == 0 and (hw == "a100" or size >= 1 << 22) else "check"
            out.append({"class": "allreduce", "source": f"{COMMIT_NOTE}/network/{hw}_dgx/all_reduce.csv",
                        "hardware": hw, "model": "", "tp": workers, "tokens": 0, "bytes": size, "heads": 0,
                        "kv_heads": 0, "hidden": 0, "ffn": 0, "gated": False,
                        "measured_ms": float(r["time_stats.all_reduce.median"]), "role": role})
    return out


def main() -> None:
    git_dir = sys.argv[1]
    rows = linear_rows(git_dir) + allreduce_rows(git_dir)
    with OUT.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {OUT}")


if __name__ == "__main__":
    main()
