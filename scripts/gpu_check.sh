#!/usr/bin/env bash
# The one-command GPU check (issue 7), for one H100 / H200 with no network, in at most 8 minutes:
#   1. env        torch sees a CUDA device (device, torch and CUDA versions -> env.json)
#   2. deps       hydra-core / omegaconf / typer / rich / pytest importable, else installed from carried wheels
#   3. pytest     pytest -m gpu (graph replay = eager tokens, gating on the real engine, capture budgets)
#   4. sweep      the real engine: tiny_transformer and tiny_hybrid x budget, megatron, defer on cg=megatron,
#                 non-chunked, 64 requests on engine=small (max_requests 8), float64, plus an all-eager cg=none
#                 reference run whose tokens every graphed run must reproduce
#   5. calibrate  cgbench calibrate for both tiny models (graphed and eager step times, held-out error)
#   6. summary    a short table; figures in $OUT (summary.md, summary.json, sweep/, calibration/, logs/)
# Every stage runs under `timeout`, and the limits shrink to fit the total budget.
#
# Usage:
#   bash scripts/gpu_check.sh [--out DIR]        on the GPU machine (make gpu-check)
#   bash scripts/gpu_check.sh --cpu [--out DIR]  the same stages on the CPU with tiny sizes (a dry run)
#   bash scripts/gpu_check.sh --build-wheels     with network: fill $CGBENCH_WHEELS for the GPU machine
#
# Environment:
#   OUT                    where figures go (default: results/gpu/<time>; --out wins)
#   CGBENCH_WHEELS         folder of wheels (default: .gpu-env/wheels); see docs/gpu.md
#   CGBENCH_FORCE_INSTALL  1 = install from the wheels even when the imports already work
#   PYTHON                 interpreter with torch (default: python3)
#   GPU_CHECK_BUDGET_S     total time budget in seconds (default: 470)
#   GPU_PYTHON_VERSION     --build-wheels: the GPU machine's Python (default: 3.12)
set -uo pipefail

CALLER_DIR=$PWD
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/scripts/$(basename "${BASH_SOURCE[0]}")
cd "$ROOT" || exit 1
PY=${PYTHON:-python3}
MODE=gpu
OUT_DIR=${OUT:-}
BUDGET=${GPU_CHECK_BUDGET_S:-470}
WHEELS=${CGBENCH_WHEELS:-$ROOT/.gpu-env/wheels}
SITE=$ROOT/.gpu-env/site
DEPS=(hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 "typer>=0.26" "rich>=13.8" pytest)

usage() { sed -n '2,/^set -uo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case $1 in
    --cpu | --dry-run) MODE=cpu ;;
    --_install | --_calibrate) MODE=${1#--_}; shift; break ;;  # internal: a stage run under `timeout`
    --out) OUT_DIR=${2:?--out needs a folder}; shift ;;
    --build-wheels) MODE=wheels ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ $MODE == wheels ]]; then
  # antlr4-python3-runtime 4.9.3 is an sdist only: build its (pure Python) wheel, then fetch the rest as
  # binary wheels for the GPU machine's Python on Linux x86_64 (PyYAML is the one compiled dependency).
  mkdir -p "$WHEELS"
  "$PY" -m pip wheel --no-deps --wheel-dir "$WHEELS" antlr4-python3-runtime==4.9.3 || exit 1
  "$PY" -m pip download --dest "$WHEELS" --find-links "$WHEELS" --only-binary=:all: \
    --python-version "${GPU_PYTHON_VERSION:-3.12}" --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "${DEPS[@]}" || exit 1
  echo "wheels for Python ${GPU_PYTHON_VERSION:-3.12} in $WHEELS ($(ls "$WHEELS" | wc -l) files)"
  exit 0
fi

if [[ $MODE == install ]]; then
  if [[ ${CGBENCH_FORCE_INSTALL:-0} != 1 ]] && "$PY" -c "import hydra, omegaconf, typer, rich, pytest" 2>/dev/null
  then
    echo "dependencies already importable"
    exit 0
  fi
  if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "dependencies missing and no wheels in $WHEELS: build them where there is network" \
      "(bash scripts/gpu_check.sh --build-wheels; docs/gpu.md) and set CGBENCH_WHEELS" >&2
    exit 1
  fi
  mkdir -p "$SITE"
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install --no-index --find-links "$WHEELS" --target "$SITE" --upgrade --quiet "${DEPS[@]}" || exit 1
  else
    "$PY" scripts/gpu_check.py unpack --wheels "$WHEELS" --target "$SITE" || exit 1
  fi
  PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "import hydra, omegaconf, typer, rich, pytest" || exit 1
  echo "installed into $SITE"
  exit 0
