"""Real, separate network hosts for multi-node integration tests, built from Linux network namespaces.

A Cluster is a small switched LAN that exists only inside namespaces this module creates:

    switch namespace  <prefix>-sw   holds the bridge `br0` and one port `p<i>` per host
    host namespaces   <prefix>-h<i> each holds `lo` (up) and `eth0`, the other end of `p<i>`,
                                    with the address 10.A.B.<i+1>/24

Nothing is added to the root namespace (no interface, no route, no firewall rule), and the hosts have no default
route, so no packet can leave the cluster. The subnet 10.A.B.0/24 is random (A in 100..250) and is checked
against the root namespace's routes and against other live clusters.

Every process started on a host (spawn, run, Relay, free_port) runs as `ip netns exec <ns> ...` in a new session,
with the cluster's DTRAIN_TEST_TAG in its environment, so both `ip netns pids` and harness.tagged_pids find it.
By default a host also gets its own hostname (its namespace name, in a private UTS namespace) and an /etc/hosts
that names every host of the cluster (`<prefix>-h<i>` and `h<i>`).

Ports: each host has its own port space, so fixed ports are the simple choice (e.g. an agent on host i listens on
hosts[i].addr:29400 or 29400+i); free_port() exists for the rare case that needs an ephemeral one.

Faults (link_down, partition, rate_limit, kill_all, Relay delays) are recorded in the cluster's FaultLedger. The
test marks the faults its system survived, and at the end prints the ledger line:

    faults injected: 5, survived: 5, processes leaked: 0

Cleanup: close() (also run by `with`, at interpreter exit, and on SIGTERM) SIGKILLs every process in every
namespace of the cluster, deletes the namespaces (which removes the bridge and the veths), and verifies that none
of them is left. A run that was SIGKILLed leaves a state file under /run/dtrain-netns; the next Cluster (or
reap_stale()) removes what it describes once its owner is dead.

Skips: tests call require_netns() first; where namespaces cannot be made (not root, no `ip`/`iptables`/`tc`, no
permission) it prints `SKIPPED: <reason>` and exits with code 77 (ctest's SKIP_RETURN_CODE for these tests).

Every blocking step has a timeout; a command that fails raises NetnsError with its stderr.

Usage:

    from netns import Cluster, Relay, require_netns
    require_netns()
    with Cluster(3) as c:
        agents = [c.spawn(i, [DTRAIN, "agent", "--listen", "%s:29400" % c.hosts[i].addr]) for i in range(3)]
        c.partition(2)
        ...                       # the launcher must notice node 2 is gone
        c.ledger.survived()       # it did
        c.heal(2)
    print(c.ledger.line(leaked=0))

Also runnable as a helper: `python3 netns.py relay PORT ADDR PORT DELAY` and `python3 netns.py free-port` (used by
Relay and Cluster.free_port inside a namespace).
"""

import atexit
import ctypes
import ipaddress
import json
import os
import queue
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

SKIP_CODE = 77
STATE_DIR = "/run/dtrain-netns"
ETC_NETNS = "/etc/netns"
CMD_TIMEOUT = 10.0          # seconds for any single ip/iptables/tc command
KILL_TIMEOUT = 10.0         # seconds for emptying a namespace of processes
IP = shutil.which("ip") or "/usr/sbin/ip"
PYTHON = sys.executable or "/usr/bin/python3"
HERE = os.path.abspath(__file__)
CLONE_NEWNET = 0x40000000

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,19}$")


class NetnsError(RuntimeError):
    """A namespace, link, firewall or qdisc command failed (the message holds the command and its stderr)."""


class CleanupError(NetnsError):
    """close() could not remove everything: the message names what is left."""


def _log(msg):
    print("netns: " + msg, flush=True)


def _cmd(argv, timeout=CMD_TIMEOUT, check=True, input=None):
    """Runs a short command with a timeout; returns CompletedProcess, raises NetnsError on failure if check."""
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                            stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NetnsError("timed out after %.0f s: %s" % (timeout, " ".join(argv)))
    except OSError as e:
        raise NetnsError("cannot run %s: %s" % (argv[0], e))
    if check and cp.returncode != 0:
        raise NetnsError("%s -> exit %d: %s" % (" ".join(argv), cp.returncode, (cp.stderr or cp.stdout).strip()))
    return cp


