"""`dtrain run` across machines, torchrun's way: the same command on every host (network namespaces on one bridge)
makes one job, over mutual TLS from one cluster secret. Checks:
  * two hosts, `--nnodes 2 --nproc-per-node 2 --rdzv-endpoint <host 0>:29400 --tee 3`, the joining host started
    first: each host's command exits 0 and shows its own ranks' lines only; RANK, WORLD_SIZE (4), GROUP_RANK,
    LOCAL_RANK and MASTER_ADDR (host 0's address) are torchrun's; the launcher's host is node 0;
  * three hosts, the endpoint on host 1 (the launcher's host is node 0, the others follow join order): a worker
    failing with code 7 on host 2 ends every host's command with 7, within seconds of the failure;
  * Ctrl-C (SIGINT to the process group, as a terminal sends it) on the joining host of two: every host's command
    exits 130 and no process of the job is left on either host;
  * --node-rank given on each host orders node ranks by it, whatever the join order; with --log-dir (and
    --redirects 3 --tee 3) each host lays out its own ranks as torchrun does: <dir>/<job id>_<random>/attempt_0/
    <local rank>/stdout.log, local rank 0 and 1 of its node;
  * a node that never comes: --nnodes 2 with one host exits 1 after --rdzv-conf join_timeout, naming the missing node;
  * --nnodes 1:3 with two hosts starts with the two that came (WORLD_SIZE 4) once join_timeout passes;
  * bad input exits 2 naming the option: the endpoint's port in use on the launcher's host, --node-rank 0 on a host
    that does not own the endpoint, --nnodes 2 without an endpoint (an endpoint that does not resolve is
    test_run_torchrun's: a name lookup inside a namespace may wait for an unreachable DNS server).
Skips (exit 77) where namespaces cannot be built."""

import os
import re
import signal
import socket
import subprocess
import time

from harness import DTRAIN, PYTHON, Run, check, describe, finish, write
from netns import Cluster, require_netns

require_netns()
PORT = 29400
WORK = Run([]).dir
os.chmod(WORK, 0o755)
SECRET = os.path.join(WORK, "secret")
subprocess.run([DTRAIN, "secret", "init", "--dir", SECRET], check=True, stdout=subprocess.DEVNULL)
WORKER = write(os.path.join(WORK, "worker.py"), r"""
import os, sys, time
e = os.environ
print("rank=%s world=%s group=%s local=%s master=%s host=%s" % (e["RANK"], e["WORLD_SIZE"], e["GROUP_RANK"],
      e["LOCAL_RANK"], e["MASTER_ADDR"], os.uname().nodename), flush=True)
if e.get("FAIL_HERE") == "1" and e["LOCAL_RANK"] == "0":
    time.sleep(1)
    sys.exit(7)
time.sleep(float(e.get("SLEEP_S", "0")))
""")
LINE = re.compile(r"^\[(\d+)\] rank=(\d+) world=(\d+) group=(\d+) local=(\d+) master=(\S+) host=(\S+)$", re.M)


def command(c, endpoint_host, *extra):
    return [DTRAIN, "run", "--secret-dir", SECRET, "--nproc-per-node", "2", "--rdzv-endpoint",
            "%s:%d" % (c.hosts[endpoint_host].addr, PORT)] + list(extra)


def start(c, i, argv, name, env=None):
    out = open(os.path.join(WORK, name + ".out"), "w")
    err = open(os.path.join(WORK, name + ".err"), "w")
    p = c.spawn(i, argv, env=env, stdout=out, stderr=err, cwd=WORK)
    p.name = name
    p.started = time.monotonic()
    return p


def finish_all(procs, timeout):
    """{name: (exit code or None, stdout, stderr)} once every process ended or `timeout` passed (then killed); each
    process's end time (monotonic) is left in its `ended`."""
    deadline = time.monotonic() + timeout
    waiting = list(procs)
    while waiting and time.monotonic() < deadline:
        for p in list(waiting):
            if p.poll() is not None:
                p.ended = time.monotonic()
                waiting.remove(p)
        time.sleep(0.05)
    for p in waiting:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        p.ended = None
    out = {}
    for p in procs:
        code = None if p.ended is None else p.returncode
        with open(os.path.join(WORK, p.name + ".out")) as f, open(os.path.join(WORK, p.name + ".err")) as g:
            out[p.name] = (code, f.read(), g.read())
        print("--- %s: exit %s\n%s%s" % (p.name, code, out[p.name][1], out[p.name][2]), flush=True)
    return out


def lines(text):
    return [dict(zip(("shown", "rank", "world", "group", "local", "master", "host"), m)) for m in LINE.findall(text)]


