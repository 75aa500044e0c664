#!/usr/bin/env bash
# The one script to run on a GPU machine. It checks what needs real GPUs: `dtrain topo` (live NVML + sysfs) and
# `dtrain doctor` against nvidia-smi (scripts/gpu-topo-check.sh), the NCCL communicator's unit tests,
# `dtrain bench allreduce --backend nccl`, and the CUDA compute backend: dtrain-kernel-check (every kernel against
# the CPU backend) and dtrain-kernel-perf (a GPT-2 124M bf16 step: tokens/s and MFU), when the build has them.
# Then dtrain-trainer --device cuda (scripts/gpu/trainer-check.sh): fp32 on the GPU against the CPU over 10 steps,
# bf16 against fp32, GPT-2 124M at T=1024 in bf16 (tokens/s, MFU), 2-rank DDP and ZeRO-3 over NCCL on one GPU.
#
# It leaves three files in $OUT, so that a remote run that brings back only a few gets everything:
# $OUT/gpu-check.log (everything printed), $OUT/gpu-results.md (the machine and one summary table: what
# BENCHMARKS.md quotes) and $OUT/gpu-check-files.tar.gz (every other file the steps wrote: each step's output, the
# --metrics files, dtrain topo's and doctor's outputs).
# Every step runs under its own timeout, and the whole run under GPU_CHECK_BUDGET_S (default 300 s): a step's
# timeout is cut to what is left of it, and a step with under 15 s left is not started (NOT RUN, which fails the run
# as a FAIL does). The whole run took 44-48 s on an H200 machine (BENCHMARKS.md, "The GPU run"). `--dry-run`
# prints each step (the exact command and its pass rule, from the same definitions the run uses) without running any,
# on any machine, and exits 0.
#
# A GPU machine may lack dtrain's build dependencies (gRPC, yaml-cpp, ...), so dtrain can come as a portable
# bundle made here by `scripts/gpu-check.sh --bundle DIR` (the binaries and every library they load but the C and
# C++ runtimes) and run there with `scripts/gpu-check.sh --run DIR`. --bundle also packs DIR.tar.xz (about a fifth
# of DIR, which with OpenBLAS for the kernel check's CPU reference is over 64 MiB), and --run takes that file too,
# unpacking it into a temporary directory. With no option it uses the build tree's binaries.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/out}
build=${DTRAIN_BUILD_DIR:-build}
[ "${build#/}" = "$build" ] && build=$root/$build
usage="usage: scripts/gpu-check.sh [--bundle DIR | --run DIR | --run DIR.tar.xz | --dry-run [--run DIR]]"

bundle() {
  local dir=$1 bin=${DTRAIN_BIN:-$build/bin/dtrain}
  local bindir
  bindir=$(dirname "$bin")
  rm -rf "$dir" && mkdir -p "$dir/lib"
  strip -o "$dir/dtrain.bin" "$bin"
  # unit_comm (the NCCL cases), dtrain-trainer, and the CUDA backend's checks when this build has them
  # (DTRAIN_WITH_CUDA). cuBLASLt (half a gigabyte) is not bundled: --run finds the GPU machine's own (cublas_dir).
  local bins=("$bin") tool
  for tool in unit_comm dtrain-trainer dtrain-kernel-check dtrain-kernel-perf; do
    [ -x "$bindir/$tool" ] || { echo "bundle: no $bindir/$tool (its steps will fail there)" >&2; continue; }
    strip -o "$dir/$tool" "$bindir/$tool"
    bins+=("$bindir/$tool")
  done
  # Every library but the C and C++ runtimes, which the GPU machine has in a newer, compatible version (its NCCL
  # and driver libraries need that newer one); plus the CUDA runtime, which dtrain loads with dlopen for NCCL.
  ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u |
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

dry_run=0 from=""
case "${1:-}" in
  --bundle) bundle "${2:?--bundle DIR}"; exit $? ;;
  --dry-run)
    dry_run=1
    case "${2:-}" in
      "") ;;
      --run) from=${3:?--dry-run --run DIR or DIR.tar.xz} ;;
      *) echo "$usage" >&2; exit 2 ;;
    esac ;;
  --run) from=${2:?--run DIR or DIR.tar.xz} ;;
  "") ;;
  *) echo "$usage" >&2; exit 2 ;;