def _ns_pids(ns):
    """Pids of the processes whose network namespace is ns (`ip netns pids`); [] if the namespace is gone."""
    cp = _cmd([IP, "netns", "pids", ns], check=False)
    if cp.returncode != 0:
        return []
    return [int(p) for p in cp.stdout.split() if p.isdigit()]


def _netns_list():
    """Names of the namespaces `ip netns list` shows."""
    cp = _cmd([IP, "netns", "list"], check=False)
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def _proc_start(pid):
    """A process's start time (clock ticks since boot), or None if it does not exist."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _empty_ns(ns, timeout=KILL_TIMEOUT):
    """SIGKILLs every process in ns until none is left (repeating, to catch ones forked meanwhile).

    Returns (pids that were killed, pids still there after timeout)."""
    killed = []
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in _ns_pids(ns) if p != os.getpid()]
        if not pids:
            return killed, []
        if time.monotonic() > deadline:
            return killed, pids
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
                if p not in killed:
                    killed.append(p)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _remove_ns(ns):
    """Empties and deletes one namespace and its /etc/netns directory.

    Returns (pids it killed, list of problems: empty when everything is gone)."""
    problems = []
    killed, left = _empty_ns(ns)
    if left:
        problems.append("%s: processes survive SIGKILL: %s" % (ns, left))
    if ns in _netns_list():
        cp = _cmd([IP, "netns", "delete", ns], check=False)
        if cp.returncode != 0 and ns in _netns_list():
            problems.append("%s: ip netns delete failed: %s" % (ns, cp.stderr.strip()))
    shutil.rmtree(os.path.join(ETC_NETNS, ns), ignore_errors=True)
    try:
        os.rmdir(ETC_NETNS)     # only if no other cluster uses it
    except OSError:
        pass
    return killed, problems


# ---------------------------------------------------------------------------------------------------------------
# Skip convention


_skip_cache = []


def skip_reason():
    """None if network namespaces, veth pairs, bridges, iptables and tc tbf all work here, else why not (cached).

    Probes with a throwaway namespace that is deleted again before returning."""
    if _skip_cache:
        return _skip_cache[0]
    reason = _probe()
    _skip_cache.append(reason)
    return reason


def _probe():
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (euid is %d)" % os.geteuid()
    for tool in ("ip", "iptables", "tc"):
        if not shutil.which(tool):
            return "`%s` is not installed (scripts/setup.sh installs it)" % tool
    ns = "dt%s-probe" % secrets.token_hex(3)
    steps = [
        [IP, "netns", "add", ns],
        [IP, "-n", ns, "link", "set", "lo", "up"],
        [IP, "-n", ns, "link", "add", "pa", "type", "veth", "peer", "name", "pb"],
        [IP, "-n", ns, "link", "add", "br0", "type", "bridge"],
        [IP, "-n", ns, "link", "set", "pa", "master", "br0"],
        [IP, "netns", "exec", ns, "iptables", "-w", "5", "-I", "INPUT", "!", "-i", "lo", "-j", "DROP"],
        [IP, "netns", "exec", ns, "tc", "qdisc", "add", "dev", "pb", "root", "tbf", "rate", "1mbit", "burst",
         "32kbit", "latency", "50ms"],
    ]
    try:
        for argv in steps:
            try:
                _cmd(argv)
            except NetnsError as e:
                return "cannot build network namespaces here: %s" % e
        return None
    finally:
        _remove_ns(ns)


def skip(reason):
    """Prints `SKIPPED: <reason>` and exits with code 77, the integration tests' skip convention."""
    print("SKIPPED: " + reason, flush=True)
    sys.exit(SKIP_CODE)


def require_netns():
    """Skips the test (exit 77) unless namespaces can be built here."""
    reason = skip_reason()
    if reason:
        skip(reason)


# ---------------------------------------------------------------------------------------------------------------
# Ledger