def scenario_two_hosts(c):
    argv = command(c, 0, "--nnodes", "2", "--tee", "3", "worker.py")
    joiner = start(c, 1, argv, "two-1")   # the joining host first: it waits for the launcher
    time.sleep(0.5)
    launcher = start(c, 0, argv, "two-0")
    res = finish_all([launcher, joiner], 60)
    for i in (0, 1):
        code, out, err = res["two-%d" % i]
        check(code == 0, "two hosts: host %d's command exits 0, got %s" % (i, code))
        got = lines(out)
        check(sorted(int(l["rank"]) for l in got) == [2 * i, 2 * i + 1],
              "two hosts: host %d shows its own ranks %s and no other: %s" % (i, [2 * i, 2 * i + 1], got))
        for l in got:
            check(l["shown"] == l["rank"] and l["world"] == "4" and l["group"] == str(i) and
                  l["local"] == str(int(l["rank"]) - 2 * i) and l["master"] == c.hosts[0].addr and
                  l["host"] == c.hosts[i].hostname,
                  "two hosts: rank %s has torchrun's variables (node %d on %s, MASTER_ADDR %s): %s" % (
                      l["rank"], i, c.hosts[i].hostname, c.hosts[0].addr, l))
    check("joining the job at %s:%d" % (c.hosts[0].addr, PORT) in res["two-1"][2],
          "two hosts: the joining host says where it joins")


def scenario_failure(c):
    argv = command(c, 1, "--nnodes", "3", "worker.py")
    procs = [start(c, 1, argv, "fail-1", env={"SLEEP_S": "120"})]
    time.sleep(0.3)
    procs += [start(c, i, argv, "fail-%d" % i, env={"SLEEP_S": "120", "FAIL_HERE": "1" if i == 2 else "0"})
              for i in (0, 2)]
    res = finish_all(procs, 90)
    for name, (code, _, _) in sorted(res.items()):
        check(code == 7, "three hosts: a worker's exit code 7 on host 2 ends %s's command with 7, got %s" % (name, code))
    err = res["fail-1"][2]
    check("exited with code 7" in err and c.hosts[2].hostname in err,
          "three hosts: the launcher's summary names the failed rank's host %s" % c.hosts[2].hostname)
    # The other workers sleep 120 s: the failure stopped them, and every host's command ended within seconds of the
    # first (the launcher's host learns of the failure first, the others from its Shutdown).
    ends = [p.ended for p in procs if p.ended is not None]
    check(len(ends) == 3 and max(ends) - min(ends) < 5,
          "three hosts: every command ended within 5 s of the first: %s" % [
              round(e - min(ends), 2) for e in ends])


def scenario_interrupt(c):
    argv = command(c, 0, "--nnodes", "2", "--tee", "3", "worker.py")
    launcher = start(c, 0, argv, "int-0", env={"SLEEP_S": "120"})
    joiner = start(c, 1, argv, "int-1", env={"SLEEP_S": "120"})

    def shown(i):
        with open(os.path.join(WORK, "int-%d.out" % i)) as f:
            return len(lines(f.read()))
    # Wait until every worker printed its line, then Ctrl-C on the joining host.
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and shown(0) + shown(1) < 4:
        time.sleep(0.2)
    check(shown(0) + shown(1) == 4, "Ctrl-C: the 4 workers started")
    os.killpg(joiner.pid, signal.SIGINT)
    sent = time.monotonic()
    res = finish_all([launcher, joiner], 30)
    took = time.monotonic() - sent
    for name, (code, _, _) in sorted(res.items()):
        check(code == 130, "Ctrl-C on the joining host: %s exits 130, got %s" % (name, code))
    check(took < 15, "Ctrl-C on the joining host: both commands ended %.1f s after it" % took)
    check("was interrupted by SIGINT" in res["int-0"][2], "the launcher says which node was interrupted")
    left = c.processes_besides((0, 1), set(), 5)
    check(not left, "Ctrl-C: no process of the job left on either host: %s" % {i: describe(p) for i, p in left.items()})


