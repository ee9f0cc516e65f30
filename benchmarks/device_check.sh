#!/usr/bin/env bash
# The one prepared run for a lent GPU machine (an H200 with Python, CuPy for CUDA 13,
# PyTorch, NumPy, PyYAML and pytest preinstalled; no network, nothing may be installed).
#
#   bash benchmarks/device_check.sh        from the repository root; OUT=<dir> to collect
#
# 1. the environment: nvidia-smi, the version of every module we import (a missing one
#    is reported, and the rest still runs), `cudnnlite info`;
# 2. every kernel's compile unit (the module a run loads) compiled by the CUDA backend on
#    16 threads (timeout 90 s), so later steps load them from the CUBIN cache;
# 3. the test suite's CUDA-backend tests (`-k cuda`): the execution model and one main
#    file per family first (timeout 80 s), then the rest (timeout 70 s); JUnit XML in $OUT;
# 4. the ResNet-50 suite tuned at batch 32 (timeout 45 s): $OUT/tuning/<arch>.yaml, the
#    DB to ship in tuning_db/;
# 5. the benchmarks but rnn (timeout 80 s), JSON in $OUT (benchmarks/results/ without OUT);
# 6. recurrent networks: benchmarks/rnn.py against cuDNN (timeout 50 s; the script skips
#    the rows left after 35 s, so the step keeps what it measured), JSON in $OUT/rnn;
# 7. step 5's figures as pictures (benchmarks/report.py, timeout 30 s): PNGs and a
#    Markdown page in $OUT/report (last: the pictures matter least).
# Worst case 8.5 minutes (the timeouts: 45 s environment, 90 + 150 + 45 + 80 + 50 + 30,
# and 2 x 10 s of summaries). It always writes $OUT/device_check_summary.txt.
# CUDNNLITE_TEST_BACKENDS=cpu runs the same steps on the emulator (to check the script
# on a machine without a GPU).

# No `set -e`: a failing test must not skip the benchmarks.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1  # logs keep up with a run that a timeout cuts short
OUT_DIR="${OUT:-benchmarks/results}"
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/device_check_summary.txt"
BACKENDS="${CUDNNLITE_TEST_BACKENDS:-cuda}"
PY="${PYTHON:-$(command -v python || command -v python3)}"
START=$SECONDS
STEP="start"

: >"$SUMMARY"
note() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
finish() {
    note ""
    note "device check ended after $((SECONDS - START)) s (last step: $STEP)"
}
trap finish EXIT

note "cudnnlite device check, $(date -u +%Y-%m-%dT%H:%M:%SZ), test backends: $BACKENDS"
note "repo: $PWD; python: $PY; OUT: $OUT_DIR"

# ------------------------------------------------------------------ 1. environment
STEP="environment"
echo "== nvidia-smi =="
if command -v nvidia-smi >/dev/null; then
    timeout 10 nvidia-smi 2>&1 | tee "$OUT_DIR/nvidia-smi.txt"
    note "gpu: $(timeout 5 nvidia-smi --query-gpu=name,driver_version,memory.total \
        --format=csv,noheader 2>&1 | head -n 4 | tr '\n' ';')"
else
    note "gpu: nvidia-smi not found"
fi

echo "== python modules and cudnnlite info =="
timeout 30 "$PY" - >"$OUT_DIR/environment.txt" 2>&1 <<'PYEOF'
import importlib, platform, sys

print(f"python {platform.python_version()} ({sys.executable})")
missing = []
for name in ("numpy", "cupy", "torch", "yaml", "pytest", "hypothesis", "ml_dtypes", "cudnnlite"):
    try:
        mod = importlib.import_module(name)
        print(f"module {name}: {getattr(mod, '__version__', 'ok')}")
    except Exception as exc:
        missing.append(name)
        print(f"module {name}: IMPORT FAILED: {type(exc).__name__}: {exc}")
if "cupy" not in missing:
    import cupy
    rt = cupy.cuda.runtime
    try:
        print(f"cupy: CUDA runtime {rt.runtimeGetVersion()}, driver {rt.driverGetVersion()}, "
              f"{rt.getDeviceCount()} device(s)")
    except Exception as exc:
        print(f"cupy: cannot query CUDA: {type(exc).__name__}: {exc}")
if "torch" not in missing:
    import torch
    print(f"torch: CUDA {torch.version.cuda}, available {torch.cuda.is_available()}")
if "hypothesis" in missing:
    print("NOTE: without hypothesis the property-test files are skipped")
if "ml_dtypes" in missing:
    print("NOTE: without ml_dtypes there is no bfloat16: bf16 tests and benchmarks are skipped")
if "cudnnlite" not in missing:
    from cudnnlite.cli import main
    print()
    main(["info"])
