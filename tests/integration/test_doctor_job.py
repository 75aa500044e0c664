"""`dtrain doctor JOB.yaml` and `dtrain bench`, through real agents:
  * provider local, 2 nodes: every node's checks and the checks across nodes come back, as a table and as JSON
    ({"nodes":[...], "cluster":{"checks":[...]}}), and the exit code is 1 exactly when a check failed;
  * real separate hosts (network namespaces): node 0 firewalls every TCP port but its agent's (silent DROP), so
    node 1 cannot reach node 0's MASTER_PORT range: cluster.master_port fails naming both nodes and the timeout,
    cluster.agents passes; a nodes.interface that does not exist fails cluster.interface on every node;
  * `dtrain run -n 2 -- dtrain bench allreduce` prints an nccl-tests-like table with no wrong element.
Nothing of the jobs is left running. The namespace part skips (with its reason) where namespaces cannot be made."""

import json
import os
import subprocess

from harness import DTRAIN, Run, check, finish, write
import netns

AGENT_PORT = 29400


RUN = Run([])   # its directory and its DTRAIN_TEST_TAG, which every process started here carries


def doctor(args, cwd, timeout=90, run_on=None, cluster=None, env=None):
    argv = [DTRAIN, "doctor"] + args
    if cluster is None:
        p = subprocess.run(argv, cwd=cwd, env=RUN.env, capture_output=True, text=True, timeout=timeout)
    else:
        p = cluster.run(run_on, argv, timeout=timeout, cwd=cwd, env=env)
    print("--- dtrain doctor %s: exit %d\n%s%s---" % (" ".join(args), p.returncode, p.stdout, p.stderr), flush=True)
    return p


def statuses(checks):
    return {c["id"]: c["status"] for c in checks}


def scenario_local(work):
    spec = write(os.path.join(work, "local.yaml"), "name: doc\nnodes: {count: 2}\nworkers_per_node: 1\ncommand: [true]\n")
    p = doctor([spec, "--json"], work)
    report = json.loads(p.stdout)
    check(len(report["nodes"]) == 2, "two node reports")
    check(all(any(c["id"].startswith("limits.") for c in n["checks"]) for n in report["nodes"]),
          "each node report has its node checks")
    cluster = statuses(report["cluster"]["checks"])
    for id_ in ("cluster.answered", "cluster.dtrain_version", "cluster.nccl_version", "cluster.clock_skew",
                "cluster.master_port", "cluster.agents"):
        check(cluster.get(id_) == "pass", "%s passes on one machine (got %s)" % (id_, cluster.get(id_)))
    any_fail = any(c["status"] == "fail" for n in report["nodes"] for c in n["checks"]) or "fail" in cluster.values()
    check(p.returncode == (1 if any_fail else 0), "exit %d matches the statuses" % p.returncode)
    table = doctor([spec], work)
    check("across the 2 nodes of doc" in table.stdout and "cluster.master_port" in table.stdout,
          "the table shows the checks across nodes")
    bad = doctor([os.path.join(work, "missing.yaml")], work)
    check(bad.returncode == 2, "a missing spec is a usage error (exit 2), got %d" % bad.returncode)


def scenario_hosts(work):
    reason = netns.skip_reason()
    if reason:
        print("SKIPPED (namespace part): %s" % reason, flush=True)
        return
    with netns.Cluster(3) as c:
        agents = [c.spawn(i, [DTRAIN, "agent", "--listen", "%s:%d" % (c.hosts[i].addr, AGENT_PORT), "--insecure",
                              "--run-dir", os.path.join(RUN.dir, "agent-runs-%d" % i)],
                          env={"DTRAIN_TEST_TAG": RUN.tag}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in (0, 1)]
        for i in (0, 1):
            check(c.wait_listening(2, c.hosts[i].addr, AGENT_PORT, 10), "the agent on host %d listens" % i)
        # Node 0 accepts its agent's port and nothing else, silently.
        ipt = ["iptables", "-w", "5"]
        for rule in (["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
                     ["-A", "INPUT", "-p", "tcp", "--dport", str(AGENT_PORT), "-j", "ACCEPT"],
                     ["-A", "INPUT", "-m", "state", "--state", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                     ["-A", "INPUT", "-p", "tcp", "-j", "DROP"]):
            c.run(0, ipt + rule, timeout=10, check=True, hostname=False)
        agents_list = ", ".join("'%s:%d'" % (c.hosts[i].addr, AGENT_PORT) for i in (0, 1))
        spec = write(os.path.join(work, "hosts.yaml"),
                     "name: doc-hosts\nnodes: {provider: static, agents: [%s], interface: eth9}\n"
                     "workers_per_node: 1\ncommand: [true]\n" % agents_list)
        p = doctor([spec, "--json", "--insecure"], work, run_on=2, cluster=c, env={"DTRAIN_TEST_TAG": RUN.tag})
        report = json.loads(p.stdout)
        by_id = {x["id"]: x for x in report["cluster"]["checks"]}
        master = by_id["cluster.master_port"]
        check(master["status"] == "fail" and "node 1" in master["message"] and c.hosts[0].addr in master["message"]
              and "timed out" in master["message"],
              "node 1 cannot reach node 0's MASTER_PORT range: %s" % master["message"])
        check(by_id["cluster.agents"]["status"] == "pass", "the agents still reach each other")
        iface = by_id["cluster.interface"]
        check(iface["status"] == "fail" and "eth9" in iface["message"] and "node 0" in iface["message"]
              and "node 1" in iface["message"], "nodes.interface eth9 is missing on both nodes: %s" % iface["message"])
        check(p.returncode == 1, "a failed check makes the exit code 1, got %d" % p.returncode)
        for a in agents:
            a.terminate()
        for a in agents:
            a.wait(timeout=15)


def scenario_bench(work):
    p = subprocess.run([DTRAIN, "run", "-n", "2", "--", DTRAIN, "bench", "allreduce", "-b", "64K", "-e", "1M", "-f", "4",
                        "-n", "3"], cwd=work, env=RUN.env, capture_output=True, text=True, timeout=120)
    print("--- dtrain bench: exit %d\n%s%s---" % (p.returncode, p.stdout, p.stderr), flush=True)
    check(p.returncode == 0, "the allreduce bench over 2 ranks exits 0")
    rows = [l for l in p.stdout.splitlines() if l.startswith("[0]") and l.split()[1].isdigit()]
    check(len(rows) == 3, "rank 0 prints one row per size (64K, 256K, 1M), got %d" % len(rows))
    check(all(l.split()[-1] == "0" for l in rows), "no wrong element in any row")
    check("busbw" in p.stdout, "the table has the busbw column")


def main():
    scenario_local(RUN.dir)
    scenario_bench(RUN.dir)
    scenario_hosts(RUN.dir)
    RUN.assert_no_leaks()
    finish()


main()
