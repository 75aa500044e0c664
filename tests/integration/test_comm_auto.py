"""DTRAIN_COMM_BACKEND=auto, dtrain-trainer's default, on real separate hosts: two network-namespace hosts with an
agent each run 2 ranks per host, so auto builds the hierarchical communicator (shm within a host, gloo across).

1. dtrain-comm-worker checks every collective and a DDP pass on exact integer data: with the default every rank
   reports the hier backend, with DTRAIN_COMM_BACKEND=gloo every rank reports gloo; both exact.
2. A rank SIGKILLed on the hier path: the others (one on its host through shm, two across through gloo) fail with a
   CommError within twice the timeout, and the launcher names the killed rank.
3. dtrain-trainer, DDP and --zero 2: auto's losses equal gloo's per step within 1e-5 relative (sums run in another
   order, so not bit for bit), and rank 0 logs "comm hier".
4. Nodes that run different numbers of ranks (2, 1 and 3; the job's variables rewritten per rank, since dtrain's own
   launcher always runs the same number on each node): every rank falls back to gloo, and rank 0 says why."""

import os
import subprocess
import sys

from harness import BUILD_DIR, DTRAIN, Run, check, finish, tagged_pids, write
from netns import Cluster, require_netns

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import trainer_harness  # noqa: E402

require_netns()

WORKER = os.path.join(BUILD_DIR, "bin", "dtrain-comm-worker")
TRAINER = os.path.join(BUILD_DIR, "bin", "dtrain-trainer")
AGENT_PORT = 29400
LAUNCHER = 2  # host index of the launcher
TIMEOUT_MS = 3000


class Hosts:
    def __init__(self, cluster, work):
        self.c, self.work = cluster, work
        self.tag = Run([]).tag
        self.secret = os.path.join(work, "secret")
        subprocess.run([DTRAIN, "secret", "init", "--dir", self.secret], check=True, stdout=subprocess.DEVNULL)
        self.agents = []
        for i in range(2):
            log = open(os.path.join(work, "agent_%d.log" % i), "ab")
            self.agents.append(cluster.spawn(i, [DTRAIN, "agent", "--listen", "%s:%d" % (cluster.hosts[i].addr,
                                                                                          AGENT_PORT),
                                                 "--secret-dir", self.secret,
                                                 "--run-dir", os.path.join(work, "agent-runs-%d" % i)],
                                             env={"DTRAIN_TEST_TAG": self.tag}, stdout=log, stderr=log))
            self.wait_listening(i)

    def wait_listening(self, i):
        if not self.c.wait_listening(LAUNCHER, self.c.hosts[i].addr, AGENT_PORT, 10):
            check(False, "the agent on host %d listens" % i)
            finish()

    def launch(self, name, command, env, grace_s=1):
        """A 2 hosts x 2 ranks job; (exit code, stdout, stderr)."""
        agents = ", ".join("'%s:%d'" % (self.c.hosts[i].addr, AGENT_PORT) for i in range(2))
        env_yaml = ", ".join("%s: '%s'" % item for item in sorted(env.items()))
        spec = write(os.path.join(self.work, name + ".yaml"),
                     "name: %s\nnodes: {provider: static, count: 2, agents: [%s], interface: eth0}\n"
                     "workers_per_node: 2\nbinding: none\ncommand: [%s]\nenv: {%s}\nstop: {grace_s: %d}\n"
                     "logs: {dir: %s, console: all}\n"
                     % (name, agents, ", ".join("'%s'" % a for a in command), env_yaml, grace_s,
                        os.path.join(self.work, "runs")))
        cp = self.c.run(LAUNCHER, [DTRAIN, "launch", spec, "--secret-dir", self.secret], timeout=300,
                        env={"DTRAIN_TEST_TAG": self.tag}, cwd=self.work)
        print("--- %s: exit %s\n--- stdout\n%s--- stderr\n%s---" % (name, cp.returncode, cp.stdout, cp.stderr),
              flush=True)
        return cp.returncode, cp.stdout, cp.stderr

    def close(self):
        for agent in self.agents:
            agent.terminate()
        for agent in self.agents:
            agent.wait(timeout=15)


def comm_worker(hosts):
    for backend, env in (("hier", {}), ("gloo", {"DTRAIN_COMM_BACKEND": "gloo"})):
        env = dict(env, DTRAIN_COMM_TIMEOUT_MS="30000")
        code, out, _ = hosts.launch("check-" + backend, [WORKER, "check"], env)
        check(code == 0, "comm-worker check over %s exits 0, got %s" % (backend, code))
        for rank in range(4):
            check("comm-worker rank %d of 4 (%s) ok" % (rank, backend) in out,
                  "rank %d reports ok over %s (the default picked %s)" % (rank, backend, backend))


