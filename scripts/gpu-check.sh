#!/usr/bin/env bash
# The one script to run on a GPU machine. Today it checks what needs real GPUs: `dtrain topo` (live NVML + sysfs)
# and `dtrain doctor` against nvidia-smi (scripts/gpu-topo-check.sh), the NCCL communicator's unit tests,
# `dtrain bench allreduce --backend nccl`, and the CUDA compute backend: dtrain-kernel-check (every kernel against
# the CPU backend) and dtrain-kernel-perf (a GPT-2 124M bf16 step: tokens/s and MFU), when the build has them.
# Prints one summary table; everything it wrote is under $OUT.
#
# A GPU machine may lack dtrain's build dependencies (gRPC, yaml-cpp, ...), so dtrain can come as a portable
# bundle made here by `scripts/gpu-check.sh --bundle DIR` (the binary and every library it loads but the C and
# C++ runtimes) and run there with `scripts/gpu-check.sh --run DIR`. --bundle also packs DIR.tar.xz (about a fifth
# of DIR, which with OpenBLAS for the kernel check's CPU reference is over 64 MiB), and --run takes that file too,
# unpacking it into a temporary directory. With no option it uses the build tree's binary. Finishes in well under 8 minutes (about 20 s on an H200 machine).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"

bundle() {
  local dir=$1 bin=${DTRAIN_BIN:-$root/${DTRAIN_BUILD_DIR:-build}/bin/dtrain}
  rm -rf "$dir" && mkdir -p "$dir/lib"
  local tests
  tests=$(dirname "$bin")/unit_comm
  strip -o "$dir/dtrain.bin" "$bin"
  strip -o "$dir/unit_comm" "$tests"
  # The CUDA backend's checks, when this build has them (DTRAIN_WITH_CUDA). cuBLASLt (half a gigabyte) is not
  # bundled: --run finds the GPU machine's own (cublas_dir below).
  local cuda_tools=""
  for tool in dtrain-kernel-check dtrain-kernel-perf; do
    [ -x "$(dirname "$bin")/$tool" ] || continue
    strip -o "$dir/$tool" "$(dirname "$bin")/$tool"
    cuda_tools="$cuda_tools $(dirname "$bin")/$tool"
  done
  # Every library but the C and C++ runtimes, which the GPU machine has in a newer, compatible version (its NCCL
  # and driver libraries need that newer one); plus the CUDA runtime, which dtrain loads with dlopen for NCCL.
  # shellcheck disable=SC2086 # cuda_tools is a list of paths without spaces
  ldd "$bin" "$tests" $cuda_tools | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  cp -L /usr/local/cuda/lib64/libcudart.so.13 "$dir/lib/" 2>/dev/null || echo "no libcudart.so.13 to bundle" >&2
  cat >"$dir/dtrain" <<'WRAP'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/dtrain.bin" "$@"
WRAP
  chmod +x "$dir/dtrain"
  tar -C "$(dirname "$dir")" -cf - "$(basename "$dir")" | xz -T0 -6 >"$dir.tar.xz"
  du -sh "$dir" "$dir.tar.xz"
}

# The directory of the GPU machine's libcublasLt.so.13 (the CUDA backend loads it with dlopen): the CUDA
# installation's, the linker cache's, or a Python wheel's (nvidia-cublas); nothing when there is none.
cublas_dir() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libcublasLt.so.13" ] && { echo "$d"; return; }
  done
  d=$(ldconfig -p 2>/dev/null | awk '/libcublasLt\.so\.13 / {print $NF; exit}')
  [ -n "$d" ] && { dirname "$d"; return; }
  python3 - <<'PY' 2>/dev/null
import glob, os, sys
for path in sys.path:
    for lib in glob.glob(os.path.join(path, "nvidia", "*", "lib", "libcublasLt.so.13")):
        print(os.path.dirname(lib))
        sys.exit()
PY
}

case "${1:-}" in
  --bundle) bundle "${2:?--bundle DIR}"; exit $? ;;
  --run)
    from=${2:?--run DIR or DIR.tar.xz}
    if [ -f "$from" ]; then
      unpacked=$(mktemp -d)
      trap 'rm -rf "$unpacked"' EXIT
      tar -xJf "$from" -C "$unpacked" || exit 2
      from=$(find "$unpacked" -mindepth 2 -maxdepth 2 -name dtrain -printf '%h\n' | head -1)
    fi
    DTRAIN=$(cd "$from" && pwd)/dtrain ;;
  "") DTRAIN=${DTRAIN_BIN:-$root/${DTRAIN_BUILD_DIR:-build}/bin/dtrain} ;;
  *) echo "usage: scripts/gpu-check.sh [--bundle DIR | --run DIR | --run DIR.tar.xz]" >&2; exit 2 ;;
