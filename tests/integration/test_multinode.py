"""Multi-node on real separate hosts: network namespaces joined by a bridge, one agent per host, the launcher on
its own host. Checks a 3-node x 2-worker job (store exchange and a PyTorch gloo allreduce across hosts), an agent
killed mid-job (restart on the nodes left when nodes.count's MIN allows, clean failure when not), a cut link and a
silent partition (detected within node_timeout + 2 s), and a rate-limited link (6 mbit, which the job's store
traffic keeps saturated for over 4 x node_timeout: the job still succeeds). Every scenario ends with no process of
the job left on any host; the suite prints its fault ledger.
The rate-limited link's job (hosts 4-6, its launcher on host 7) and the PyTorch job (hosts 8-10, its launcher on host
11) run on agents of their own, each with its own tag, while the other scenarios run one after another on hosts 0-2
(launcher on host 3): none of their traffic crosses the limited link, and none of their faults touches the other
hosts. The network faults, whose detection has a time bound, start once the PyTorch job has ended."""

import os
import shutil
import signal
import subprocess
import threading
import time

from harness import BUILD_DIR, DTRAIN, PYTHON, SOURCE_DIR, Run, check, describe, finish, tagged_pids, write
from netns import Cluster, require_netns

require_netns()

NODE_TIMEOUT = 3
AGENT_PORT = 29400
LAUNCHER = 3  # host index the launcher runs on
SLOW_AGENTS, SLOW_LAUNCHER = (4, 5, 6), 7   # the rate-limited link's job: its agents and its launcher
TORCH_AGENTS, TORCH_LAUNCHER = (8, 9, 10), 11   # the PyTorch job's

TORCH_WORKER = r"""
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t.item()
print("allreduce ok rank %d world %d via %s" % (rank, world, os.environ.get("GLOO_SOCKET_IFNAME")))
dist.destroy_process_group()
"""

SLEEPER = "echo started on $(hostname) rank $RANK; exec sleep 300"
RESTARTABLE = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then echo started rank $RANK; exec sleep 300; fi; '
               'echo "rank $RANK of $WORLD_SIZE finished at restart $TORCHELASTIC_RESTART_COUNT"')


class Suite:
    def __init__(self, cluster, tag, launcher=LAUNCHER):
        self.c = cluster
        self.tag = tag
        self.launcher = launcher
        self.agents = {}
        self.dir = Run([]).dir
        self.secret = os.path.join(self.dir, "secret")
        subprocess.run([DTRAIN, "secret", "init", "--dir", self.secret], check=True, stdout=subprocess.DEVNULL)

    def start_agent(self, i):
        log = open(os.path.join(self.dir, "agent_%d.log" % i), "ab")
        self.agents[i] = self.c.spawn(i, [DTRAIN, "agent", "--listen", "%s:%d" % (self.c.hosts[i].addr, AGENT_PORT),
                                          "--secret-dir", self.secret, "--lease-s", str(NODE_TIMEOUT),
                                          "--run-dir", os.path.join(self.dir, "agent-runs-%d" % i)],
                                      env={"DTRAIN_TEST_TAG": self.tag}, stdout=log, stderr=log)
        check(self.c.wait_listening(self.launcher, self.c.hosts[i].addr, AGENT_PORT, 10),
              "agent on host %d listening" % i)

    def spec(self, name, command, count, nodes=(0, 1, 2), extra=""):
        agents = ", ".join("'%s:%d'" % (self.c.hosts[i].addr, AGENT_PORT) for i in nodes)
        text = ("name: %s\nnodes: {provider: static, count: '%s', agents: [%s]}\nworkers_per_node: 2\n"
                "command: %s\nstop: {grace_s: 1}\nhealth: {node_timeout_s: %d}\nlogs: {console: all}\n%s"
                % (name, count, agents, command, NODE_TIMEOUT, extra))
        return write(os.path.join(self.dir, name + ".yaml"), text)

    def launch(self, spec, env=None, flags=None):
        out = open(os.path.join(self.dir, os.path.basename(spec) + ".out"), "w+")
        err_path = os.path.join(self.dir, os.path.basename(spec) + ".err")
        err = open(err_path, "w+")
        merged = {"DTRAIN_TEST_TAG": self.tag}
        merged.update(env or {})
        flags = flags if flags is not None else ["--secret-dir", self.secret]
        proc = self.c.spawn(self.launcher, [DTRAIN, "launch", spec] + flags, env=merged, stdout=out, stderr=err,
                            cwd=self.dir)
        return proc, out, err_path

    def wait_text(self, path, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(path) as f:
                if text in f.read():
                    return time.monotonic()
            time.sleep(0.02)
        return None

    def finish_launch(self, proc, out, err_path, timeout=60):
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            check(False, "launcher did not exit within %d s" % timeout)
        out.seek(0)
        stdout = out.read()
        stderr = open(err_path).read()
        print("--- exit %s\n--- stdout\n%s--- stderr\n%s---" % (code, stdout, stderr), flush=True)
        return code, stdout, stderr

    def workers_left(self, timeout):
        """Waits until no worker (anything tagged except agents and the launcher) is left; returns leftovers."""
        deadline = time.monotonic() + timeout
        agents = {p.pid for p in self.agents.values()}
        while True:
            left = [p for p in tagged_pids(self.tag) if p not in agents]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)