def killed_rank(hosts):
    code, out, err = hosts.launch("die-hier", [WORKER, "die", "1"], {"DTRAIN_COMM_TIMEOUT_MS": str(TIMEOUT_MS)},
                                  grace_s=2 * TIMEOUT_MS // 1000 + 2)
    check(code != 0, "a job whose rank 1 was killed fails, got exit %s" % code)
    check("root cause: rank 1" in err, "the launcher names rank 1 as the root cause")
    errors = [line for line in out.splitlines() if "comm-error after" in line]
    check(len(errors) == 3, "ranks 0 (same host, shm), 2 and 3 (other host, gloo) each report a CommError: %s" % errors)
    for line in errors:
        ms = int(line.split("comm-error after ", 1)[1].split(" ", 1)[0])
        check(ms < 2 * TIMEOUT_MS, "the CommError came within twice the timeout: %s" % line)
        check("hierarchical allreduce" in line and " of 4 (node " in line,
              "the error names the collective and the rank's place in the job: %s" % line)
    check("succeeded although" not in out, "no rank's allreduce succeeded without rank 1")


def trainer_losses(hosts):
    shard = trainer_harness.make_text_shard(hosts.work)
    for label, extra in (("ddp", ["--zero", "0"]), ("zero2", ["--zero", "2"])):
        paths = {}
        for backend in ("auto", "gloo"):
            metrics = os.path.join(hosts.work, "%s-%s.jsonl" % (label, backend))
            command = [TRAINER] + trainer_harness.MODEL + [
                "--data", shard, "--seq-len", "64", "--batch-size", "2", "--steps", "5", "--lr", "1e-3",
                "--seed", "11", "--threads", "1", "--metrics", metrics] + extra
            env = {"DTRAIN_COMM_BACKEND": backend, "OMP_NUM_THREADS": "1"}
            code, out, err = hosts.launch("%s-%s" % (label, backend), command, env)
            check(code == 0, "%s over %s exits 0, got %s" % (label, backend, code))
            expected = "comm hier" if backend == "auto" else "comm gloo"
            check(expected in out + err, "%s over %s: rank 0 logs %r" % (label, backend, expected))
            paths[backend] = metrics
        if all(os.path.exists(p) for p in paths.values()):
            trainer_harness.compare_steps("%s: auto vs gloo" % label, trainer_harness.metrics(paths["auto"]),
                                          trainer_harness.metrics(paths["gloo"]), 1e-5)


UNEVEN = r"""
# Nodes of 2, 1 and 3 ranks: rank r's node and local rank as such a launcher would number them.
case "$RANK" in
  0|1) export GROUP_RANK=0 LOCAL_WORLD_SIZE=2 LOCAL_RANK=$RANK ;;
  2) export GROUP_RANK=1 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0 ;;
  *) export GROUP_RANK=2 LOCAL_WORLD_SIZE=3 LOCAL_RANK=$((RANK - 3)) ;;
esac
export GROUP_WORLD_SIZE=3
exec "$0" check
"""


def uneven_nodes():
    run = Run(["run", "-n", "3", "--nodes", "2", "--console", "all", "--name", "auto-uneven", "--", "sh", "-c",
               UNEVEN, WORKER], env={"DTRAIN_COMM_TIMEOUT_MS": "30000"}, timeout=120)
    run.run()
    run.show()
    check(run.code == 0, "comm-worker check on uneven nodes exits 0, got %s" % run.code)
    for rank in range(6):
        check("comm-worker rank %d of 6 (gloo) ok" % rank in run.out, "rank %d fell back to gloo" % rank)
    check("DTRAIN_COMM_BACKEND=auto uses gloo for every rank" in run.err and "4 rank(s)" in run.err,
          "rank 0 says why it uses gloo")
    check(run.err.count("DTRAIN_COMM_BACKEND=auto uses gloo") == 1, "said once")
    run.assert_no_leaks()


def main():
    for binary in (WORKER, TRAINER):
        if not os.path.exists(binary):
            print("SKIPPED: %s is not built" % binary)
            raise SystemExit(77)
    uneven_nodes()
    work = trainer_harness.workdir()
    with Cluster(3) as cluster:
        hosts = Hosts(cluster, work)
        try:
            comm_worker(hosts)
            killed_rank(hosts)
            trainer_losses(hosts)
        finally:
            hosts.close()
        left = tagged_pids(hosts.tag)
        check(not left, "no process of the test left on any host: %s" % left)
    finish()


main()