PYEOF
env_rc=$?
cat "$OUT_DIR/environment.txt"
grep -E '^(python |module |cupy:|torch:|NOTE:)' "$OUT_DIR/environment.txt" >>"$SUMMARY"
[[ $env_rc -ne 0 ]] && note "environment step exited with $env_rc"

# ------------------------------------------------------------------ 2. compile
# Every kernel's compile unit through the CUDA backend (our NVRTC path, on 16 threads), so
# that the tests and benchmarks below load CUBINs from its disk cache instead of compiling
# one by one.
STEP="compile"
echo "== compiling every kernel module =="
t0=$SECONDS
if [[ "$BACKENDS" == *cuda* ]]; then
    timeout 90 "$PY" - 2>&1 <<'PYEOF' | tee "$OUT_DIR/compile.log"
import time

from cudnnlite.precompile import DTYPES, precompile

# The compile units a run loads (one per kernel on a GPU), every family and dtype (bf16
# only with ml_dtypes, as the tests), on 16 threads: what the tests and benchmarks below
# then read from the CUBIN cache. No progress bar: tqdm may be missing here.
start = time.perf_counter()
report = precompile((), dtypes_=DTYPES, backend="cuda", jobs=16, progress=False)
for label, error in sorted(report.failed.items()):
    print(f"FAIL {label}\n    {error}")
total = len(report.built) + len(report.failed)
print(f"{len(report.built)} of {total} compile units built in {time.perf_counter() - start:.0f} s")
PYEOF
    note "compile: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s; $(tail -n 1 "$OUT_DIR/compile.log")"
fi

# ------------------------------------------------------------------ 3. tests
STEP="tests"
echo "== tests on backend(s) $BACKENDS =="
# On the GPU, the tests that run there: those the backend fixture gives "cuda" (their ids
# say so; about 2,700 of 3,800). The rest (the emulator's own, the NVRTC check, the
# references, argument checks) do the same on any machine, and CI runs them.
SELECT=()
[[ "$BACKENDS" == "cuda" ]] && SELECT=(-k cuda)
# Two passes, so that a slow GPU run still checks every family: first the execution model
# (the emulator's self-test kernels on the GPU: barriers, warps, MMA fragments and wgmma
# layouts, cp.async, grid sync) and one main file per family (80 s), then everything
# else (70 s).
FIRST=(tests/emulator/test_emulator_core.py tests/emulator/test_emu_mma.py
       tests/emulator/test_emu_wgmma.py tests/test_conv_tc_wgmma.py
       tests/emulator/test_emu_wmma.py tests/emulator/test_grid_sync.py
       tests/emulator/test_launch_bounds.py tests/test_cuda_backend_glue.py
       tests/test_subnormals.py tests/test_conv_api.py tests/test_conv_tc.py
       tests/test_activation.py tests/test_softmax.py tests/test_pooling.py
       tests/test_batch_norm.py tests/test_norm.py tests/test_attention_flash_tc.py
       tests/test_attention.py tests/test_rnn.py tests/test_ctc.py tests/test_spatial.py
       tests/test_tensor_ops.py tests/test_dropout.py tests/test_interop.py)
REST=()
for f in "${FIRST[@]}"; do REST+=(--ignore="$f"); done
run_tests() {  # run_tests LABEL SECONDS PYTEST-ARGS...
    local label=$1 limit=$2 t=$SECONDS rc
    shift 2
    CUDNNLITE_TEST_BACKENDS="$BACKENDS" timeout "$limit" "$PY" -m pytest -q \
        -p no:cacheprovider --continue-on-collection-errors ${SELECT[@]+"${SELECT[@]}"} \
        --durations=10 \
        --junitxml="$OUT_DIR/junit-$label.xml" "$@" 2>&1 | tee "$OUT_DIR/pytest-$label.log"
    rc=${PIPESTATUS[0]}
    case $rc in
        0) note "tests ($label): PASSED in $((SECONDS - t)) s" ;;
        5) note "tests ($label): none selected" ;;
        124) note "tests ($label): TIMED OUT after $limit s (exit 124)" ;;
        *) note "tests ($label): FAILED (exit $rc) in $((SECONDS - t)) s" ;;
    esac
    grep -E '^(FAILED|ERROR) ' "$OUT_DIR/pytest-$label.log" | head -n 20 >>"$SUMMARY"
    # pytest's own last line: "12 passed, 3 skipped in 40.1s" and the like
    tail -n 1 "$OUT_DIR/pytest-$label.log" | sed 's/^/  pytest: /' >>"$SUMMARY"
    [[ $rc -eq 0 || $rc -eq 5 ]] || test_rc=$rc
}
test_rc=0
note ""
run_tests first 80 "${FIRST[@]}"
run_tests rest 70 tests "${REST[@]}"