def scenario_store(s):
    store_worker = os.path.join(BUILD_DIR, "bin", "dtrain-store-worker")
    proc, out, err = s.launch(s.spec("store3", "[%s]" % store_worker, 3))
    code, stdout, _ = s.finish_launch(proc, out, err)
    check(code == 0, "3-node store exchange exits 0, got %s" % code)
    check(all("[%d] store-worker rank %d ok" % (r, r) in stdout for r in range(6)),
          "all 6 ranks exchanged via the store")
    check(not s.workers_left(2), "no worker left after the 3-node store job")


def start_torch(t):
    """Starts the 3-node PyTorch job on t's agents (TORCH_AGENTS); finish_torch checks it."""
    script = write(os.path.join(t.dir, "allreduce.py"), TORCH_WORKER)
    return t.launch(t.spec("torch3", "[%s, %s]" % (PYTHON, script), 3, nodes=TORCH_AGENTS)), time.monotonic()


def finish_torch(t, job):
    (proc, out, err), began = job
    code, stdout, _ = t.finish_launch(proc, out, err, timeout=max(1, 120 - (time.monotonic() - began)))
    check(code == 0, "3-node PyTorch gloo allreduce exits 0, got %s" % code)
    check(stdout.count("allreduce ok") == 6 and "world 6 via eth0" in stdout,
          "6 ranks allreduced across hosts over eth0")
    check(not t.workers_left(2), "no worker left after the 3-node PyTorch job")


def scenario_agent_killed(s, restartable):
    count = "2:3" if restartable else "3"
    extra = "restart: {max_restarts: 1, backoff_s: 0.5}\n"
    proc, out, err = s.launch(s.spec("kill-%s" % ("elastic" if restartable else "fixed"),
                                     "[/bin/sh, -c, '%s']" % RESTARTABLE, count, extra=extra))
    started = s.wait_text(err, "workers started", 20)
    check(started is not None, "job started on 3 nodes")
    s.c.kill_all(2, signal.SIGKILL)
    s.agents.pop(2, None)
    code, stdout, stderr = s.finish_launch(proc, out, err)
    if restartable:
        ok = code == 0 and stdout.count("of 4 finished at restart 1") == 4
        s.c.ledger.expect(ok, "agent killed, MIN 2 of 3: restart on the 2 nodes left succeeds (exit %s)" % code)
    else:
        ok = code == 1 and "node 2" in stderr and "lost" in stderr
        s.c.ledger.expect(ok, "agent killed, fixed 3 nodes: clean failure naming node 2 (exit %s)" % code)
    left = s.workers_left(NODE_TIMEOUT + 2)
    check(not left, "nothing left after the agent kill: " + describe(left))
    s.start_agent(2)


def scenario_network_fault(s, fault, heal, label):
    proc, out, err = s.launch(s.spec("net-" + label.replace(" ", "-"), "[/bin/sh, -c, '%s']" % SLEEPER, 3))
    check(s.wait_text(err, "workers started", 20) is not None, "job started before the %s" % label)
    t0 = time.monotonic()
    fault(2)
    seen = s.wait_text(err, "lost:", NODE_TIMEOUT + 10)
    took = (seen - t0) if seen else None
    print("%s detected after %s s" % (label, "%.2f" % took if took else "never"), flush=True)
    s.c.ledger.expect(took is not None and took <= NODE_TIMEOUT + 2,
                      "%s detected within node_timeout + 2 s (took %s)" % (label, took))
    code, _, stderr = s.finish_launch(proc, out, err)
    check(code == 1 and "node 2" in stderr, "%s: launcher fails naming node 2 (exit %s)" % (label, code))
    # The cut-off agent's lease runs out and it stops its own workers.
    left = s.workers_left(NODE_TIMEOUT + 3)
    check(not left, "%s: the isolated node stopped its workers within its lease: %s" % (label, describe(left)))
    heal(2)


