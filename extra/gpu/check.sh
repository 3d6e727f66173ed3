#!/usr/bin/env bash
# extra/gpu/check.sh [--dry-run]: the GPU checks in one command, for a GPU machine that may have no network and only
# minutes to give (issue 27). It installs the wheels of .gpu_wheels/ (made by extra/gpu/prepare.sh) into a folder of
# its own, prints nvidia-smi and the versions that matter, runs the tests marked gpu (test/test_gpu.py) on CUDA, then
# extra/bench/gpu.py next to torch in the same process, within about 8 minutes in all.
#
# It writes, into $OUT when set (else a new folder under /tmp, named at the end):
#   check.log     everything printed
#   tests.xml     the tests, one by one, with their times (JUnit XML)
#   figures.json  the benchmark: per item the lazytensor figures by BEAM width, torch's, and their ratio
# Its exit status is 0 when the tests passed and the benchmark ran, 1 otherwise (2: bad arguments, 3: no pycuda).
#
# --dry-run: the same script on a machine without a GPU: no wheels, DEV=CUDACPU (the CUDA source run on the CPU) in
# place of CUDA, a few of the tests and one benchmark item at a small size (test/test_gpu_kit.py runs it in CI).
# Knobs: PYTHON (default python3), CACHEDIR (default: a new, empty one, so that every kernel is compiled).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-python3}"
BUDGET_S=465       # the whole run, of the 8 minutes a run may take on the GPU machine
TESTS_MAX_S=300    # the tests' share at most; the benchmark gets what is left
TEST_TIMEOUT_S=180 # one test at most (pytest-timeout, where installed)
# the dry run's tests: a few of each kind, quick on CUDACPU (a test renamed fails the dry run, and so CI)
DRY_RUN_TESTS=("test_op_family[elementwise_chain]" "test_op_family[softmax]" "test_op_family[scatter_index_add]"
               test_kernel_counts "test_matmul_on_tensor_cores[float16]" test_scatters_are_atomic_updates
               test_sharded_ops_and_collectives)

section() { printf '\n==== %s (%ds)\n' "$1" "$SECONDS"; }

install_wheels() {  # pycuda and what it needs, from .gpu_wheels, into a folder put first on PYTHONPATH
  local site="${TMPDIR:-/tmp}/lt-gpu-site"
  if compgen -G "$ROOT/.gpu_wheels/*.whl" > /dev/null; then
    rm -rf "$site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$ROOT"/.gpu_wheels/*.whl \
      || return 3
    export PYTHONPATH="$site:$PYTHONPATH"
    echo "installed into $site: $(ls "$ROOT/.gpu_wheels" | tr '\n' ' ')"
  elif ! "$PY" -c "import pycuda" 2> /dev/null; then
    echo "no .gpu_wheels/ and no pycuda: run extra/gpu/prepare.sh on a CPU machine and carry .gpu_wheels" >&2
    return 3
  fi
}

versions() {
  "$PY" - << 'EOF'
import importlib, platform, sys
print(f"python {platform.python_version()} at {sys.executable}")
for name in ("numpy", "llvmlite", "torch", "pycuda", "pytest", "xdist", "pytest_timeout"):
  try: mod = importlib.import_module(name)
  except Exception as e: print(f"{name}: not importable ({type(e).__name__})"); continue
  print(f"{name} {getattr(mod, '__version__', getattr(mod, 'VERSION_TEXT', '?'))}")
try:
  import torch
  print(f"torch: CUDA {torch.version.cuda}, GPU available {torch.cuda.is_available()}")
except ImportError: pass
EOF
  command -v nvcc > /dev/null && nvcc --version | tail -2
}

open_device() {  # what lazytensor opens (the GPU, its architecture, the compiler it chose: NVRTC or nvcc), and one
  # kernel run on it, so that a device that cannot run anything shows one clear traceback before the tests
  "$PY" - "$DEV" << 'EOF'
import sys
from lazytensor import Device, Tensor
dev = Device[sys.argv[1]]
gpu = f"{dev.gpu.name()}, compute capability {dev.gpu.compute_capability()}, " if hasattr(dev, "gpu") else ""
print(f"{dev.name}: {gpu}compiler {type(dev.compiler).__name__} ({dev.compiler.cache_key})")
print(f"a first kernel: (arange(6) * 2).sum() = {(Tensor.arange(6, device=dev.name) * 2).sum().item()} (30 expected)")
EOF
}

run_tests() {
  local args=(-m gpu -q -p no:cacheprovider -rfEs --durations=10 --junitxml="$OUT_DIR/tests.xml") name
  "$PY" -c "import pytest_timeout" 2> /dev/null && args+=(--timeout "$TEST_TIMEOUT_S")
  if ((DRY)); then
    for name in "${DRY_RUN_TESTS[@]}"; do args+=("$ROOT/test/test_gpu.py::$name"); done
  else args+=(-n 8 "$ROOT/test/test_gpu.py"); fi  # 8 of the H200 machine's 16 cores: the rest for BEAM's workers
  (cd "$ROOT" && timeout "$TESTS_MAX_S" "$PY" -m pytest "${args[@]}")
}

run_bench() {
  local args=(--device "$DEV" --json "$OUT_DIR/figures.json") left=$((BUDGET_S - SECONDS))
  ((DRY)) && args+=(--quick --beam 0 --only elementwise)
  if ((left < 30)); then echo "no time left for the benchmark" >&2; return 1; fi
  # figures are written as they come: a benchmark cut short keeps the items it finished (BEAM's searches run last)
  timeout "$left" "$PY" "$ROOT/extra/bench/gpu.py" "${args[@]}"
}

main() {
  echo "extra/gpu/check.sh$( ((DRY)) && echo " --dry-run") on $(uname -n), $(date -u +%FT%TZ), writing to $OUT_DIR"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 DEV
  section "machine"
  if ((DRY)); then echo "dry run: DEV=CUDACPU, no wheels"; else
    install_wheels || return 3
    nvidia-smi || echo "nvidia-smi failed"
  fi
  versions
  section "device"
  open_device || return 1
  section "tests (pytest -m gpu)"
  run_tests
  local tests_rc=$?
  section "benchmark (extra/bench/gpu.py)"
  run_bench
  local bench_rc=$?
  section "done"
  echo "tests: exit status $tests_rc; benchmark: exit status $bench_rc; files in $OUT_DIR: $(ls "$OUT_DIR" | tr '\n' ' ')"
  ((tests_rc == 0 && bench_rc == 0))
}

case "${1:-}" in
  "") DRY=0 DEV=CUDA ;;
  --dry-run) DRY=1 DEV=CUDACPU ;;
  *) echo "usage: extra/gpu/check.sh [--dry-run]" >&2; exit 2 ;;
esac
OUT_DIR="${OUT:-$(mktemp -d /tmp/lt-gpu-check.XXXXXX)}"
mkdir -p "$OUT_DIR"
export CACHEDIR="${CACHEDIR:-$(mktemp -d /tmp/lt-gpu-cache.XXXXXX)}"
main 2>&1 | tee "$OUT_DIR/check.log"
exit "${PIPESTATUS[0]}"