esac

# dtrain: the bundle's wrapper (its tools beside it, with its lib/), or the build tree's binary.
if [ -z "$from" ]; then
  DTRAIN=${DTRAIN_BIN:-$build/bin/dtrain}
elif [ "$dry_run" -eq 1 ] && [ -f "$from" ]; then
  DTRAIN=${TMPDIR:-/tmp}/tmp.XXXX/$(basename "$from" .tar.xz)/dtrain  # where --run would unpack it
elif [ -f "$from" ]; then
  unpacked=$(mktemp -d)
  trap 'rm -rf "$unpacked"' EXIT
  tar -xJf "$from" -C "$unpacked" || exit 2
  DTRAIN=$(find "$unpacked" -mindepth 2 -maxdepth 2 -name dtrain | head -1)
  [ -n "$DTRAIN" ] || { echo "gpu-check: $from holds no */dtrain" >&2; exit 2; }
elif [ -x "$from/dtrain" ]; then
  DTRAIN=$(cd "$from" && pwd)/dtrain
elif [ "$dry_run" -eq 1 ]; then
  DTRAIN=$from/dtrain
else
  echo "gpu-check: no bundle in $from (make one with --bundle)" >&2
  exit 2
fi
tools=$(dirname "$DTRAIN")
[ -n "$from" ] || [ -x "$tools/dtrain-trainer" ] || tools=$build/bin
if [ "$dry_run" -eq 1 ]; then WORK=${TMPDIR:-/tmp}/gpu-check.XXXX; else WORK=$(mktemp -d); fi
budget=${GPU_CHECK_BUDGET_S:-300}
results=()  # "name|result|detail"

# The lines of a step's output that say what it found: its result line, else the trainer's last step or error, the
# kernel tools' and doctest's summaries, the launcher's last word, else its last line; without the log's time stamps,
# and '|' made ',' (the table's separator).
detail() {
  local d
  d=$(grep -E '^(RESULT|result:|SKIPPED)' "$1" | tail -2)
  [ -n "$d" ] || d=$(grep -E '^(kernel check:|tokens/s |\[doctest\] test cases)|\] (step [0-9]+/[0-9]+ |wrote [0-9]+ tokens)|^dtrain: job .* (finished|failed)' "$1" | tail -1
                     grep -E '\[(error|critical)\]' "$1" | tail -1)
  [ -n "$d" ] || d=$(grep -v '^[[:space:]]*$' "$1" | tail -1)
  printf '%s\n' "$d" | sed -E 's/^[[:space:]|]*(\[[0-9]+\] )?(\[[0-9-]+ [0-9:.]+\] )?(\[info\] )?//' | grep . |
    tr '\n|' ';,' | sed 's/;$//' | cut -c1-300
}

# step NAME PASS-RULE TIMEOUT CMD...: runs CMD (its output to the log and $WORK/NAME.txt) under TIMEOUT seconds, cut
# to what is left of the budget, and records pass/FAIL by its exit status (77: skipped, with the reason the command
# printed last); with --dry-run it prints the command (quoted as a shell would need it) and its pass rule instead.
step() {
  local name=$1 rule=$2 limit=$3
  shift 3
  if [ "$dry_run" -eq 1 ]; then
    printf 'step %-22s [%ss]' "$name" "$limit"
    printf ' %q' "$@"
    printf '\n     pass: %s\n' "$rule"
    return 0
  fi
  local left=$((deadline - $(date +%s)))
  if [ "$left" -lt 15 ]; then
    echo "== $name: not started, ${left} s of the ${budget} s budget left"
    results+=("$name|NOT RUN (the ${budget} s budget was spent)|")
    return 0
  fi
  [ "$limit" -le "$left" ] || limit=$left
  echo "== $name ($(( $(date +%s) - start )) s in, timeout ${limit} s): $*"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$WORK/$name.txt"
  local rc=${PIPESTATUS[0]} result
  case $rc in
    0) result=pass ;;
    77) result="SKIPPED ($(grep -E 'SKIP' "$WORK/$name.txt" | tail -1 | cut -c1-150 | tr '|' ','))" ;;
    124|137) result="FAIL (timed out after ${limit}s)" ;;
    *) result="FAIL (exit $rc)" ;;
  esac
  echo "== $name: $result"
  results+=("$name|$result|$(detail "$WORK/$name.txt")")
}

