"""provider slurm on a real Slurm cluster built for the test: slurmctld on the launcher's host and slurmd on three
other hosts (network namespaces behind a bridge), authenticated by a munged that only this test uses. The launcher
runs inside an allocation (`salloc -N 3 dtrain launch ...`), starts one agent per node with a single srun, and the
agents dial back over mutual TLS. Checks:
  * 3 nodes x 2 workers with no nodes.count (the allocation's size): node ranks follow SLURM_NODEID, each worker
    runs on its node, exit 0, and nothing is left on any node once the job ends;
  * a worker failure gives its exit code and summary, and every worker on every node is stopped;
  * `srun dtrain run --nproc-per-node 2 ...` (the same command on 2 nodes, torchrun's way, no endpoint or node rank
    given): one job of 4 ranks whose node ranks are the SLURM_NODEIDs, the launcher on node 0's NodeAddr; exit 0,
    nothing left on any node.
Skips (exit 77) where namespaces cannot be built or Slurm (slurm-wlm, munge) is not installed."""

import os
import re
import shutil
import subprocess
import time

from harness import DTRAIN, Run, check, describe, finish, write
from netns import Cluster, require_netns, skip

require_netns()
TOOLS = {name: shutil.which(name) or "/usr/sbin/" + name for name in ("slurmctld", "slurmd", "munged")}
SALLOC = shutil.which("salloc")
if SALLOC is None or not all(os.path.exists(p) for p in TOOLS.values()):
    skip("Slurm is not installed (slurm-wlm, munge); scripts/setup.sh installs it")

CONTROLLER = 0          # host of slurmctld and of the launcher
NODES = (1, 2, 3)       # hosts running slurmd
REPORT = "echo node=$DTRAIN_NODE_RANK rank=$RANK host=$(hostname) world=$WORLD_SIZE"
# slurmd needs cgroup v1 hierarchies; `ip netns exec` gives each command a fresh /sys without them.
CGROUPS = ("mount -t tmpfs tmpfs /sys/fs/cgroup && for c in cpu cpuacct cpuset memory devices freezer; do "
           "mkdir /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || exit 1; done && exec \"$@\"")