fi

if [[ $MODE == calibrate ]]; then
  # `cgbench calibrate` once cgbench.cli.app registers it; the module's own entry point otherwise
  if "$PY" -m cgbench.cli.app calibrate --help >/dev/null 2>&1; then
    exec "$PY" -m cgbench.cli.app calibrate "$@"
  fi
  exec "$PY" -m cgbench.cli.calibrate "$@"
fi

OUT_DIR=${OUT_DIR:-$ROOT/results/gpu/$(date +%Y%m%d-%H%M%S)}
[[ $OUT_DIR == /* ]] || OUT_DIR=$CALLER_DIR/$OUT_DIR
mkdir -p "$OUT_DIR/logs" "$OUT_DIR/calibration" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
: >"$OUT_DIR/stages.tsv"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's cgbench, whatever else is installed
export CGBENCH_CONFIG_DIR="$ROOT/conf"
export COLUMNS=${COLUMNS:-140}
if [[ $MODE == gpu ]]; then
  DEVICE=cuda
  CAL_ARGS=(--repeat 7 --warmup 2)
  CAL_ENGINE=(engine=small)
else
  DEVICE=cpu
  CAL_ARGS=(--repeat 2 --warmup 1)
  CAL_ENGINE=(engine=small engine.max_requests=4 engine.max_tokens=32 engine.max_sequence_length=64)
fi
FAILED=0

log() { printf '[gpu-check %3ds] %s\n' "$SECONDS" "$*"; }

# stage NAME LIMIT_S CMD...: runs CMD under timeout (never past the total budget), logs to logs/NAME.log
stage() {
  local name=$1 limit=$2 left rc t0
  shift 2
  left=$((BUDGET - SECONDS))
  [[ $name != summary ]] && left=$((left - 15))  # the summary always gets its time
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    log "$name: skipped, the ${BUDGET} s budget is spent"
    printf '%s\t%s\t%s\t%s\n' "$name" 124 0 0 >>"$OUT_DIR/stages.tsv"
    FAILED=1
    return 124
  fi
  log "$name (limit ${limit} s)"
  t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$OUT_DIR/logs/$name.log"
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" $((SECONDS - t0)) "$limit" >>"$OUT_DIR/stages.tsv"
  if ((rc != 0)); then
    FAILED=1
    ((rc == 124 || rc == 137)) && log "$name: timed out after ${limit} s" || log "$name: exit $rc"
  fi
  return "$rc"
}

log "mode $MODE, figures in $OUT_DIR"
ENV_ARGS=(--out "$OUT_DIR")
[[ $MODE == gpu ]] && ENV_ARGS+=(--require-cuda)
if ! stage env 60 "$PY" scripts/gpu_check.py env "${ENV_ARGS[@]}"; then
  log "stopping: no usable torch / CUDA"
  exit 1
fi
if ! stage deps 60 bash "$SELF" --_install; then
  log "stopping: dependencies missing"
  exit 1
fi
if [[ ${CGBENCH_FORCE_INSTALL:-0} == 1 ]] || ! "$PY" -c "import hydra, omegaconf, typer, rich, pytest" 2>/dev/null
then
  export PYTHONPATH="$SITE:$PYTHONPATH"
fi

mapfile -t GPU_TESTS < <(grep -l "pytest.mark.gpu" tests/*/test_*.py)
stage pytest 150 "$PY" -m pytest -m gpu -q -p no:cacheprovider "${GPU_TESTS[@]}"
stage sweep 120 "$PY" scripts/gpu_check.py sweep --out "$OUT_DIR" --device "$DEVICE"
for model in tiny_transformer tiny_hybrid; do
  stage "calibrate-$model" 50 bash "$SELF" --_calibrate "model=$model" "${CAL_ENGINE[@]}" "backend.device=$DEVICE" \
    "${CAL_ARGS[@]}" --out "$OUT_DIR/calibration/$model.json"
done
stage summary 20 "$PY" scripts/gpu_check.py summarize --out "$OUT_DIR"
log "done in ${SECONDS} s; figures in $OUT_DIR (summary.md for docs/gpu-results.md)"
exit "$FAILED"