checks() {
  local blas kernel_env
  blas=$(cublas_dir 2>/dev/null)
  kernel_env="LD_LIBRARY_PATH=$tools/lib${blas:+:$blas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [ "$dry_run" -eq 1 ]; then
    echo "gpu-check --dry-run: each step below runs under its own timeout, all within a ${budget} s budget" \
         "(GPU_CHECK_BUDGET_S); work directory $WORK; results in $OUT/gpu-results.md"
  else
    echo "== machine"
    nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total --format=csv 2>&1 | tee "$WORK/gpus.csv"
    "$DTRAIN" --version
    echo "dtrain: $DTRAIN; tools: $tools; cuBLASLt from: ${blas:-not found (the kernel check will say what is missing)}"
  fi
  step topo-doctor "dtrain topo's live matrix equals nvidia-smi topo -m cell for cell; doctor runs" 60 \
    env OUT="$WORK/topo" "$root/scripts/gpu-topo-check.sh" "$DTRAIN"
  step nccl-unit "unit_comm's NCCL cases pass on the GPU" 120 \
    env "$kernel_env" "$tools/unit_comm" -tc="*nccl*"
  step nccl-bench "dtrain bench allreduce --backend nccl: 0 wrong at every size" 120 \
    "$DTRAIN" run -n 1 --logs-dir "$WORK/runs" -- "$DTRAIN" bench allreduce --backend nccl -b 1M -e 256M -f 4
  step kernel-check "every CUDA kernel matches the CPU backend within its tolerance" 180 \
    env "$kernel_env" "$tools/dtrain-kernel-check"
  step kernel-perf "one GPT-2 124M bf16 step runs (tokens/s, MFU)" 120 \
    env "$kernel_env" "$tools/dtrain-kernel-perf"
  # shellcheck source=scripts/gpu/trainer-check.sh
  TRAINER_ENV="$kernel_env" TRAINER="$tools/dtrain-trainer" . "$root/scripts/gpu/trainer-check.sh"
  [ "$dry_run" -eq 1 ] && return 0

  echo
  echo "== summary ($(( $(date +%s) - start )) s)"
  local r name result detail
  {
    echo "# scripts/gpu-check.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 |
                 grep . || echo 'none (nvidia-smi lists no GPU)');" \
         "$("$DTRAIN" --version 2>&1 | head -1); $(nproc) CPUs; $(( $(date +%s) - start )) s of a ${budget} s budget"
    echo
    echo "| check | result | detail |"
    echo "| --- | --- | --- |"
    for r in "${results[@]}"; do
      IFS='|' read -r name result detail <<<"$r"
      echo "| $name | $result | $detail |"
    done
  } | tee "$OUT/gpu-results.md"
  tar -C "$WORK" -czf "$OUT/gpu-check-files.tar.gz" --exclude='./tokens.*' . 2>/dev/null
  ! printf '%s\n' "${results[@]}" | grep -qE '[|](FAIL|NOT RUN)'
}

start=$(date +%s)
deadline=$((start + budget))
if [ "$dry_run" -eq 1 ]; then
  checks
  exit 0
fi
mkdir -p "$OUT"
checks 2>&1 | tee "$OUT/gpu-check.log"
rc=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$rc"
