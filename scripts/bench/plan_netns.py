"""`dtrain plan`'s predictions against dtrain-trainer on network-namespace hosts whose links tc tbf limits.

Hosts: one Cluster of tests/integration/netns.py per world size N (N node hosts plus one launcher host on a bridge),
`dtrain agent --listen` on each node host, the job launched with `provider: static`, one rank per node
(`workers_per_node: 1`, `--threads 1`), DDP (`--zero 0`) in fp32. The link limit is Cluster.rate_limit, a tbf on
the host's eth0 egress and on its switch port's egress, so each node's link is limited both ways, as a NIC is:
  rate      the link's line rate (200mbit, 500mbit, 1gbit; tc's mbit is 1e6 bit/s)
  burst     max(64 KiB, rate / 250 s^-1): at least one GSO super-packet (64 KiB; tbf segments anything larger than
            its bucket, costing CPU) and at least what the rate brings in one 4 ms tick (HZ=250), the tc-tbf(8)
            rule for reaching the rate. Per step the bucket refills during compute, so each transfer starts with
            one burst at veth speed: 100, 250 and 500 KB (200mbit, 500mbit, 1gbit) of the 13-20 MB a step sends.
  latency   50 ms: bounds the queue (rate x 50 ms) far above the bandwidth-delay product of a veth (RTT < 0.1 ms),
            so TCP keeps the link busy and never waits on an empty queue.

Model: BENCHMARKS.md's bench model (GPT-2 L=4, C=256, NH=4, T=256, V=256; 3.29M parameters, 13.2 MB of fp32
gradients), B=8 per rank. Its compute (about 0.8 s a step on one core) and its allreduce at 200 Mbit (0.5-0.8 s) are
of one order, so the link decides the scaling; at 1 Gbit it does not.

Cases per round (rounds interleave every case, so machine noise hits all alike):
  N trainers alone (1, and each N): single processes at once, no communicator, for reference.
  For each N and tbf rate in --rates: `dtrain bench allreduce` of the model's gradient bytes on the N hosts (the
  Gloo communicator the trainer uses: the measured communication time of a step), then one fresh job of N ranks
  for each bucket size in --buckets.
Per job: medians over the steps after --warmup of step_ms, comm_hidden and comm_bytes (rank 0's metrics file).

Measured, per round: exposed = (1 - comm_hidden) x the allreduce time (comm_hidden is 1 - what the step waited
for / what the allreduces took; with the link the bottleneck their time is the bench's), compute = step - exposed,
efficiency = compute / step. Each round is judged on itself: other builds on this shared 2-core host change compute
between runs, not the link's share of a run (the N trainers alone show how much: they ran slower than the DDP ranks).
Predicted: `dtrain plan --layers 4 --hidden 256 --heads 4 --seq-len 256 --vocab 256 --micro-batch 8 --precision fp32
--gpus N --gpus-per-node 1 --inter-node-bw R --ddp-bucket-mb M --gpu-tflops F --json`, R the tbf rate in GB/s and
F the FLOP/s that give the measured compute by the plan's own rule, (6 * P + 12 * L * h * s) FLOPs a token (PaLM's
model FLOPs, cli/plan/costs/formulas.h), so what is compared is its
communication and how it combines with compute: comm.seconds, scaling.exposed_comm_s and
scaling.efficiency_serial / efficiency_overlap of the DDP row."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
sys.path.insert(0, HERE)
import netns  # noqa: E402  the namespaces, bridge and tbf of the integration tests
from trainer_vs_pytorch import make_shard  # noqa: E402  the same llm.c shard of random tokens

L, C, NH, T, V = 4, 256, 4, 256, 256
# The gradients DDP allreduces per step: every parameter in fp32 (ParamLayout's count, as `dtrain plan` reports).
GRAD_BYTES = 4 * ((V + T) * C + L * (12 * C * C + 13 * C) + 2 * C)
MODEL = ["--layers", str(L), "--channels", str(C), "--heads", str(NH), "--max-seq-len", str(T), "--vocab", str(V)]
AGENT_PORT = 29400
AGENT_START_S = 10    # an agent binds its port well within a second; 10 s covers a loaded 2-core machine
JOB_TIMEOUT_S = 600   # one job: start-up plus at most ~10 steps of a few seconds, with a wide margin
PLAN_TIMEOUT_S = 30   # `dtrain plan` is arithmetic: milliseconds
BENCH_ITERS = 3       # timed allreduces per bench job: each is a step's worth of bytes, 0.2-1 s at these rates
HZ = 250              # the kernel tick tc-tbf(8)'s burst rule refers to


def rate_bits(rate):
    """tc's rate units: 200mbit -> 2e8, 1gbit -> 1e9 (tc's k/m/g are powers of 1000 for bit rates)."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1)):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale
    raise ValueError("rate %r: give it as tc does, e.g. 200mbit or 1gbit" % rate)


