"""Reads dtrain-trainer --metrics files for scripts/gpu-check.sh.
  compare_losses.py rel TOL A.jsonl B.jsonl    every step's |a - b| / |b| <= TOL
  compare_losses.py abs TOL A.jsonl B.jsonl    every step's |a - b| <= TOL
  compare_losses.py rel-tail TOL A.jsonl B.jsonl   as rel, A's steps against the same steps of B (A resumed)
  compare_losses.py rate RUN.jsonl PARAMS LAYERS CHANNELS SEQ PEAK
      the median tokens/s of the steps after the first 5, and MFU = tokens/s x (6 PARAMS + 12 LAYERS CHANNELS SEQ)
      / PEAK (PaLM's count, as dtrain-trainer's own; PEAK in FLOP/s)
Prints one "result:" line; exits 1 when a tolerance is missed or a file has no steps.
"""

import json
import statistics
import sys


def steps(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv):
    if argv[0] == "rate":
        rows = steps(argv[1])[5:]
        params, layers, channels, seq, peak = (float(v) for v in argv[2:7])
        if not rows:
            print("result: no steps after the first 5")
            return 1
        rate = statistics.median(r["tokens_per_s"] for r in rows)
        flops = 6 * params + 12 * layers * channels * seq
        print(f"result: {rate:,.0f} tokens/s (median of {len(rows)} steps), {rate * flops / 1e12:.1f} TFLOP/s, "
              f"MFU {rate * flops / peak:.1%} of {peak / 1e12:.0f} TFLOP/s; step {statistics.median(r['step_ms'] for r in rows):.1f} ms")
        return 0
    mode, tol = argv[0], float(argv[1])
    a_rows, b_rows = steps(argv[2]), steps(argv[3])
    if mode == "rel-tail":  # A holds the steps of a resumed run: compare them with the same steps of B
        by_step = {r["step"]: r for r in b_rows}
        b_rows = [by_step[r["step"]] for r in a_rows if r["step"] in by_step]
        mode = "rel"
    a, b = [r["loss"] for r in a_rows], [r["loss"] for r in b_rows]
    if not a or len(a) != len(b):
        print(f"result: {len(a)} steps against {len(b)}")
        return 1
    diffs = [abs(x - y) / (abs(y) if mode == "rel" else 1.0) for x, y in zip(a, b)]
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    for i, (x, y) in enumerate(zip(a, b), 1):
        print(f"step {i:2d}: {x:.7f} vs {y:.7f}")
    print(f"result: worst {mode} difference {diffs[worst]:.2e} at step {worst + 1} (tolerance {tol:g})")
    return 0 if diffs[worst] <= tol else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
