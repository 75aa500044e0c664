#!/usr/bin/env bash
# The one script to run on a GPU machine. Today it checks what needs real GPUs: `dtrain topo` (live NVML + sysfs)
# and `dtrain doctor` against nvidia-smi (scripts/gpu-topo-check.sh), the NCCL communicator's unit tests,
# `dtrain bench allreduce --backend nccl`, and the CUDA compute backend: dtrain-kernel-check (every kernel against
# the CPU backend) and dtrain-kernel-perf (a GPT-2 124M bf16 step: tokens/s and MFU), when the build has them.
# Then dtrain-trainer --device cuda (scripts/gpu/trainer-check.sh): fp32 on the GPU against the CPU over 10 steps,
# bf16 against fp32, GPT-2 124M at T=1024 in bf16 (tokens/s, MFU), 2-rank DDP and ZeRO-3 over NCCL on one GPU.
# Prints one summary table and writes $OUT/gpu-results.md (what BENCHMARKS.md quotes); every other file it wrote is
# packed into $OUT/gpu-check-files.tar.gz (the device tool brings back at most 8 files). Every step runs under its
# own timeout. `--dry-run` lists each step (command and pass rule) without running any, on any machine.
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
  for tool in dtrain-kernel-check dtrain-kernel-perf dtrain-trainer; do
    [ -x "$(dirname "$bin")/$tool" ] || continue
    [ "$tool" = dtrain-trainer ] && { strip -o "$dir/$tool" "$(dirname "$bin")/$tool"; cuda_tools="$cuda_tools $(dirname "$bin")/$tool"; continue; }
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

dry_run=0
case "${1:-}" in
  --bundle) bundle "${2:?--bundle DIR}"; exit $? ;;
  --dry-run) dry_run=1; shift; [ "${1:-}" = --run ] && shift 2
             DTRAIN=${DTRAIN_BIN:-$root/${DTRAIN_BUILD_DIR:-build}/bin/dtrain} ;;
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
  *) echo "usage: scripts/gpu-check.sh [--bundle DIR | --run DIR | --run DIR.tar.xz | --dry-run]" >&2; exit 2 ;;
esac

# Where the tools are: beside the bundle's dtrain (with its lib/), or the build tree's bin/.
tools=$(dirname "$DTRAIN")
[ -x "$tools/dtrain-kernel-check" ] || tools=${DTRAIN_BUILD_DIR:-$root/build}/bin
if [ "$dry_run" -eq 1 ]; then WORK=${TMPDIR:-/tmp}/gpu-check.XXXX; else WORK=$(mktemp -d); fi
results=()  # "name|result|detail"

# step NAME PASS-RULE TIMEOUT CMD...: runs CMD (its output to the log and $WORK/NAME.txt) under TIMEOUT seconds and
# records pass/FAIL by its exit status (77: skipped, with the reason the command printed last); --dry-run prints it.
step() {
  local name=$1 rule=$2 limit=$3
  shift 3
  if [ "$dry_run" -eq 1 ]; then
    printf 'step %-22s [%ss] %s\n     pass: %s\n' "$name" "$limit" "$*" "$rule"
    return 0
  fi
  echo "== $name: $*"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$WORK/$name.txt"
  local rc=${PIPESTATUS[0]} result
  case $rc in
    0) result=pass ;;
    77) result="SKIPPED ($(grep -E 'SKIP' "$WORK/$name.txt" | tail -1 | cut -c1-150))" ;;
    124|137) result="FAIL (timed out after ${limit}s)" ;;
    *) result="FAIL (exit $rc)" ;;
  esac
  results+=("$name|$result|$(grep -E '^(RESULT|result:|kernel check:|tokens/s|step )' "$WORK/$name.txt" | head -4 | tr '\n' ';' | cut -c1-300)")
}

blas=$(cublas_dir 2>/dev/null)
kernel_env="LD_LIBRARY_PATH=$tools/lib${blas:+:$blas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start=$(date +%s)
if [ "$dry_run" -eq 0 ]; then
  echo "== machine"
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total --format=csv 2>&1 | tee "$WORK/gpus.csv"
  "$DTRAIN" --version
  echo "cuBLASLt from: ${blas:-not found (the kernel check will say what is missing)}"
fi
step topo-doctor "dtrain topo's live matrix equals nvidia-smi topo -m cell for cell; doctor runs" 120 \
  env OUT="$WORK/topo" "$root/scripts/gpu-topo-check.sh" "$DTRAIN"
step nccl-unit "unit_comm's NCCL cases pass on the GPU" 120 \
  env "$kernel_env" "$tools/unit_comm" -tc="*nccl*"
step nccl-bench "dtrain bench allreduce --backend nccl: 0 wrong at every size" 120 \
  "$DTRAIN" run -n 1 --logs-dir "$WORK/runs" -- "$DTRAIN" bench allreduce --backend nccl -b 1M -e 256M -f 4
step kernel-check "every CUDA kernel matches the CPU backend within its tolerance" 300 \
  env "$kernel_env" "$tools/dtrain-kernel-check"
step kernel-perf "one GPT-2 124M bf16 step runs (tokens/s, MFU)" 180 \
  env "$kernel_env" "$tools/dtrain-kernel-perf"
TRAINER_ENV="$kernel_env" DTRAIN="$DTRAIN" TRAINER="$tools/dtrain-trainer" WORK="$WORK" DRY_RUN=$dry_run \
  . "$root/scripts/gpu/trainer-check.sh"
[ "$dry_run" -eq 1 ] && exit 0

echo
echo "== summary ($(( $(date +%s) - start )) s)"
{
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
  for r in "${results[@]}"; do
    IFS='|' read -r name result detail <<<"$r"
    echo "| $name | $result | $detail |"
  done
} | tee "$OUT/gpu-results.md"
tar -C "$WORK" -czf "$OUT/gpu-check-files.tar.gz" . 2>/dev/null
rm -rf "$WORK"
! printf '%s\n' "${results[@]}" | grep -q '|FAIL'
