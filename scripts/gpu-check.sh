#!/usr/bin/env bash
# The one script to run on a GPU machine. Today it checks what needs real GPUs: `dtrain topo` (live NVML + sysfs)
# and `dtrain doctor` against nvidia-smi (scripts/gpu-topo-check.sh), the NCCL communicator's unit tests, and
# `dtrain bench allreduce --backend nccl`; the CUDA trainer checks join it when the CUDA backend exists. Prints one
# summary table; everything it wrote is under $OUT.
#
# A GPU machine may lack dtrain's build dependencies (gRPC, yaml-cpp, ...), so dtrain can come as a portable
# bundle made here by `scripts/gpu-check.sh --bundle DIR` (the binary and every library it loads but the C and
# C++ runtimes) and run there with `scripts/gpu-check.sh --run DIR`. With no option it uses the
# build tree's binary. Finishes in well under 8 minutes (about 20 s on an H200 machine).
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
  # Every library but the C and C++ runtimes, which the GPU machine has in a newer, compatible version (its NCCL
  # and driver libraries need that newer one); plus the CUDA runtime, which dtrain loads with dlopen for NCCL.
  ldd "$bin" "$tests" | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  cp -L /usr/local/cuda/lib64/libcudart.so.13 "$dir/lib/" 2>/dev/null || echo "no libcudart.so.13 to bundle" >&2
  cat >"$dir/dtrain" <<'WRAP'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/dtrain.bin" "$@"
WRAP
  chmod +x "$dir/dtrain"
  du -sh "$dir"
}

case "${1:-}" in
  --bundle) bundle "${2:?--bundle DIR}"; exit $? ;;
  --run) DTRAIN=$(cd "${2:?--run DIR}" && pwd)/dtrain ;;
  "") DTRAIN=${DTRAIN_BIN:-$root/${DTRAIN_BUILD_DIR:-build}/bin/dtrain} ;;
  *) echo "usage: scripts/gpu-check.sh [--bundle DIR | --run DIR]" >&2; exit 2 ;;
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

echo
echo "== summary ($(( $(date +%s) - start )) s)"
printf '%-34s %s\n' "check" "result"
printf '%-34s %s\n' "dtrain topo/doctor vs nvidia-smi" "$([ "$topo_rc" -eq 0 ] && echo pass || echo "FAIL (exit $topo_rc)")"
grep -E '^RESULT' "$OUT/compare.txt" 2>/dev/null | sed 's/^/  /'
printf '%-34s %s\n' "NCCL communicator unit tests" "$([ "$nccl_tests_rc" -eq 0 ] && echo pass || echo "FAIL (exit $nccl_tests_rc)")"
printf '%-34s %s\n' "dtrain bench allreduce --backend nccl" "$([ "$bench_rc" -eq 0 ] && echo pass || echo "FAIL (exit $bench_rc)")"
[ "$topo_rc" -eq 0 ] && [ "$nccl_tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