esac

start=$(date +%s)
echo "== machine"
nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total --format=csv 2>&1 | tee "$OUT/gpus.csv"
"$DTRAIN" --version
OUT="$OUT" "$root/scripts/gpu-topo-check.sh" "$DTRAIN" 2>&1 | tee "$OUT/topo-check.log"
topo_rc=${PIPESTATUS[0]}

echo "== NCCL communicator: unit tests on the GPU, then dtrain bench through it"
comm_tests=$(dirname "$DTRAIN")/unit_comm
[ -x "$comm_tests" ] || comm_tests=${DTRAIN_BUILD_DIR:-$root/build}/bin/unit_comm
if [ -f "$(dirname "$DTRAIN")/lib/libcudart.so.13" ]; then
  LD_LIBRARY_PATH="$(dirname "$DTRAIN")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$comm_tests" -tc="*nccl*" 2>&1 | tail -4
  nccl_tests_rc=${PIPESTATUS[0]}
else
  "$comm_tests" -tc="*nccl*" 2>&1 | tail -4
  nccl_tests_rc=${PIPESTATUS[0]}
fi
(cd "$OUT" && "$DTRAIN" run -n 1 -- "$DTRAIN" bench allreduce --backend nccl -b 1M -e 256M -f 4) 2>&1 | tee "$OUT/bench-nccl.txt"
bench_rc=${PIPESTATUS[0]}

echo "== CUDA backend: every kernel against the CPU backend, then one GPT-2 124M bf16 step (tokens/s, MFU)"
tools=$(dirname "$DTRAIN")
[ -x "$tools/dtrain-kernel-check" ] || tools=${DTRAIN_BUILD_DIR:-$root/build}/bin
blas=$(cublas_dir)
echo "cuBLASLt from: ${blas:-not found (the kernel check will say what is missing)}"
kernel_env="LD_LIBRARY_PATH=$tools/lib${blas:+:$blas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -x "$tools/dtrain-kernel-check" ]; then
  env "$kernel_env" "$tools/dtrain-kernel-check" 2>&1 | tee "$OUT/kernel-check.txt"
  kernel_rc=${PIPESTATUS[0]}
  env "$kernel_env" "$tools/dtrain-kernel-perf" 2>&1 | tee "$OUT/kernel-perf.txt"
  perf_rc=${PIPESTATUS[0]}
else
  echo "no dtrain-kernel-check in $tools: this build has no CUDA backend (DTRAIN_WITH_CUDA)" | tee "$OUT/kernel-check.txt"
  kernel_rc=77 perf_rc=77
fi
# Exit 77 is "no GPU visible": a skip where there is none, a failure where nvidia-smi lists one.
gpu_listed=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
cuda_result() {  # exit status -> table cell
  case $1 in
    0) echo pass ;;
    77) [ "$gpu_listed" -gt 0 ] && echo "FAIL (SKIPPED although nvidia-smi lists a GPU)" || echo "SKIPPED (no GPU)" ;;
    *) echo "FAIL (exit $1)" ;;
  esac
}

echo
echo "== summary ($(( $(date +%s) - start )) s)"
printf '%-34s %s\n' "check" "result"
printf '%-34s %s\n' "dtrain topo/doctor vs nvidia-smi" "$([ "$topo_rc" -eq 0 ] && echo pass || echo "FAIL (exit $topo_rc)")"
grep -E '^RESULT' "$OUT/compare.txt" 2>/dev/null | sed 's/^/  /'
printf '%-34s %s\n' "NCCL communicator unit tests" "$([ "$nccl_tests_rc" -eq 0 ] && echo pass || echo "FAIL (exit $nccl_tests_rc)")"
printf '%-34s %s\n' "dtrain bench allreduce --backend nccl" "$([ "$bench_rc" -eq 0 ] && echo pass || echo "FAIL (exit $bench_rc)")"
printf '%-34s %s\n' "CUDA kernels vs CPU backend" "$(cuda_result "$kernel_rc")"
grep -E '^(FAIL|kernel check:)' "$OUT/kernel-check.txt" 2>/dev/null | sed 's/^/  /'
printf '%-34s %s\n' "CUDA GPT-2 124M bf16 step" "$(cuda_result "$perf_rc")"
grep -E '^(step|tokens/s)' "$OUT/kernel-perf.txt" 2>/dev/null | sed 's/^/  /'
cuda_ok() { [ "$1" -eq 0 ] || { [ "$1" -eq 77 ] && [ "$gpu_listed" -eq 0 ]; }; }
[ "$topo_rc" -eq 0 ] && [ "$nccl_tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && cuda_ok "$kernel_rc" && cuda_ok "$perf_rc"