class FaultLedger:
    """Counts the faults a suite injected and the ones its system under test survived.

    injected(label) is called by the Cluster's fault methods; the test calls survived() once the system behaved
    as expected after a fault (for instance: the launcher noticed the partition and restarted the job)."""

    def __init__(self):
        self.events = []        # [{"label", "t", "survived"}] in injection order
        self.recoveries = []    # labels of link_up / heal / unlimit, for the record

    def injected(self, label):
        """Records a fault; returns its label."""
        self.events.append({"label": label, "t": time.monotonic(), "survived": False})
        return label

    def survived(self, label=None):
        """Marks a fault survived: the most recent unmarked one with this label, or the most recent unmarked one.

        Returns False (and marks nothing) if there is no such fault."""
        for ev in reversed(self.events):
            if not ev["survived"] and (label is None or ev["label"] == label):
                ev["survived"] = True
                return True
        return False

    def expect(self, condition, message, label=None):
        """harness.check(condition, message), and on success survived(label). Returns condition."""
        from harness import check
        if check(condition, message):
            self.survived(label)
        return condition

    @property
    def labels(self):
        return [ev["label"] for ev in self.events]

    @property
    def injected_count(self):
        return len(self.events)

    @property
    def survived_count(self):
        return sum(1 for ev in self.events if ev["survived"])

    def line(self, leaked=0):
        """`faults injected: N, survived: M, processes leaked: L` (leaked: a count, or a list/dict of pids)."""
        if isinstance(leaked, dict):
            leaked = sum(len(v) for v in leaked.values())
        elif not isinstance(leaked, int):
            leaked = len(leaked)
        return "faults injected: %d, survived: %d, processes leaked: %d" % (
            self.injected_count, self.survived_count, leaked)


# ---------------------------------------------------------------------------------------------------------------
# Cluster


class Host:
    """One host: index, ns (namespace name), addr (IPv4 address), ifname ("eth0"), hostname, port (switch port)."""

    def __init__(self, index, ns, addr, prefixlen, port):
        self.index = index
        self.ns = ns
        self.addr = addr
        self.prefixlen = prefixlen
        self.ifname = "eth0"
        self.hostname = ns
        self.port = port

    def __repr__(self):
        return "Host(%d, ns=%s, addr=%s)" % (self.index, self.ns, self.addr)


_live = []
_handlers_installed = []


def _close_all_live():
    for c in list(_live):
        try:
            c.close(raise_on_leftover=False)
        except Exception as e:  # noqa: BLE001 - at exit, report and go on with the next cluster
            print("netns: cleanup of %s failed: %s" % (c.prefix, e), file=sys.stderr, flush=True)


def _on_sigterm(signum, frame):
    _close_all_live()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_handlers():
    if _handlers_installed:
        return
    _handlers_installed.append(True)
    atexit.register(_close_all_live)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_sigterm)


def reap_stale():
    """Removes the namespaces of clusters whose owning process is gone (a run that was SIGKILLed).

    Returns the names of the namespaces it removed."""
    removed = []
    try:
        entries = os.listdir(STATE_DIR)
    except OSError:
        return removed
    for entry in entries:
        path = os.path.join(STATE_DIR, entry)
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError):
            continue
        owner, start = state.get("owner_pid"), state.get("owner_start")
        if owner and _proc_start(owner) == start:
            continue
        for ns in state.get("namespaces", []):
            if ns in _netns_list() or os.path.isdir(os.path.join(ETC_NETNS, ns)):
                _remove_ns(ns)
                removed.append(ns)
        try:
            os.unlink(path)
        except OSError:
            pass
    if removed:
        _log("removed stale namespaces of dead runs: %s" % " ".join(removed))
    return removed


def _in_use_subnets():
    """IPv4 networks routed in the root namespace (default routes excluded) or used by live clusters."""
    nets = []
    cp = _cmd([IP, "-j", "-4", "route", "show", "table", "all"], check=False)
    try:
        for r in json.loads(cp.stdout or "[]"):
            dst = r.get("dst", "default")
            if dst == "default":
                continue
            try:
                net = ipaddress.ip_network(dst, strict=False)
            except ValueError:
                continue
            if net.prefixlen > 0:
                nets.append(net)
    except ValueError:
        pass
    try:
        for entry in os.listdir(STATE_DIR):
            try:
                with open(os.path.join(STATE_DIR, entry)) as f:
                    nets.append(ipaddress.ip_network(json.load(f)["subnet"]))
            except (OSError, ValueError, KeyError):
                pass
    except OSError:
        pass
    return nets


def _pick_subnet():
    used = _in_use_subnets()
    rng = random.SystemRandom()
    for _ in range(64):
        net = ipaddress.ip_network("10.%d.%d.0/24" % (rng.randint(100, 250), rng.randint(0, 255)))
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetnsError("no free 10.x.y.0/24 subnet found (routes in use: %s)" % used)


_libc = []