def scenario_node_rank(c):
    procs = []
    logs = os.path.join(WORK, "torchrun-logs")
    for i, rank in ((0, 1), (1, 0)):   # host 1 owns the endpoint and is node 0; host 0 is node 1
        procs.append(start(c, i, command(c, 1, "--nnodes", "2", "--node-rank", str(rank), "--tee", "3", "--redirects",
                                         "3", "--log-dir", logs, "worker.py"), "rank-%d" % i))
    res = finish_all(procs, 60)
    for i, rank in ((0, 1), (1, 0)):
        code, out, _ = res["rank-%d" % i]
        got = lines(out)
        check(code == 0 and sorted(int(l["group"]) for l in got) == [rank, rank],
              "--node-rank %d on host %d: its ranks are in group %d: %s" % (rank, i, rank, got))
    # --log-dir: one directory per host (the file system is shared here, as NFS homes are), each with its node's ranks.
    runs = sorted(os.listdir(logs)) if os.path.isdir(logs) else []
    laid = {}
    for run in runs:
        for local in ("0", "1"):
            path = os.path.join(logs, run, "attempt_0", local, "stdout.log")
            if os.path.exists(path):
                with open(path) as f:
                    m = re.search(r"rank=(\d+) world=4 group=(\d+) local=(\d+)", f.read())
                if m:
                    laid.setdefault(run, []).append((local,) + m.groups())
    by_group = sorted(sorted(v) for v in laid.values())
    check(len(runs) == 2 and by_group == [[("0", "0", "0", "0"), ("1", "1", "0", "1")],
                                          [("0", "2", "1", "0"), ("1", "3", "1", "1")]],
          "--log-dir: each host lays out its own 2 ranks by local rank: %s" % laid)


def scenario_missing(c):
    t0 = time.monotonic()
    res = finish_all([start(c, 0, command(c, 0, "--nnodes", "2", "--rdzv-conf", "join_timeout=3", "worker.py"),
                            "missing-0")], 40)
    code, _, err = res["missing-0"]
    check(code == 1 and "only 1 node available" in err and "1 missing" in err,
          "a node that never comes: exit 1 naming the missing node (got %s)" % code)
    check(time.monotonic() - t0 < 20, "a node that never comes: the error comes after the join timeout (3 s)")


def scenario_elastic(c):
    argv = command(c, 0, "--nnodes", "1:3", "--rdzv-conf", "join_timeout=4", "--tee", "3", "worker.py")
    res = finish_all([start(c, 0, argv, "elastic-0"), start(c, 1, argv, "elastic-1")], 60)
    for i in (0, 1):
        code, out, _ = res["elastic-%d" % i]
        got = lines(out)
        check(code == 0 and len(got) == 2 and all(l["world"] == "4" for l in got),
              "--nnodes 1:3 with 2 hosts: host %d runs 2 of 4 ranks: %s" % (i, got))


def scenario_bad_input(c):
    # SO_REUSEADDR: the earlier scenarios' connections to PORT may still be in TIME_WAIT, which refuses a plain bind.
    # It does not let dtrain's own listener share the port with this one (that would take SO_REUSEPORT on both).
    busy = c.spawn(0, [PYTHON, "-c", "import socket,time; s=socket.socket(); "
                                     "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('%s', %d)); "
                                     "s.listen(); time.sleep(60)" % (c.hosts[0].addr, PORT)])
    check(c.wait_listening(1, c.hosts[0].addr, PORT, 10), "the process holding port %d listens" % PORT)
    cases = [
        (0, command(c, 0, "--nnodes", "2", "x.py"), ["--rdzv-endpoint", "port %d" % PORT, "in use"]),
        (1, command(c, 0, "--nnodes", "2", "--node-rank", "0", "x.py"), ["--node-rank 0", "launcher"]),
        (0, [DTRAIN, "run", "--nnodes", "2", "x.py"], ["--nnodes 2", "--rdzv-endpoint"]),
    ]
    for host, argv, words in cases:
        t = time.monotonic()
        r = c.run(host, argv, timeout=20, cwd=WORK)
        print("timing: bad input %s %.2f s" % (argv[-4:], time.monotonic() - t), flush=True)
        check(r.returncode == 2 and all(w in r.stderr for w in words),
              "%s on host %d: exit 2 naming %s (got %s: %s)" % (argv[2:], host, words, r.returncode, r.stderr[-300:]))
    os.killpg(busy.pid, signal.SIGKILL)
    busy.wait()


def main():
    with Cluster(3) as c:
        for scenario in (scenario_two_hosts, scenario_failure, scenario_interrupt, scenario_node_rank,
                         scenario_missing, scenario_elastic, scenario_bad_input):
            t = time.monotonic()
            scenario(c)
            print("timing: %s %.1f s" % (scenario.__name__, time.monotonic() - t), flush=True)
            left = c.processes_besides((0, 1, 2), set(), 10)
            check(not left, "%s: nothing left on any host: %s" % (scenario.__name__,
                                                                  {i: describe(p) for i, p in left.items()}))
    finish()


main()
