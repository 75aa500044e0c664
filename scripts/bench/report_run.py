"""Writes a synthetic run directory as the launcher would leave it after a long job: `report_run.py DIR [--ranks
1024] [--steps 10000] [--step-ms 500] [--ranks-per-node 8]`. events.jsonl has job_start, round_start, a
worker_started per rank, "samples" events on the launcher's windows (cli/report/model/samples.h: max(1 s, age / 100)),
a "health" event every 10 s with every rank's row as `dtrain status --json` shows it (the bulk of a real log),
the straggler's diagnosis, round_end and job_end; status.json has the nodes and the final diagnoses. One rank
(--slow-rank, default 700) waits three times as long for its data from a third of the way in; its peers' exposed
communication absorbs the difference, as in data-parallel training."""

import argparse
import json
import os
import random

parser = argparse.ArgumentParser()
parser.add_argument("dir")
parser.add_argument("--ranks", type=int, default=1024)
parser.add_argument("--steps", type=int, default=10000)
parser.add_argument("--step-ms", type=float, default=500.0)
parser.add_argument("--ranks-per-node", type=int, default=8)
parser.add_argument("--slow-rank", type=int, default=700)
args = parser.parse_args()

os.makedirs(args.dir, exist_ok=True)
rng = random.Random(0)
start = 1_764_547_200_000
end = start + int(args.steps * args.step_ms) + 5000
nodes = (args.ranks + args.ranks_per_node - 1) // args.ranks_per_node
out = open(os.path.join(args.dir, "events.jsonl"), "w")


def event(ts, event_name, **fields):
    out.write(json.dumps(dict({"ts": ts, "event": event_name}, **fields), separators=(",", ":")) + "\n")


def window_length(age_ms):   # cli/report/model/samples.h
    return max(1000, age_ms // 100)


event(start, "job_start", job="bench-20261201-000000", run_dir=args.dir, name="bench", pid=4242,
      command=["python3", "train.py", "--config", "big.yaml"])
event(start + 10, "round_start", round=0, nodes=nodes)
for r in range(args.ranks):
    event(start + 2000, "worker_started", round=0, rank=r, node=r // args.ranks_per_node, pid=10000 + r)

t = start + 3000   # the first step
window_start, next_health, diagnosed = t, t + 10000, False
while True:
    now = window_start + window_length(window_start - start)
    if now > end - 2000:
        now = end - 2000
    step = int((now - t) / args.step_ms)
    if step <= 0:
        window_start = now
        continue
    step = min(step, args.steps)
    slow = step > args.steps // 3
    cols = {k: [] for k in ("rank", "step", "step_ms", "loss", "tokens_per_s", "data_wait_ms", "compute_ms",
                            "comm_exposed_ms", "optimizer_ms", "rss_mib", "device_mib")}
    loss = round(2.0 + 8.0 / (1 + step / 500.0), 3)
    for r in range(args.ranks):
        data = 150.0 if slow and r == args.slow_rank else 50.0 + rng.random() * 5
        compute = 280.0 + rng.random() * 20
        comm = max(0.0, args.step_ms - 40 - data - compute)
        for key, value in (("rank", r), ("step", step), ("step_ms", round(args.step_ms + rng.random(), 2)),
                           ("loss", loss), ("tokens_per_s", round(16384 / args.step_ms * 1000, 2)),
                           ("data_wait_ms", round(data, 2)), ("compute_ms", round(compute, 2)),
                           ("comm_exposed_ms", round(comm, 2)), ("optimizer_ms", 25.0), ("rss_mib", 9000 + r % 7),
                           ("device_mib", 61000 + r % 13)):
            cols[key].append(value)
    event(now, "samples", round=0, window_ms=now - window_start, **cols)
    while next_health <= now:
        rows = ",".join('{"rank":%d,"node":%d,"host":"gpu-%03d","pid":%d,"state":"running","step":%d,'
                        '"step_ms":%.2f,"tokens_per_s":32768.0,"loss":%.3f,"data_wait_ratio":0.1,'
                        '"comm_exposed_ratio":0.2,"rss_bytes":9437184000,"device_mem_used_bytes":63963136000,'
                        '"device_mem_total_bytes":85899345920,"phase":"forward","report_age_s":0.4}'
                        % (r, r // args.ranks_per_node, r // args.ranks_per_node, 10000 + r, step, args.step_ms,
                           loss) for r in range(args.ranks))
        out.write('{"ts":%d,"event":"health","round":0,"ranks":[%s],"ranks_left_out":0}\n' % (next_health, rows))
        next_health += 10000
    if slow and not diagnosed and now - t > (args.steps // 3) * args.step_ms + 30000:
        diagnosed = True
        event(now, "diagnosis", kind="straggler", ranks=[args.slow_rank],
              message="rank %d on node %d (gpu-%03d) was 80%% slower than the median: 31%% of its step was data "
                      "wait (the median rank's: 10%%)" % (args.slow_rank, args.slow_rank // args.ranks_per_node,
                                                         args.slow_rank // args.ranks_per_node),
              fix="give its DataLoader more workers")
    window_start = now
    if now >= end - 2000:
        break

event(end - 1000, "round_end", round=0, outcome="succeeded")
event(end, "job_end", outcome="succeeded", exit_code=0)
out.close()
status = {"job": "bench-20261201-000000", "state": "succeeded", "attempt": 0, "updated_unix_ms": end, "ranks": [],
          "diagnoses": [{"kind": "straggler", "ranks": [args.slow_rank],
                         "message": "rank %d was 80%% slower than the median" % args.slow_rank,
                         "fix": "give its DataLoader more workers"}],
          "nodes": [{"node": n, "host": "gpu-%03d" % n, "up": True} for n in range(nodes)], "metrics_address": None}
with open(os.path.join(args.dir, "status.json"), "w") as f:
    json.dump(status, f)
