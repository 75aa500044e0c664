"""provider ssh on real separate hosts: each host (a network namespace behind a bridge) runs a real OpenSSH server;
the launcher, on a host of its own, starts one agent per host with `ssh HOST dtrain agent --join ...`, and the agents
dial back over mutual TLS. Checks:
  * 3 hosts x 2 workers: node ranks follow nodes.hosts (not join order), every worker runs on its host, the job
    exits 0 and nothing is left on any host once it ends (the agents and their ssh sessions end with the job);
  * a host whose ssh server is down: with count 2:3 the job runs on the 2 others; with count 3 it fails with exit 1
    and a message that names the host and what ssh said;
  * a worker failure on a remote host gives the usual summary and exit code, and no process is left.
Skips (exit 77) where namespaces cannot be built or OpenSSH's server is not installed."""

import os
import shutil
import subprocess
import time

from harness import DTRAIN, Run, check, describe, finish, write
from netns import Cluster, require_netns, skip

require_netns()
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH = shutil.which("ssh")
SSH_KEYGEN = shutil.which("ssh-keygen")
if not os.path.exists(SSHD) or SSH is None or SSH_KEYGEN is None:
    skip("OpenSSH (openssh-server, openssh-client) is not installed; scripts/setup.sh installs it")

LAUNCHER = 0            # host index of the launcher; hosts 1..3 run sshd
HOSTS = (1, 2, 3)
REPORT = "echo node=$DTRAIN_NODE_RANK rank=$RANK host=$(hostname) world=$WORLD_SIZE"


class Suite:
    def __init__(self, cluster):
        self.c = cluster
        self.dir = Run([]).dir
        self.secret = os.path.join(self.dir, "secret")
        subprocess.run([DTRAIN, "secret", "init", "--dir", self.secret], check=True, stdout=subprocess.DEVNULL)
        self.key = os.path.join(self.dir, "id_ed25519")
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", self.key], check=True)
        host_key = os.path.join(self.dir, "host_ed25519")
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", host_key], check=True)
        self.authorized = os.path.join(self.dir, "authorized_keys")
        shutil.copy(self.key + ".pub", self.authorized)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self.sshd = {}
        self.host_key = host_key

    def start_sshd(self, i):
        h = self.c.hosts[i]
        config = write(os.path.join(self.dir, "sshd_%d.conf" % i), "\n".join([
            "ListenAddress %s" % h.addr, "Port 22", "HostKey %s" % self.host_key,
            "AuthorizedKeysFile %s" % self.authorized, "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "PidFile %s" % os.path.join(self.dir, "sshd_%d.pid" % i), "LogLevel ERROR", ""]))
        log = open(os.path.join(self.dir, "sshd_%d.log" % i), "ab")
        self.sshd[i] = self.c.spawn(i, [SSHD, "-D", "-e", "-f", config], stdout=log, stderr=log)
        check(self.c.wait_listening(LAUNCHER, h.addr, 22, 10), "sshd on host %d listening" % i)

    def stop_sshd(self, i):
        p = self.sshd.pop(i)
        p.kill()
        p.wait(timeout=10)

    def spec(self, name, command, count, extra=""):
        # Three spellings of a host: an address, user@address and address:port.
        hosts = [self.c.hosts[1].addr, "root@" + self.c.hosts[2].addr, self.c.hosts[3].addr + ":22"]
        ssh = ["ssh", "-i", self.key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3"]
        text = ("name: %s\nnodes:\n  provider: ssh\n  count: '%s'\n  hosts: [%s]\n  ssh_command: [%s]\n"
                "  join_timeout_s: 15\nworkers_per_node: 2\ncommand: %s\nshell: true\nstop: {grace_s: 1}\n"
                "health: {node_timeout_s: 5}\nlogs: {console: all}\n%s"
                % (name, count, ", ".join("'%s'" % h for h in hosts), ", ".join("'%s'" % a for a in ssh),
                   command, extra))
        return write(os.path.join(self.dir, name + ".yaml"), text)

    def launch(self, spec, timeout=90):
        code, stdout, stderr = self.c.run_logged(LAUNCHER, [DTRAIN, "launch", spec, "--secret-dir", self.secret],
                                                 self.dir, os.path.basename(spec), timeout, cwd=self.dir)
        check(code is not None, "launcher exits within %d s" % timeout)
        return code, stdout, stderr

    def leftovers(self, timeout):
        """Processes on the sshd hosts other than sshd itself, after waiting up to `timeout` for them to end."""
        return self.c.processes_besides(HOSTS, {p.pid for p in self.sshd.values()}, timeout)


def scenario_success(s):
    code, stdout, stderr = s.launch(s.spec("ssh-ok", "'%s'" % REPORT, 3))
    check(code == 0, "3 hosts over ssh: exit 0, got %s" % code)
    for node, host in enumerate(HOSTS):
        for local in range(2):
            rank = node * 2 + local
            line = "node=%d rank=%d host=%s world=6" % (node, rank, s.c.hosts[host].hostname)
            check(line in stdout, "rank %d runs on nodes.hosts[%d] (%s)" % (rank, node, s.c.hosts[host].hostname))
    check("over ssh" in stderr, "the launcher says it starts agents over ssh")
    left = s.leftovers(5)
    check(not left, "no agent, ssh session or worker left on any host: %s" % left)


def scenario_worker_fails(s):
    code, _, stderr = s.launch(s.spec("ssh-fail", "'if [ $RANK = 3 ]; then echo boom >&2; exit 7; fi; sleep 300'", 3))
    check(code == 7, "a remote worker's exit code 7 is the launcher's, got %s" % code)
    check("rank 3" in stderr and "boom" in stderr, "the summary names rank 3 and shows its stderr")
    left = s.leftovers(8)
    check(not left, "every remote worker (sleep 300) was stopped: %s" % left)


def scenario_host_down(s):
    s.stop_sshd(3)
    code, stdout, stderr = s.launch(s.spec("ssh-elastic", "'%s'" % REPORT, "2:3"))
    check(code == 0, "count 2:3 with host 3's sshd down: the job runs on the 2 others, exit %s" % code)
    check("world=4" in stdout and "node=1 rank=3 host=%s" % s.c.hosts[2].hostname in stdout,
          "2 nodes in nodes.hosts order, world 4")
    check("nodes.hosts[2]" in stderr and "ssh exited with code 255" in stderr,
          "the launcher names the host it could not reach and how ssh ended")
    code, _, stderr = s.launch(s.spec("ssh-fixed", "'%s'" % REPORT, 3))
    check(code == 1, "count 3 with a host down: exit 1, got %s" % code)
    check("nodes.hosts[2]" in stderr and "Connection refused" in stderr and "at least 3" in stderr,
          "the failure names the host, ssh's reason and the node count needed")
    left = s.leftovers(5)
    check(not left, "nothing left after the host-down jobs: %s" % left)
    s.start_sshd(3)


def main():
    with Cluster(4) as cluster:
        s = Suite(cluster)
        for i in HOSTS:
            s.start_sshd(i)
        scenario_success(s)
        scenario_worker_fails(s)
        scenario_host_down(s)
        for i in list(s.sshd):
            s.stop_sshd(i)
        # sshd forks a child for each connection (the readiness probes too); give the last ones a moment to end.
        deadline = time.monotonic() + 5
        while cluster.leaked() and time.monotonic() < deadline:
            time.sleep(0.1)
        leaked = {ns: describe(pids) for ns, pids in cluster.leaked().items()}
        check(not leaked, "no process left in any namespace: %s" % leaked)
    finish()


main()