def tbf_burst_bytes(rate):
    return max(64 * 1024, int(rate_bits(rate) / 8 / HZ))


def trainer_args(args, bucket_mb, metrics):
    return [args.trainer] + MODEL + ["--data", args.shard, "--batch-size", str(args.batch), "--seq-len", str(T),
                                     "--steps", str(args.steps), "--threads", "1", "--zero", "0",
                                     "--ddp-bucket-mb", str(bucket_mb), "--log-every", "1000", "--metrics", metrics]


def summarize(metrics, warmup):
    with open(metrics) as f:
        steps = [json.loads(line) for line in f if line.strip()][warmup:]
    if not steps:
        raise RuntimeError("%s has no step after the %d warm-up steps" % (metrics, warmup))

    def median(key):
        values = [s[key] for s in steps if s.get(key) is not None]
        return statistics.median(values) if values else None
    return {"step_ms": median("step_ms"), "comm_hidden": median("comm_hidden"), "comm_bytes": median("comm_bytes")}


def alone(args, n, tag):
    """n single-process trainers at once (no RANK: no communicator): the compute of N ranks sharing this machine's
    cores, with no communication. The median over the processes of their median step_ms."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT"):
        env.pop(name, None)
    procs = []
    for i in range(n):
        metrics = os.path.join(args.work, "%s-%d.jsonl" % (tag, i))
        procs.append((metrics, subprocess.Popen(trainer_args(args, 25, metrics), env=env, cwd=args.work,
                                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
    steps = []
    for metrics, proc in procs:
        _, err = proc.communicate(timeout=JOB_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError("trainer %s exited %d:\n%s" % (metrics, proc.returncode, err[-3000:]))
        steps.append(summarize(metrics, args.warmup)["step_ms"])
    return {"step_ms": statistics.median(steps)}


class Nodes:
    """N node hosts with an agent each, and a launcher host, in one netns.Cluster."""

    def __init__(self, args, n):
        self.args, self.n = args, n
        self.c = netns.Cluster(n + 1, verbose=False)
        self.launcher = n
        self.limited = False
        for i in range(n):
            log = open(os.path.join(args.work, "agent_n%d_%d.log" % (n, i)), "ab")
            self.c.spawn(i, [args.dtrain, "agent", "--listen", "%s:%d" % (self.c.hosts[i].addr, AGENT_PORT),
                             "--secret-dir", args.secret, "--run-dir", os.path.join(args.work, "agent-runs")],
                         stdout=log, stderr=log)
            self.wait_listening(i)

    def wait_listening(self, i):
        if not self.c.wait_listening(self.launcher, self.c.hosts[i].addr, AGENT_PORT, AGENT_START_S):
            raise RuntimeError("the agent on host %d did not listen on %s:%d within %d s (see %s)" % (
                i, self.c.hosts[i].addr, AGENT_PORT, AGENT_START_S, self.args.work))

    def limit(self, rate):
        for i in range(self.n):
            if rate is not None:
                self.c.rate_limit(i, rate=rate, burst="%db" % tbf_burst_bytes(rate), latency="50ms")
            elif self.limited:
                self.c.unlimit(i)
        self.limited = rate is not None

    def job(self, tag, bucket_mb):
        metrics = os.path.join(self.args.work, tag + ".jsonl")
        agents = ", ".join("'%s:%d'" % (self.c.hosts[i].addr, AGENT_PORT) for i in range(self.n))
        command = ", ".join("'%s'" % a for a in trainer_args(self.args, bucket_mb, metrics))
        spec = os.path.join(self.args.work, tag + ".yaml")
        with open(spec, "w") as f:
            f.write("name: %s\nnodes: {provider: static, count: %d, agents: [%s], interface: eth0}\n"
                    "workers_per_node: 1\nbinding: none\ncommand: [%s]\nlogs: {dir: %s, console: none}\n"
                    % (tag, self.n, agents, command, os.path.join(self.args.work, "runs")))
        cp = self.c.run(self.launcher, [self.args.dtrain, "launch", spec, "--secret-dir", self.args.secret],
                        timeout=JOB_TIMEOUT_S, cwd=self.args.work)
        if cp.returncode != 0:
            raise RuntimeError("job %s exited %d:\n%s" % (tag, cp.returncode, cp.stderr[-3000:]))
        return summarize(metrics, self.args.warmup)

    def bench(self, tag, nbytes):
        """`dtrain bench allreduce` of nbytes on the N ranks (the same Gloo communicator the trainer uses): rank 0's
        (ms per allreduce, busbw in GB/s)."""
        spec = os.path.join(self.args.work, tag + ".yaml")
        agents = ", ".join("'%s:%d'" % (self.c.hosts[i].addr, AGENT_PORT) for i in range(self.n))
        with open(spec, "w") as f:
            f.write("name: %s\nnodes: {provider: static, count: %d, agents: [%s], interface: eth0}\n"
                    "workers_per_node: 1\nbinding: none\ncommand: ['%s', bench, allreduce, -b, '%d', -e, '%d', "
                    "-n, '%d', -w, '1']\nlogs: {dir: %s, console: rank0}\n"
                    % (tag, self.n, agents, self.args.dtrain, nbytes, nbytes, BENCH_ITERS,
                       os.path.join(self.args.work, "runs")))
        cp = self.c.run(self.launcher, [self.args.dtrain, "launch", spec, "--secret-dir", self.args.secret],
                        timeout=JOB_TIMEOUT_S, cwd=self.args.work)
        if cp.returncode != 0:
            raise RuntimeError("bench %s exited %d:\n%s" % (tag, cp.returncode, cp.stderr[-3000:]))
        for line in cp.stdout.splitlines():
            fields = line.split()
            if len(fields) >= 6 and fields[-6] == str(nbytes):
                return float(fields[-4]), float(fields[-2])
        raise RuntimeError("bench %s printed no row for %d bytes:\n%s" % (tag, nbytes, cp.stdout[-3000:]))

    def close(self):
        self.c.close()


def plan(args, n, rate, bucket_mb, flops):
    argv = [args.plan_dtrain or args.dtrain, "plan", "--layers", str(L), "--hidden", str(C), "--heads", str(NH), "--seq-len", str(T),
            "--vocab", str(V), "--micro-batch", str(args.batch), "--precision", "fp32", "--gpus", str(n),
            "--gpus-per-node", "1", "--inter-node-bw", "%.6g" % (rate_bits(rate) / 8 / 1e9),
            "--ddp-bucket-mb", "%g" % bucket_mb, "--json"]
    if flops:
        argv += ["--gpu-tflops", "%.6g" % (flops / 1e12)]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=PLAN_TIMEOUT_S)
    if cp.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(argv), cp.returncode, cp.stderr))
    out = json.loads(cp.stdout)
    ddp = next(s for s in out["strategies"] if s["zero_stage"] == 0)
    return out["request"]["params"], ddp, argv


def key(n, rate, what):
    return "n%d/%s/%s" % (n, rate, what)


def measure(args):
    """{key(n, rate, what): [one summary per round]}: what is a bucket size (a job), "bench" (the allreduce) or,
    with rate "alone", the compute-only baseline."""
    samples = {}
    clusters = {}
    try:
        for n in args.worlds:
            clusters[n] = Nodes(args, n)
        for r in range(args.rounds):
            for n in [1] + args.worlds:
                s = alone(args, n, "r%d-alone%d" % (r, n))
                samples.setdefault(key(n, "alone", "-"), []).append(s)
                print("round %d  %d trainer(s) alone: step %8.1f ms" % (r, n, s["step_ms"]), flush=True)
            for n in args.worlds:
                for rate in args.rates:
                    clusters[n].limit(rate)
                    ms, busbw = clusters[n].bench("r%d-n%d-%s-bench" % (r, n, rate), GRAD_BYTES)
                    samples.setdefault(key(n, rate, "bench"), []).append({"ms": ms, "busbw": busbw})
                    print("round %d  N=%d  link %-8s  allreduce of %d B: %.1f ms, busbw %.4f GB/s" % (
                        r, n, rate, GRAD_BYTES, ms, busbw), flush=True)
                    for mb in args.buckets:
                        s = clusters[n].job(("r%d-n%d-%s-b%g" % (r, n, rate, mb)).replace(".", "p"), mb)
                        samples.setdefault(key(n, rate, "%g" % mb), []).append(s)
                        print("round %d  N=%d  link %-8s  buckets %4g MiB  step %8.1f ms  hidden %s  bytes %s" % (
                            r, n, rate, mb, s["step_ms"], s["comm_hidden"], s["comm_bytes"]), flush=True)
                clusters[n].limit(None)
    finally:
        for c in clusters.values():
            c.close()
    return samples


def row(args, samples, n, rate, mb):
    """One line of the table: the plan's numbers against the medians (and spreads) over rounds. Each round's
    exposed communication is (1 - comm_hidden) x that round's allreduce time on the same link, its compute the rest
    of its step; so a round is judged on itself, whatever the rest of the machine did meanwhile."""
    med = statistics.median
    runs = samples[key(n, rate, "%g" % mb)]
    bench = [b["ms"] / 1e3 for b in samples[key(n, rate, "bench")]]
    step = [s["step_ms"] / 1e3 for s in runs]
    exposed = [(1 - s["comm_hidden"]) * c for s, c in zip(runs, bench)]
    compute = [t - e for t, e in zip(step, exposed)]
    eff = [c / t for c, t in zip(compute, step)]
    params, _, _ = plan(args, n, rate, mb, None)
    _, ddp, argv = plan(args, n, rate, mb, (6 * params + 12 * L * C * T) * args.batch * T / med(compute))
    sc = ddp["scaling"]
    alone = [s["step_ms"] / 1e3 for s in samples[key(n, "alone", "-")]]
    return {"n": n, "rate": rate, "bucket_mb": mb, "plan_argv": argv,
            "comm_bytes": runs[0]["comm_bytes"], "plan_bytes": ddp["comm"]["data_parallel_bytes"],
            "plan_comm_s": ddp["comm"]["seconds"], "bench_s": med(bench), "bench_spread": [min(bench), max(bench)],
            "busbw": med(b["busbw"] for b in samples[key(n, rate, "bench")]),
            "step_s": med(step), "compute_s": med(compute), "hidden": med(s["comm_hidden"] for s in runs),
            "exposed_s": med(exposed), "exposed_spread": [min(exposed), max(exposed)],
            "plan_exposed_s": sc["exposed_comm_s"],
            "eff": med(eff), "eff_spread": [min(eff), max(eff)],
            "plan_eff_overlap": sc["efficiency_overlap"], "plan_eff_serial": sc["efficiency_serial"],
            # What the plan said before it modelled DDP's overlap: all communication hidden up to compute.
            "plan_eff_hide_all": sc["compute_s"] / max(sc["compute_s"], ddp["comm"]["seconds"]),
            "alone_s": med(alone), "alone_eff": med(alone) / med(step)}


def table(args, samples):
    rows = [row(args, samples, n, rate, mb) for n in args.worlds for mb in args.buckets for rate in args.rates]
    print("\n| nodes x 1 rank | link (tbf) | DDP buckets | comm s: plan | comm s: measured allreduce (min-max) | "
          "plan / measured | exposed s: plan | exposed s: measured (min-max) | efficiency: plan (serial, hide-all) "
          "| efficiency: measured (min-max) | plan / measured |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for w in rows:
        print("| %d | %s | %g MiB | %.3f | %.3f (%.3f-%.3f) | %.2f | %.3f | %.3f (%.3f-%.3f) | **%.0f%%** (%.0f%%, "
              "%.0f%%) | %.0f%% (%.0f-%.0f%%) | %.2f |" % (
                  w["n"], w["rate"], w["bucket_mb"], w["plan_comm_s"], w["bench_s"], w["bench_spread"][0],
                  w["bench_spread"][1], w["plan_comm_s"] / w["bench_s"], w["plan_exposed_s"], w["exposed_s"],
                  w["exposed_spread"][0], w["exposed_spread"][1], 100 * w["plan_eff_overlap"],
                  100 * w["plan_eff_serial"], 100 * w["plan_eff_hide_all"], 100 * w["eff"],
                  100 * w["eff_spread"][0], 100 * w["eff_spread"][1], w["plan_eff_overlap"] / w["eff"]))
    print("\n| nodes | link | buckets | bytes sent per step: trainer, plan | busbw GB/s | step s | compute s "
          "| comm hidden | N trainers alone, step s | alone / step |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for w in rows:
        print("| %d | %s | %g MiB | %s, %.0f | %.4f | %.3f | %.3f | %.0f%% | %.3f | %.2f |" % (
            w["n"], w["rate"], w["bucket_mb"], w["comm_bytes"], w["plan_bytes"], w["busbw"], w["step_s"],
            w["compute_s"], 100 * w["hidden"], w["alone_s"], w["alone_eff"]))
    print("\nper round: " + "; ".join("%s %s" % (k, " ".join(
        "%.3f" % ((s["ms"] if "ms" in s else s["step_ms"]) / 1e3) for s in v)) for k, v in sorted(samples.items())))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtrain", required=True)
    p.add_argument("--trainer", required=True)
    p.add_argument("--plan-dtrain", help="the dtrain whose `plan` is checked (default: --dtrain)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worlds", default="2,4", help="node counts, one rank each")
    p.add_argument("--rates", default="200mbit,500mbit,1gbit", help="tbf rates, as tc writes them")
    p.add_argument("--buckets", default="25,2", help="--ddp-bucket-mb values")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step (B)")
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--json", help="write the samples of every round and the table's rows here")
    p.add_argument("--table-from", help="print the table from an earlier run's --json (with this build's plan)")
    args = p.parse_args()
    args.worlds = [int(x) for x in args.worlds.split(",")]
    args.rates = args.rates.split(",")
    args.buckets = [float(x) for x in args.buckets.split(",")]
    for r in args.rates:
        rate_bits(r)
    if args.table_from:
        with open(args.table_from) as f:
            table(args, json.load(f)["samples"])
        return
    netns.require_netns()
    args.work = tempfile.mkdtemp(prefix="plan-netns-")
    os.chmod(args.work, 0o755)
    args.shard = os.path.join(args.work, "data.bin")
    make_shard(args.shard)
    args.secret = os.path.join(args.work, "secret")
    subprocess.run([args.dtrain, "secret", "init", "--dir", args.secret], check=True, stdout=subprocess.DEVNULL,
                   timeout=PLAN_TIMEOUT_S)
    print("work dir %s; tbf bursts: %s" % (args.work, ", ".join("%s %d B" % (r, tbf_burst_bytes(r))
                                                                for r in args.rates)), flush=True)
    samples = measure(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples}, f, indent=1)
    rows = table(args, samples)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
