#!/usr/bin/env bash
# Checks `dtrain topo` and `dtrain doctor` on a GPU machine against nvidia-smi. Usage:
#   OUT=/tmp/out scripts/gpu-topo-check.sh [path/to/dtrain]
# Saves everything under $OUT (default /tmp/out): nvidia-smi's matrix, dtrain's live, JSON and imported forms,
# doctor's JSON and table, and compare.txt (the live matrix cell by cell against nvidia-smi's). Every step runs
# even when an earlier one failed; the last lines say which failed. Exit 0 only when every step worked and every
# cell matched.
set -u

DTRAIN=${1:-${DTRAIN_BIN:-build/bin/dtrain}}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
failed=()

# step NAME CMD...: runs CMD with stdout to $OUT/NAME, stderr to $OUT/NAME.err; records a non-zero exit.
step() {
  local name=$1
  shift
  echo "== $name: $*"
  "$@" >"$OUT/$name" 2>"$OUT/$name.err"
  local rc=$?
  echo "   exit $rc ($(wc -c <"$OUT/$name") bytes)"
  [ -s "$OUT/$name.err" ] && sed 's/^/   stderr: /' "$OUT/$name.err" | head -5
  [ $rc -eq 0 ] || failed+=("$name (exit $rc)")
  return $rc
}

json_ok() {
  if /usr/bin/env python3 -m json.tool "$OUT/$1" >/dev/null 2>"$OUT/$1.invalid"; then
    echo "   $1: valid JSON"
    rm -f "$OUT/$1.invalid"
  else
    echo "   $1: NOT valid JSON: $(head -1 "$OUT/$1.invalid")"
    failed+=("$1 (invalid JSON)")
  fi
}

if [ ! -x "$DTRAIN" ]; then
  echo "gpu-topo-check: $DTRAIN is not an executable dtrain binary (pass its path as the first argument)" >&2
  exit 2
fi

step nvsmi.txt nvidia-smi topo -m
step nvsmi-version.txt nvidia-smi --version
step nvsmi-q.txt nvidia-smi -q
step topo.txt "$DTRAIN" topo
step topo.json "$DTRAIN" topo --json && json_ok topo.json
step import.txt "$DTRAIN" topo --import "$OUT/nvsmi.txt"
step import.json "$DTRAIN" topo --import "$OUT/nvsmi.txt" --json && json_ok import.json
# doctor exits 1 when a check fails: a finding about this node, not a failure of this script.
echo "== doctor.json: $DTRAIN doctor --json"
"$DTRAIN" doctor --json >"$OUT/doctor.json" 2>"$OUT/doctor.json.err"
doctor_rc=$?
echo "   exit $doctor_rc (0 = no check failed, 1 = some check failed on this node)"
[ "$doctor_rc" -le 1 ] || failed+=("doctor.json (exit $doctor_rc)")
json_ok doctor.json
"$DTRAIN" doctor >"$OUT/doctor.txt" 2>"$OUT/doctor.txt.err"
doctor_table_rc=$?
[ "$doctor_table_rc" -eq "$doctor_rc" ] || failed+=("doctor table exit $doctor_table_rc differs from --json exit $doctor_rc")

echo "== compare: nvidia-smi topo -m against dtrain topo (live) and dtrain topo --import"
/usr/bin/env python3 - "$OUT" >"$OUT/compare.txt" 2>&1 <<'PY'
import json, os, re, sys

out = sys.argv[1]

def parse(path):
    """The matrix of an nvidia-smi-style text: {(row, col): cell}, per-GPU affinity columns, NIC legend."""
    # Recent drivers underline the header with terminal escapes, even into a file.
    lines = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", open(path).read()).splitlines()
    start = next((i for i, l in enumerate(lines) if "CPU Affinity" in l), None)
    if start is None:
        raise ValueError("no line with a 'CPU Affinity' header")
    header = lines[start]
    labels = header[: header.index("CPU Affinity")].split()
    cells, extra = {}, {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        f = line.split()
        for col, cell in zip(labels, f[1: 1 + len(labels)]):
            cells[(f[0], col)] = cell
        if f[0].startswith("GPU"):
            extra[f[0]] = f[1 + len(labels):]
    legend, in_legend = {}, False
    for line in lines:
        p = line.split()
        if p == ["NIC", "Legend:"]:
            in_legend = True
        elif in_legend and not p:
            continue
        elif in_legend and len(p) == 2 and p[0].endswith(":") and p[0][:-1] in labels:
            legend[p[0][:-1]] = p[1]
        elif in_legend:
            break
    name = lambda l: legend.get(l, l)
    return {(name(r), name(c)): v for (r, c), v in cells.items()}, extra, [name(l) for l in labels]

ref, ref_extra, ref_labels = parse(os.path.join(out, "nvsmi.txt"))
print("nvidia-smi: %d columns: %s" % (len(ref_labels), " ".join(ref_labels)))
bad = 0
for which in ("topo.txt", "import.txt"):
    try:
        got, got_extra, got_labels = parse(os.path.join(out, which))
    except Exception as e:
        print("%s: no matrix (%s)" % (which, e))
        bad += 1
        continue
    missing = [l for l in ref_labels if l not in got_labels]
    extra_cols = [l for l in got_labels if l not in ref_labels]
    same = [k for k in ref if got.get(k) == ref[k]]
    differ = [k for k in ref if k in got and got[k] != ref[k]]
    print("%s: %d of %d cells match; %d differ; columns missing %s, extra %s" %
          (which, len(same), len(ref), len(differ), missing, extra_cols))
    for k in differ:
        print("  MISMATCH %s/%s: nvidia-smi %s, dtrain %s" % (k[0], k[1], ref[k], got[k]))
    for gpu, values in ref_extra.items():
        if got_extra.get(gpu) != values:
            print("  MISMATCH %s affinity columns: nvidia-smi %s, dtrain %s" % (gpu, values, got_extra.get(gpu)))
            bad += 1
        else:
            print("  match %s affinity columns %s" % (gpu, values))
    bad += len(differ) + len(missing) + len(extra_cols)
for which in ("topo.json", "import.json"):
    try:
        data = json.load(open(os.path.join(out, which)))
        print("%s: gpus %s; local ranks %s; warnings %s" % (which, [(g["index"], g["name"], g["pci"], g["numa"],
              g["cpu_affinity"], g["nics"]) for g in data["gpus"]], [(r["local_rank"], r["nic"], r["cpus"], r["numa"],
              r["env"]) for r in data["local_ranks"]], data["warnings"]))
    except Exception as e:
        print("%s: unreadable (%s)" % (which, e))
        bad += 1
print("RESULT: %s" % ("all cells match" if bad == 0 else "%d mismatch(es)" % bad))
sys.exit(1 if bad else 0)
PY
compare_rc=$?
cat "$OUT/compare.txt"
[ $compare_rc -eq 0 ] || failed+=("compare (see compare.txt)")

echo "== doctor findings"
/usr/bin/env python3 -c '
import json, sys
for c in json.load(open(sys.argv[1]))["checks"]:
    print("  %-20s %-5s %s" % (c["id"], c["status"], c["message"]))
' "$OUT/doctor.json" 2>&1 | tee "$OUT/doctor-summary.txt"

if [ ${#failed[@]} -eq 0 ]; then
  echo "gpu-topo-check: all steps worked; files in $OUT"
  exit 0
fi
echo "gpu-topo-check: failed: ${failed[*]}; files in $OUT"
exit 1