def _setns_socket(ns, family, type_, proto):
    """Creates a socket inside namespace ns: a helper thread enters ns (setns affects only that thread), makes the
    socket and ends. The socket stays in ns for its whole life."""
    if not _libc:
        _libc.append(ctypes.CDLL(None, use_errno=True))
    result = {}

    def enter():
        try:
            fd = os.open("/run/netns/" + ns, os.O_RDONLY)
            try:
                if _libc[0].setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, "setns(%s): %s" % (ns, os.strerror(e)))
            finally:
                os.close(fd)
            result["sock"] = socket.socket(family, type_, proto)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            result["error"] = e

    t = threading.Thread(target=enter, name="setns-" + ns, daemon=True)
    t.start()
    t.join(CMD_TIMEOUT)
    if "error" in result:
        raise result["error"]
    if "sock" not in result:
        raise NetnsError("creating a socket in %s timed out" % ns)
    return result["sock"]


class Cluster:
    """n_hosts namespaces on one bridge. See the module doc; use as a context manager or call close().

    Attributes: prefix, tag (DTRAIN_TEST_TAG given to every process spawned), subnet, hosts, switch_ns,
    ledger (FaultLedger), verbose (log each fault with its duration)."""

    def __init__(self, n_hosts, prefix=None, hostnames=True, verbose=True):
        if not 1 <= n_hosts <= 200:
            raise ValueError("n_hosts must be 1..200, got %r" % (n_hosts,))
        self.prefix = prefix or "dt" + secrets.token_hex(3)
        if not _NAME_RE.match(self.prefix):
            raise ValueError("prefix must match %s, got %r" % (_NAME_RE.pattern, self.prefix))
        self.tag = uuid.uuid4().hex
        self.verbose = verbose
        self.hostnames = hostnames
        self.ledger = FaultLedger()
        self.switch_ns = self.prefix + "-sw"
        self.hosts = []
        self.closed = False
        self._procs = []
        self._limited = set()
        self._partitioned = set()
        _install_handlers()
        reap_stale()
        self.subnet = _pick_subnet()
        addrs = list(self.subnet.hosts())
        hosts = [Host(i, "%s-h%d" % (self.prefix, i), str(addrs[i]), self.subnet.prefixlen, "p%d" % i)
                 for i in range(n_hosts)]
        taken = set(_netns_list())
        for ns in [self.switch_ns] + [h.ns for h in hosts]:
            if ns in taken:
                raise NetnsError("namespace %s already exists" % ns)
        self.hosts = hosts
        self._write_state()
        _live.append(self)
        try:
            self._build()
        except BaseException:
            self.close(raise_on_leftover=False)
            raise

    # -- building -------------------------------------------------------------------------------------------

    def _state_path(self):
        return os.path.join(STATE_DIR, self.prefix + ".json")

    def _write_state(self):
        os.makedirs(STATE_DIR, exist_ok=True)
        state = {"owner_pid": os.getpid(), "owner_start": _proc_start(os.getpid()), "subnet": str(self.subnet),
                 "namespaces": self.namespaces}
        tmp = self._state_path() + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self._state_path())

    @property
    def namespaces(self):
        """Every namespace of the cluster: the switch first, then the hosts."""
        return [self.switch_ns] + [h.ns for h in self.hosts]

    def _build(self):
        t0 = time.monotonic()
        sw = self.switch_ns
        _cmd([IP, "netns", "add", sw])
        _cmd([IP, "-n", sw, "link", "set", "lo", "up"])
        _cmd([IP, "-n", sw, "link", "add", "br0", "type", "bridge", "forward_delay", "0", "stp_state", "0"])
        _cmd([IP, "-n", sw, "link", "set", "br0", "up"])
        hosts_file = self._hosts_file()
        for h in self.hosts:
            _cmd([IP, "netns", "add", h.ns])
            if self.hostnames:
                d = os.path.join(ETC_NETNS, h.ns)
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, "hosts"), "w") as f:
                    f.write(hosts_file)
            _cmd([IP, "-n", h.ns, "link", "set", "lo", "up"])
            _cmd([IP, "-n", sw, "link", "add", h.port, "type", "veth", "peer", "name", h.ifname, "netns", h.ns])
            _cmd([IP, "-n", sw, "link", "set", h.port, "master", "br0"])
            _cmd([IP, "-n", sw, "link", "set", h.port, "up"])
            _cmd([IP, "-n", h.ns, "addr", "add", "%s/%d" % (h.addr, h.prefixlen), "dev", h.ifname])
            _cmd([IP, "-n", h.ns, "link", "set", h.ifname, "up"])
        if self.verbose:
            _log("cluster %s: %d hosts on %s (%s) built in %.2f s" % (
                self.prefix, len(self.hosts), self.subnet, ", ".join(h.addr for h in self.hosts),
                time.monotonic() - t0))

    def _hosts_file(self):
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        for h in self.hosts:
            lines.append("%s\t%s h%d" % (h.addr, h.hostname, h.index))
        return "\n".join(lines) + "\n"

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(raise_on_leftover=exc_type is None)
        return False

    def _host(self, i):
        if isinstance(i, Host):
            return i
        return self.hosts[i]

    def _ns_argv(self, i, argv, hostname=None):
        h = self._host(i)
        hostname = self.hostnames if hostname is None else hostname
        prefix = [IP, "netns", "exec", h.ns]
        if hostname:
            # A private UTS namespace named after the host; exec keeps the pid, so Popen.pid is argv's pid.
            prefix += ["unshare", "--uts", "--", "/bin/sh", "-c", 'hostname "$0" && exec "$@"', h.hostname]
        return prefix + [str(a) for a in argv]

    def _env(self, env):
        e = dict(os.environ)
        e["DTRAIN_TEST_TAG"] = self.tag
        e.update(env or {})
        return e

    # -- processes ------------------------------------------------------------------------------------------

    def spawn(self, i, argv, env=None, hostname=None, **popen_kwargs):
        """Starts argv on host i (`ip netns exec`), in a new session; returns the subprocess.Popen.

        env: variables added to (overriding) this process's environment; DTRAIN_TEST_TAG is the cluster's tag
        unless env sets it. hostname: run in a private UTS namespace named after the host (default: the
        cluster's `hostnames`). Other keyword arguments go to Popen (stdin defaults to /dev/null). The process is
        SIGKILLed by close() if still running."""
        if self.closed:
            raise NetnsError("cluster %s is closed" % self.prefix)
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        popen_kwargs["start_new_session"] = True
        p = subprocess.Popen(self._ns_argv(i, argv, hostname), env=self._env(env), **popen_kwargs)
        self._procs.append(p)
        p.dtrain_ns = self._host(i).ns  # where close() reports it, if it has to kill it
        return p

    def run(self, i, argv, timeout, env=None, hostname=None, check=False, **run_kwargs):
        """Runs argv on host i to completion (stdout/stderr captured as text unless given); CompletedProcess.

        Raises subprocess.TimeoutExpired after timeout seconds (the process is killed), and
        CalledProcessError on a non-zero exit if check."""
        if self.closed:
            raise NetnsError("cluster %s is closed" % self.prefix)
        if "stdout" not in run_kwargs and "stderr" not in run_kwargs:
            run_kwargs["capture_output"] = True
        run_kwargs.setdefault("text", True)
        run_kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(self._ns_argv(i, argv, hostname), env=self._env(env), timeout=timeout, check=check,
                              start_new_session=True, **run_kwargs)

    def run_logged(self, i, argv, log_dir, name, timeout, env=None, cwd=None):
        """Runs argv on host i to its end with stdout and stderr in <log_dir>/<name>.out and .err, and prints both.

        Returns (exit code, stdout, stderr); the code is None when it ran past `timeout` seconds (it was killed)."""
        out, err = os.path.join(log_dir, name + ".out"), os.path.join(log_dir, name + ".err")
        with open(out, "w") as o, open(err, "w") as e:
            proc = self.spawn(i, argv, env=env, stdout=o, stderr=e, cwd=cwd)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
        with open(out) as o, open(err) as e:
            stdout, stderr = o.read(), e.read()
        print("--- %s: exit %s\n--- stdout\n%s--- stderr\n%s---" % (name, code, stdout, stderr), flush=True)
        return code, stdout, stderr

    def processes_besides(self, hosts, keep, timeout):
        """{host index: pids} of the processes on `hosts` other than the pids in `keep` (daemons the test runs),
        after waiting up to `timeout` seconds for them to end; {} when none is left."""
        deadline = time.monotonic() + timeout
        while True:
            left = {i: [p for p in self.pids(i) if p not in keep] for i in hosts}
            left = {i: p for i, p in left.items() if p}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def pids(self, i):
        """Pids of the live processes on host i (`ip netns pids`)."""
        return _ns_pids(self._host(i).ns)

    def leaked(self):
        """{namespace: [pids]} of every namespace of the cluster (switch included) that has processes in it."""
        out = {}
        for ns in self.namespaces:
            pids = _ns_pids(ns)
            if pids:
                out[ns] = pids
        return out

    def free_port(self, i, timeout=CMD_TIMEOUT):
        """A TCP port that was free on host i a moment ago (bound to port 0 there by a helper, then released).

        Another process may take it meanwhile; fixed ports per host (29400 + i) are simpler and race-free."""
        cp = self.run(i, [PYTHON, HERE, "free-port", self._host(i).addr], timeout=timeout, hostname=False)
        if cp.returncode != 0 or not cp.stdout.strip().isdigit():
            raise NetnsError("free-port on %s failed: %s" % (self._host(i).ns, cp.stderr.strip()))
        return int(cp.stdout.strip())

    def socket(self, i, family=socket.AF_INET, type=socket.SOCK_STREAM, proto=0):  # noqa: A002 - socket's names
        """A socket of this process that lives in host i's network namespace (for in-test clients and servers)."""
        return _setns_socket(self._host(i).ns, family, type, proto)

    def tcp_connect(self, i, addr, port, timeout):
        """Tries a TCP connect from host i to addr:port. Returns (outcome, seconds, socket or None), outcome one of
        "connected", "refused" (RST), "timeout" (silence), "unreachable" (no route / host unreachable), or the
        errno name. The caller closes the socket."""
        s = self.socket(i)
        s.settimeout(timeout)
        t0 = time.monotonic()
        try:
            s.connect((addr, port))
            return "connected", time.monotonic() - t0, s
        except socket.timeout:
            outcome = "timeout"
        except ConnectionRefusedError:
            outcome = "refused"
        except OSError as e:
            import errno as errno_mod
            if e.errno in (errno_mod.EHOSTUNREACH, errno_mod.ENETUNREACH):
                outcome = "unreachable"
            else:
                outcome = errno_mod.errorcode.get(e.errno, str(e))
        took = time.monotonic() - t0
        s.close()
        return outcome, took, None

    def wait_listening(self, i, addr, port, timeout):
        """Tries TCP connects from host i to addr:port until one connects (True) or `timeout` seconds pass (False):
        for a server just spawned on another host."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            outcome, _, sock = self.tcp_connect(i, addr, port, 0.5)
            if sock:
                sock.close()
            if outcome == "connected":
                return True
            time.sleep(0.05)
        return False

    def ping(self, i, dst, wait_s=1.0):
        """One ICMP echo from host i to dst (a host index or an address), waiting wait_s; True if answered."""
        addr = self._host(dst).addr if isinstance(dst, (int, Host)) else dst
        try:
            cp = self.run(i, ["ping", "-n", "-q", "-c1", "-W", "%g" % wait_s, addr], timeout=wait_s + 5,
                          hostname=False)
        except subprocess.TimeoutExpired:
            return False
        return cp.returncode == 0

    # -- faults ---------------------------------------------------------------------------------------------

    def _fault(self, label, steps, count=True):
        t0 = time.monotonic()
        for argv in steps:
            _cmd(argv)
        took = time.monotonic() - t0
        if count:
            self.ledger.injected(label)
        else:
            self.ledger.recoveries.append(label)
        if self.verbose:
            _log("%s in %.1f ms" % (label, took * 1000))
        return took

    def link_down(self, i):
        """Unplugs host i: its eth0 and its switch port both go down (no carrier either side). Returns seconds."""
        h = self._host(i)
        return self._fault("link_down(h%d)" % h.index, [
            [IP, "-n", self.switch_ns, "link", "set", h.port, "down"],
            [IP, "-n", h.ns, "link", "set", h.ifname, "down"]])

    def link_up(self, i):
        """Plugs host i back in (both ends up; its subnet route returns with the link). Returns seconds."""
        h = self._host(i)
        return self._fault("link_up(h%d)" % h.index, [
            [IP, "-n", h.ns, "link", "set", h.ifname, "up"],
            [IP, "-n", self.switch_ns, "link", "set", h.port, "up"]], count=False)

    def _iptables(self, h, op):
        base = [IP, "netns", "exec", h.ns, "iptables", "-w", "5"]
        return [base + [op, "INPUT", "!", "-i", "lo", "-j", "DROP"],
                base + [op, "OUTPUT", "!", "-o", "lo", "-j", "DROP"]]

    def partition(self, i):
        """Cuts host i off silently: iptables DROP of all IPv4 in and out of it except on lo.

        Peers see silence (their connects and sends time out; no RST, no ICMP; ARP still answers). Inside host i,
        TCP also sees silence, but a UDP send or a ping fails at once with EPERM (netfilter's local verdict).
        Returns seconds."""
        h = self._host(i)
        if h.index in self._partitioned:
            raise NetnsError("h%d is already partitioned" % h.index)
        took = self._fault("partition(h%d)" % h.index, self._iptables(h, "-I"))
        self._partitioned.add(h.index)
        return took

    def heal(self, i):
        """Removes host i's partition rules. Returns seconds."""
        h = self._host(i)
        took = self._fault("heal(h%d)" % h.index, self._iptables(h, "-D"), count=False)
        self._partitioned.discard(h.index)
        return took

    def rate_limit(self, i, rate="1mbit", burst="32kbit", latency="50ms"):
        """Limits host i's traffic both ways with tc tbf: on its eth0 egress and on its switch port's egress (the
        direction towards it). Replaces an earlier limit. Returns seconds."""
        h = self._host(i)
        tbf = ["tbf", "rate", rate, "burst", burst, "latency", latency]
        took = self._fault("rate_limit(h%d,%s)" % (h.index, rate), [
            [IP, "netns", "exec", h.ns, "tc", "qdisc", "replace", "dev", h.ifname, "root"] + tbf,
            [IP, "netns", "exec", self.switch_ns, "tc", "qdisc", "replace", "dev", h.port, "root"] + tbf])
        self._limited.add(h.index)
        return took

    def unlimit(self, i):
        """Removes host i's rate limit. Returns seconds."""
        h = self._host(i)
        took = self._fault("unlimit(h%d)" % h.index, [
            [IP, "netns", "exec", h.ns, "tc", "qdisc", "del", "dev", h.ifname, "root"],
            [IP, "netns", "exec", self.switch_ns, "tc", "qdisc", "del", "dev", h.port, "root"]], count=False)
        self._limited.discard(h.index)
        return took

    def kill_all(self, i, sig=signal.SIGKILL):
        """Sends sig to every process on host i (a crashed node when SIGKILL). Returns the pids signalled."""
        h = self._host(i)
        t0 = time.monotonic()
        sent = []
        for p in _ns_pids(h.ns):
            try:
                os.kill(p, sig)
                sent.append(p)
            except ProcessLookupError:
                pass
        self.ledger.injected("kill_all(h%d,%s)" % (h.index, signal.Signals(sig).name))
        if self.verbose:
            _log("kill_all(h%d,%s): %d processes in %.1f ms" % (
                h.index, signal.Signals(sig).name, len(sent), (time.monotonic() - t0) * 1000))
        return sent

    @property
    def faults_injected(self):
        """Labels of the faults injected so far, in order (recoveries such as link_up or heal are not faults)."""
        return self.ledger.labels

    # -- teardown -------------------------------------------------------------------------------------------

    def close(self, raise_on_leftover=True):
        """SIGKILLs every process in the cluster's namespaces, deletes them (bridge and veths go with them) and
        their /etc/netns files, reaps spawned children, and verifies that none of the namespaces is left.

        Idempotent. Returns {namespace: [pids it had to kill]}. Raises CleanupError if something is left (unless
        raise_on_leftover is False: then it prints the problems)."""
        if self.closed:
            return getattr(self, "killed_at_close", {})
        t0 = time.monotonic()
        problems = []
        killed = {}
        # Processes this cluster spawned are killed by pid first: one started a moment ago may still be in
        # `ip netns exec` before its setns, where the namespace sweep below cannot see it, and would then run on in a
        # namespace that no longer has a name.
        for p in self._procs:
            if p.poll() is None:
                try:
                    p.kill()
                    killed.setdefault(p.dtrain_ns, []).append(p.pid)
                except OSError:
                    pass
        for ns in reversed(self.namespaces):
            k, p = _remove_ns(ns)
            if k:
                killed[ns] = sorted(set(killed.get(ns, []) + k))
            problems += p
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                problems.append("spawned pid %d did not exit" % p.pid)
        left = [ns for ns in _netns_list() if ns in self.namespaces]
        if left:
            problems.append("namespaces still listed: %s" % " ".join(left))
        if not problems:
            try:
                os.unlink(self._state_path())
            except OSError:
                pass
        self.closed = True
        self.killed_at_close = killed
        if self in _live:
            _live.remove(self)
        if self.verbose:
            _log("cluster %s closed in %.2f s%s%s" % (
                self.prefix, time.monotonic() - t0,
                "; killed %s" % killed if killed else "", "; PROBLEMS: %s" % problems if problems else ""))
        if problems:
            msg = "cleanup of cluster %s incomplete: %s" % (self.prefix, "; ".join(problems))
            if raise_on_leftover:
                raise CleanupError(msg)
            print("netns: " + msg, file=sys.stderr, flush=True)
        return killed


# ---------------------------------------------------------------------------------------------------------------
# Delaying relay


class Relay:
    """A TCP relay on host `host_i` that adds latency (tc netem is not available on these kernels).

    It listens on hosts[host_i].addr:listen_port (0: an ephemeral port, see .port) and forwards every connection
    to target_addr:target_port; each chunk read in either direction is written delay_s later (a latency, not a
    throughput cap). The relay is a helper process (`python3 netns.py relay ...`) in the namespace, so close()
    and kill_all() see it; it also exits when this process dies. Recorded in the ledger as a fault."""

    def __init__(self, cluster, host_i, listen_port, target_addr, target_port, delay_s, timeout=CMD_TIMEOUT):
        self.cluster = cluster
        self.host = cluster._host(host_i)
        self.addr = self.host.addr
        self.delay_s = float(delay_s)
        self.target = (target_addr, int(target_port))
        self.proc = cluster.spawn(self.host.index, [PYTHON, HERE, "relay", self.addr, str(int(listen_port)),
                                                    target_addr, str(int(target_port)), repr(self.delay_s)],
                                  hostname=False, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = _readline(self.proc.stdout, timeout)
        if not line.startswith("READY "):
            self.stop()
            raise NetnsError("relay on %s did not start (said %r)" % (self.host.ns, line))
        self.port = int(line.split()[1])
        cluster.ledger.injected("delay(h%d:%d->%s:%d,%gs)" % (self.host.index, self.port, target_addr,
                                                             int(target_port), self.delay_s))
        if cluster.verbose:
            _log("relay %s:%d -> %s:%d with %.0f ms delay" % (self.addr, self.port, target_addr, int(target_port),
                                                              self.delay_s * 1000))

    def stop(self, timeout=5.0):
        """Stops the relay (its connections drop). Idempotent."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NetnsError("relay pid %d did not exit" % self.proc.pid)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def _readline(f, timeout):
    """Reads one line from a pipe with a timeout ("" on timeout or EOF)."""
    out = []
    t = threading.Thread(target=lambda: out.append(f.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return out[0].strip() if out else ""


def _relay_main(listen_addr, listen_port, target_addr, target_port, delay):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((listen_addr, listen_port))
    srv.listen(128)
    print("READY %d" % srv.getsockname()[1], flush=True)

    def parent_watch():
        # stdin is a pipe from the test; EOF means the test is gone, so the relay goes too.
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=parent_watch, daemon=True).start()

    def pipe(src, dst, done):
        q = queue.Queue()

        def reader():
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                q.put((time.monotonic() + delay, data))
                if not data:
                    return

        threading.Thread(target=reader, daemon=True).start()
        while True:
            due, data = q.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                break
            try:
                dst.sendall(data)
            except OSError:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                break
        done()

    def handle(client):
        try:
            upstream = socket.create_connection((target_addr, target_port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        left = [2]
        lock = threading.Lock()

        def done():
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    client.close()
                    upstream.close()

        threading.Thread(target=pipe, args=(client, upstream, done), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client, done), daemon=True).start()

    while True:
        client, _ = srv.accept()
        threading.Thread(target=handle, args=(client,), daemon=True).start()


def _main(argv):
    if len(argv) == 6 and argv[0] == "relay":
        _relay_main(argv[1], int(argv[2]), argv[3], int(argv[4]), float(argv[5]))
    elif len(argv) in (1, 2) and argv[0] == "free-port":
        s = socket.socket()
        s.bind((argv[1] if len(argv) == 2 else "", 0))
        print(s.getsockname()[1])
    else:
        print("usage: netns.py relay LISTEN_ADDR LISTEN_PORT TARGET_ADDR TARGET_PORT DELAY_S | free-port [ADDR]",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