# ------------------------------------------------------------------ 4. tuning
# The ResNet-50 suite at batch 32, fp32, on this GPU: the figure for the "tune the
# whole suite in <= 60 s" goal, and the tuning DB to ship as tuning_db/<arch>.yaml
# (written problem by problem, so a timeout keeps what was tuned).
STEP="tuning"
echo "== tuning the resnet50 suite =="
t0=$SECONDS
if [[ "$BACKENDS" == *cuda* ]]; then
    CUDNNLITE_TUNING_DIR="$OUT_DIR/tuning" timeout 45 "$PY" -m cudnnlite.cli tune resnet50 \
        --batch 32 --backend cuda --no-progress 2>&1 | tee "$OUT_DIR/tuning.log"
    tune_rc=${PIPESTATUS[0]}
else
    CUDNNLITE_TUNING_DIR="$OUT_DIR/tuning" timeout 70 "$PY" -m cudnnlite.cli tune resnet50 \
        --batch 1 --hw 6 --backend cpu --no-progress 2>&1 | tee "$OUT_DIR/tuning.log"
    tune_rc=${PIPESTATUS[0]}
fi
note "tuning: exit $tune_rc after $((SECONDS - t0)) s; DB files: $(ls "$OUT_DIR"/tuning/*.yaml 2>/dev/null | tr '\n' ' ')"

# ------------------------------------------------------------------ 5. benchmarks
STEP="benchmarks"
# overhead.py (per-call library work and wall time next to PyTorch's, a few seconds) runs
# early in run_all's order, so a step cut short still has it. compile_time needs no GPU
# (NVRTC and g++ only): measured off the device, it would only spend device time here.
echo "== benchmarks =="
t0=$SECONDS
timeout 80 "$PY" benchmarks/run_all.py --skip rnn --skip compile_time --out "$OUT_DIR" 2>&1 \
    | tee "$OUT_DIR/benchmarks.log"
bench_rc=${PIPESTATUS[0]}
case $bench_rc in
    0) note "benchmarks: done in $((SECONDS - t0)) s" ;;
    124) note "benchmarks: TIMED OUT after 80 s (exit 124); the JSON keeps what was measured" ;;
    *) note "benchmarks: exit $bench_rc after $((SECONDS - t0)) s (see benchmarks.log)" ;;
esac
latest="$(ls -t "$OUT_DIR"/benchmarks-*.json 2>/dev/null | head -n 1)"
if [[ -n "$latest" ]]; then
    note "benchmark results: $latest"
    timeout 10 "$PY" benchmarks/run_all.py --summarize "$latest" 2>&1 | tee -a "$SUMMARY"
else
    note "benchmark results: none written"
fi

# ------------------------------------------------------------------ 6. rnn
# LSTM/GRU against torch.nn.LSTM/GRU (cuDNN) on the same weights, every solver, with each
# row's error against PyTorch (a check of the kernels on the GPU even when the test step
# timed out before tests/test_rnn*.py). Its own step: after attention in step 5 it would
# fall to that step's timeout.
STEP="rnn"
echo "== rnn benchmark =="
t0=$SECONDS
timeout 50 "$PY" benchmarks/run_all.py --only rnn --out "$OUT_DIR/rnn" 2>&1 \
    | tee "$OUT_DIR/rnn.log"
rnn_rc=${PIPESTATUS[0]}
case $rnn_rc in
    0) note "rnn benchmark: done in $((SECONDS - t0)) s" ;;
    124) note "rnn benchmark: TIMED OUT after 50 s (exit 124); nothing written, see rnn.log" ;;
    *) note "rnn benchmark: exit $rnn_rc after $((SECONDS - t0)) s (see rnn.log)" ;;
esac
latest="$(ls -t "$OUT_DIR"/rnn/benchmarks-*.json 2>/dev/null | head -n 1)"
if [[ -n "$latest" ]]; then
    note "rnn results: $latest"
    timeout 10 "$PY" benchmarks/run_all.py --summarize "$latest" 2>&1 | tee -a "$SUMMARY"
fi

# ------------------------------------------------------------------ 7. report
# Step 5's JSON drawn: per-layer conv TFLOP/s against cuDNN, GB/s against copy, per-call
# overhead; a missing matplotlib leaves a page that says so. Never counts against the exit.
STEP="report"
latest="$(ls -t "$OUT_DIR"/benchmarks-*.json 2>/dev/null | head -n 1)"
if [[ -n "$latest" ]]; then
    echo "== benchmark report =="
    t0=$SECONDS
    timeout 30 "$PY" benchmarks/report.py "$latest" --out "$OUT_DIR/report" 2>&1 \
        | tee "$OUT_DIR/report.log"
    note "report: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s, in $OUT_DIR/report/"
fi

STEP="done"
overall=0
[[ $test_rc -ne 0 || $bench_rc -ne 0 || $rnn_rc -ne 0 ]] && overall=1
note ""
note "overall: $([[ $overall -eq 0 ]] && echo OK || echo 'NOT OK') (tests exit $test_rc, benchmarks exit $bench_rc, rnn exit $rnn_rc)"
exit $overall