def scenario_refused(s):
    """Wrong token, wrong CA, plaintext off loopback: refused before any handler runs; nothing is started."""
    wrong_token = os.path.join(s.dir, "wrong-token")
    shutil.copytree(s.secret, wrong_token)
    with open(os.path.join(wrong_token, "token"), "w") as f:
        f.write("0" * 64 + "\n")
    os.chmod(os.path.join(wrong_token, "token"), 0o600)
    other_ca = os.path.join(s.dir, "other-ca")
    subprocess.run([DTRAIN, "secret", "init", "--dir", other_ca], check=True, stdout=subprocess.DEVNULL)
    marker = os.path.join(s.dir, "started-marker")
    cases = (("token", ["--secret-dir", wrong_token], "cluster token does not match"),
             ("ca", ["--secret-dir", other_ca], "TLS handshake"),
             ("plaintext", ["--insecure"], "TLS"))
    for name, flags, expected in cases:
        proc, out, err = s.launch(s.spec("refused-" + name, "[/bin/sh, -c, 'touch %s']" % marker, 3), flags=flags)
        code, _, stderr = s.finish_launch(proc, out, err)
        check(code != 0 and expected in stderr, "%s: launcher refused with '%s' (exit %s)" % (name, expected, code))
        check(not os.path.exists(marker), "%s: nothing was started" % name)
        check(not s.workers_left(0), "%s: no worker process exists" % name)
    # A refused launcher exits cleanly every time: gRPC's background reconnects once crashed it (exit 139, about one
    # run in five) in OpenSSL after exit had cleaned it up. 20 launchers, each a process of its own with its own job
    # name (so their files and run directories stay apart), 10 at a time.
    codes = []
    for first in range(0, 20, 10):
        started = [s.launch(s.spec("refused-again-%d" % n, "[/bin/sh, -c, 'touch %s']" % marker, 3),
                            flags=["--secret-dir", other_ca]) for n in range(first, first + 10)]
        codes += [s.finish_launch(proc, out, err)[0] for proc, out, err in started]
    check(len(codes) == 20 and all(code == 1 for code in codes),
          "20 refusals by another cluster's agents all exit 1: %s" % codes)
    check(not os.path.exists(marker), "the refusals started nothing")


def start_slow_link(s):
    """Starts the rate-limited link's job on s's agents (SLOW_AGENTS); finish_slow_link checks it. It runs while
    the other scenarios run on their own agents."""
    # Node 1's 2 ranks each read the store worker's 5 MiB value through the limited link: 10 MiB at 6 mbit keep it
    # saturated for about 14 s, over 4 x NODE_TIMEOUT, while the agent's session shares it (at 2 mbit, 45 s).
    s.c.rate_limit(SLOW_AGENTS[1], rate="6mbit", burst="64kbit", latency="100ms")
    store_worker = os.path.join(BUILD_DIR, "bin", "dtrain-store-worker")
    proc, out, err = s.launch(s.spec("slow", "[%s]" % store_worker, 3, nodes=SLOW_AGENTS))
    began = time.monotonic()
    ended = []
    waiter = threading.Thread(target=lambda: (proc.wait(), ended.append(time.monotonic())), daemon=True)
    waiter.start()
    return proc, out, err, began, ended


def finish_slow_link(s, job):
    proc, out, err, began, ended = job
    code, _, _ = s.finish_launch(proc, out, err, timeout=max(1, 120 - (time.monotonic() - began)))
    print("the job over the rate-limited link took %.1f s" % ((ended or [time.monotonic()])[0] - began), flush=True)
    s.c.ledger.expect(code == 0, "a rate-limited link (6 mbit) to node 1: the job still succeeds (exit %s)" % code)
    left = s.workers_left(NODE_TIMEOUT + 2)
    check(not left, "nothing left after the rate-limited link's job: " + describe(left))
    s.c.unlimit(SLOW_AGENTS[1])


def main():
    tags = [Run([]).tag for _ in range(3)]
    with Cluster(12) as cluster:
        s = Suite(cluster, tags[0])
        slow = Suite(cluster, tags[1], launcher=SLOW_LAUNCHER)
        torch_suite = Suite(cluster, tags[2], launcher=TORCH_LAUNCHER)
        for suite, hosts in ((s, range(3)), (slow, SLOW_AGENTS), (torch_suite, TORCH_AGENTS)):
            for i in hosts:
                suite.start_agent(i)
        slow_job = start_slow_link(slow)
        torch_job = start_torch(torch_suite)
        scenario_refused(s)
        scenario_store(s)
        scenario_agent_killed(s, restartable=True)
        scenario_agent_killed(s, restartable=False)
        finish_torch(torch_suite, torch_job)
        scenario_network_fault(s, cluster.link_down, cluster.link_up, "link down")
        scenario_network_fault(s, cluster.partition, cluster.heal, "silent partition")
        finish_slow_link(slow, slow_job)
        agents = [p for suite in (s, slow, torch_suite) for p in suite.agents.values()]
        for p in agents:
            p.send_signal(signal.SIGTERM)
        for p in agents:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                check(False, "agent exits on SIGTERM")
        left = [pid for tag in tags for pid in tagged_pids(tag)]
        check(not left, "no process of the suite left on any host: " + describe(left))
        print(cluster.ledger.line(leaked=left), flush=True)
    finish()


main()
