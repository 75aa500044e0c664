#!/usr/bin/env bash
# The one script to run on a GPU machine. Today it checks what needs real GPUs: `dtrain topo` (live NVML + sysfs)
# and `dtrain doctor` against nvidia-smi, through scripts/gpu-topo-check.sh; the CUDA trainer checks join it when
# the CUDA backend exists. Prints one summary table; everything it wrote is under $OUT.
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
  strip -o "$dir/dtrain.bin" "$bin"
  # Every library but the C and C++ runtimes, which the GPU machine has in a newer, compatible version (its NCCL
  # and driver libraries need that newer one).
  ldd "$bin" | awk '/=> \// {print $3}' | grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
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

echo
echo "== summary ($(( $(date +%s) - start )) s)"
printf '%-34s %s\n' "check" "result"
printf '%-34s %s\n' "dtrain topo/doctor vs nvidia-smi" "$([ "$topo_rc" -eq 0 ] && echo pass || echo "FAIL (exit $topo_rc)")"
grep -E '^RESULT' "$OUT/compare.txt" 2>/dev/null | sed 's/^/  /'
exit "$topo_rc"