class SlurmCluster:
    def __init__(self, cluster):
        self.c = cluster
        self.dir = Run([]).dir
        os.chmod(self.dir, 0o755)
        self.secret = os.path.join(self.dir, "secret")
        subprocess.run([DTRAIN, "secret", "init", "--dir", self.secret], check=True, stdout=subprocess.DEVNULL)
        key = os.path.join(self.dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.socket = os.path.join(self.dir, "munge.sock")
        # One munged serves every host: its socket is a file, and the hosts share the file system.
        self.munged = subprocess.Popen(
            [TOOLS["munged"], "-F", "--force", "-S", self.socket, "--key-file", key,
             "--pid-file", os.path.join(self.dir, "munged.pid"), "--seed-file", os.path.join(self.dir, "munge.seed"),
             "--log-file", os.path.join(self.dir, "munged.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(os.path.exists(self.socket), "munged started")
        self.conf = self.write_config()
        self.env = {"SLURM_CONF": self.conf}
        os.makedirs(os.path.join(self.dir, "state"), exist_ok=True)
        self.daemons = {}
        self.daemons[CONTROLLER] = self.c.spawn(CONTROLLER, [TOOLS["slurmctld"], "-D", "-i", "-f", self.conf],
                                                env=self.env, stdout=self.log("slurmctld"), stderr=subprocess.STDOUT)
        for i in NODES:
            self.daemons[i] = self.c.spawn(i, ["/bin/sh", "-c", CGROUPS, "sh", TOOLS["slurmd"], "-D", "-N", "n%d" % i,
                                               "-f", self.conf],
                                           env=self.env, stdout=self.log("slurmd_%d" % i), stderr=subprocess.STDOUT)
        self.wait_idle()

    def log(self, name):
        return open(os.path.join(self.dir, name + ".out"), "ab")

    def write_config(self):
        d = self.dir
        nodes = "\n".join("NodeName=n%d NodeAddr=%s CPUs=2 State=UNKNOWN" % (i, self.c.hosts[i].addr) for i in NODES)
        write(os.path.join(d, "cgroup.conf"), "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n")
        return write(os.path.join(d, "slurm.conf"), "\n".join([
            "ClusterName=dtraintest",
            "SlurmctldHost=%s(%s)" % (self.c.hosts[CONTROLLER].hostname, self.c.hosts[CONTROLLER].addr),
            "AuthType=auth/munge", "AuthInfo=socket=%s" % self.socket, "CredType=cred/munge",
            "SlurmUser=root", "SlurmdUser=root",
            "StateSaveLocation=%s/state" % d, "SlurmdSpoolDir=%s/spool_%%n" % d,
            "SlurmctldPidFile=%s/slurmctld.pid" % d, "SlurmdPidFile=%s/slurmd_%%n.pid" % d,
            "SlurmctldLogFile=%s/slurmctld.log" % d, "SlurmdLogFile=%s/slurmd_%%n.log" % d,
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/linear",
            "SchedulerType=sched/builtin", "MpiDefault=none", "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "SlurmctldTimeout=10", "SlurmdTimeout=10", "InactiveLimit=0", "KillWait=2",
            nodes,
            "PartitionName=test Nodes=%s Default=YES MaxTime=INFINITE State=UP" % ",".join("n%d" % i for i in NODES),
            ""]))

    def wait_idle(self, timeout=30):
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            r = self.c.run(CONTROLLER, ["sinfo", "-h", "-o", "%D %t"], timeout=10, env=self.env)
            out = r.stdout.strip()
            if out == "3 idle":
                return
            time.sleep(0.3)
        check(False, "Slurm cluster up with 3 idle nodes (sinfo says %r)" % out)

    def spec(self, name, command, extra=""):
        text = ("name: %s\nnodes: {provider: slurm, join_timeout_s: 30}\nworkers_per_node: 2\ncommand: %s\n"
                "shell: true\nstop: {grace_s: 1}\nhealth: {node_timeout_s: 5}\nlogs: {console: all}\n%s"
                % (name, command, extra))
        return write(os.path.join(self.dir, name + ".yaml"), text)

    def launch(self, spec, timeout=120):
        argv = [SALLOC, "-N", "3", "--immediate=20", DTRAIN, "launch", spec, "--secret-dir", self.secret]
        code, stdout, stderr = self.c.run_logged(CONTROLLER, argv, self.dir, os.path.basename(spec), timeout,
                                                 env=self.env, cwd=self.dir)
        check(code is not None, "salloc + launcher exit within %d s" % timeout)
        return code, stdout, stderr

    def leftovers(self, timeout):
        """Processes on the compute hosts other than slurmd, after waiting up to `timeout` for them to end."""
        left = self.c.processes_besides(NODES, {self.daemons[i].pid for i in NODES}, timeout)
        return {i: describe(p) for i, p in left.items()}

    def close(self):
        for p in self.daemons.values():
            p.terminate()
        for p in self.daemons.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.munged.terminate()
        self.munged.wait(timeout=10)


def scenario_success(s):
    code, stdout, stderr = s.launch(s.spec("slurm-ok", "'%s'" % REPORT))
    check(code == 0, "3 Slurm nodes: exit 0, got %s" % code)
    for node, host in enumerate(NODES):
        for local in range(2):
            rank = node * 2 + local
            line = "node=%d rank=%d host=%s world=6" % (node, rank, s.c.hosts[host].hostname)
            check(line in stdout, "rank %d runs on SLURM_NODEID %d (%s)" % (rank, node, s.c.hosts[host].hostname))
    check("with srun" in stderr, "the launcher says it starts agents with srun")
    left = s.leftovers(10)
    check(not left, "no agent, step or worker left on any node: %s" % left)


def scenario_worker_fails(s):
    code, _, stderr = s.launch(s.spec("slurm-fail", "'if [ $RANK = 5 ]; then echo boom >&2; exit 9; fi; sleep 300'"))
    check(code == 9, "a worker's exit code 9 is the launcher's, got %s" % code)
    check("rank 5 on node 2" in stderr and "boom" in stderr, "the summary names rank 5 on node 2 and its stderr")
    left = s.leftovers(10)
    check(not left, "every worker (sleep 300) on every node was stopped: %s" % left)


def scenario_srun_run(s):
    line = "node=$DTRAIN_NODE_RANK slurm=$SLURM_NODEID rank=$RANK world=$WORLD_SIZE group=$GROUP_RANK"
    argv = [SALLOC, "-N", "2", "--immediate=20", "srun", "--ntasks-per-node", "1", DTRAIN, "run", "--secret-dir",
            s.secret, "--nproc-per-node", "2", "--tee", "3", "--no-python", "sh", "-c", "echo " + line]
    code, stdout, stderr = s.c.run_logged(CONTROLLER, argv, s.dir, "srun-run", 120, env=s.env, cwd=s.dir)
    check(code == 0, "srun dtrain run on 2 nodes: exit 0, got %s" % code)
    got = sorted(re.findall(r"^\[(\d)\] node=(\d) slurm=(\d) rank=(\d) world=(\d) group=(\d)$", stdout, re.M))
    want = [(str(r), str(r // 2), str(r // 2), str(r), "4", str(r // 2)) for r in range(4)]
    check(got == want, "srun dtrain run: 4 ranks, node ranks = SLURM_NODEID = GROUP_RANK, each shown once: %s" % got)
    check("joining the job at" in stderr, "the node with SLURM_NODEID 1 joins node 0's launcher")
    left = s.leftovers(10)
    check(not left, "no dtrain, worker or step left on any node: %s" % left)


def main():
    with Cluster(4) as cluster:
        s = SlurmCluster(cluster)
        try:
            scenario_success(s)
            scenario_worker_fails(s)
            scenario_srun_run(s)
        finally:
            s.close()
        deadline = time.monotonic() + 5
        while cluster.leaked() and time.monotonic() < deadline:
            time.sleep(0.1)
        leaked = {ns: describe(pids) for ns, pids in cluster.leaked().items()}
        check(not leaked, "no process left in any namespace: %s" % leaked)
    finish()


main()
