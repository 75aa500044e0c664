"""Self-test of netns.py: four real hosts (network namespaces on one bridge) reach each other; link_down, partition,
rate_limit, the delaying relay and kill_all have exactly the effect they promise and are undone by their
counterparts; close() leaves no namespace, interface or process behind, also after an exception, SIGTERM or
SIGKILL of the owning process. All traffic stays inside the namespaces the test creates.

Skips (exit 77, `SKIPPED: <reason>`) where namespaces cannot be built (not root, tools missing)."""

import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import PYTHON, check, describe, finish, tagged_pids  # noqa: E402
import netns  # noqa: E402

netns.require_netns()

START = time.monotonic()
PORT = 29400            # every host serves on the same fixed port: namespaces have separate port spaces
CLOSED_PORT = 29999     # nothing listens there
MB2 = 2 * 1024 * 1024
timings = []

SERVER = r"""
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print("READY", flush=True)
def serve(c):
    with c:
        c.sendall((socket.gethostname() + "\n").encode())
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def note(what, seconds):
    timings.append((what, seconds))
    print("timing: %-58s %8.3f s" % (what, seconds), flush=True)


def alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def root_links():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10).stdout
    return sorted(line.split(":")[1].strip() for line in out.splitlines())


def recv_line(sock, timeout):
    sock.settimeout(timeout)
    buf = b""
    while not buf.endswith(b"\n"):
        d = sock.recv(4096)
        if not d:
            break
        buf += d
    return buf.decode().strip()


def recv_exact(sock, n, timeout):
    sock.settimeout(timeout)
    buf = b""
    while len(buf) < n:
        d = sock.recv(min(65536, n - len(buf)))
        if not d:
            break
        buf += d
    return buf


def greet(cluster, src, addr, port, timeout=2.0):
    """Connects from host src to addr:port and returns (socket, greeting line) or (None, outcome)."""
    outcome, _, s = cluster.tcp_connect(src, addr, port, timeout)
    if s is None:
        return None, outcome
    try:
        return s, recv_line(s, timeout)
    except OSError as e:
        s.close()
        return None, repr(e)


def start_server(cluster, i):
    p = cluster.spawn(i, [PYTHON, "-c", SERVER, cluster.hosts[i].addr, str(PORT)], stdout=subprocess.PIPE,
                      text=True)
    line = netns._readline(p.stdout, 10)
    check(line == "READY", "echo server on h%d started (said %r)" % (i, line))
    return p


def transfer(cluster, src, dst, nbytes, timeout=40.0):
    """Sends nbytes from host src to a sink on host dst (both sockets of this process); returns seconds from
    connect until the sink holds every byte, or None."""
    srv = cluster.socket(dst)
    srv.bind((cluster.hosts[dst].addr, 0))
    srv.listen(1)
    srv.settimeout(timeout)
    got = []

    def sink():
        try:
            c, _ = srv.accept()
            got.append(len(recv_exact(c, nbytes, timeout)))
            got.append(time.monotonic())
            c.close()
        except OSError as e:
            got.append(repr(e))

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    cli = cluster.socket(src)
    cli.settimeout(timeout)
    t0 = time.monotonic()
    try:
        cli.connect((cluster.hosts[dst].addr, srv.getsockname()[1]))
        cli.sendall(b"\xa5" * nbytes)
    except OSError as e:
        check(False, "transfer h%d -> h%d: %r" % (src, dst, e))
    t.join(timeout + 5)
    cli.close()
    srv.close()
    if len(got) == 2 and got[0] == nbytes:
        return got[1] - t0
    check(False, "transfer h%d -> h%d of %d bytes completed (got %r)" % (src, dst, nbytes, got))
    return None


links_before = root_links()
cluster = netns.Cluster(4)
H = cluster.hosts
servers = []
try:
    # -- layout ---------------------------------------------------------------------------------------------
    check(len(H) == 4 and len(set(h.addr for h in H)) == 4, "4 hosts with distinct addresses: %s" % H)
    check(root_links() == links_before, "the root namespace has no new interface: %s" % root_links())
    for h in H:
        cp = cluster.run(h.index, ["sh", "-c", "hostname; ip -o -4 addr show dev eth0; ip -4 route"], timeout=10)
        lines = cp.stdout.splitlines()
        check(cp.returncode == 0 and lines and lines[0] == h.ns,
              "h%d's hostname is %s: %r" % (h.index, h.ns, cp.stdout))
        check("%s/24" % h.addr in cp.stdout, "h%d's eth0 holds %s/24: %r" % (h.index, h.addr, cp.stdout))
        check("default" not in cp.stdout, "h%d has no default route (no way out of the cluster)" % h.index)

    # -- reachability ---------------------------------------------------------------------------------------
    for a, b in ((0, 1), (0, 2), (0, 3), (3, 0), (2, 1)):
        check(cluster.ping(a, b), "ping h%d -> h%d" % (a, b))
    check(cluster.run(1, ["ping", "-c1", "-W1", "h3"], timeout=10).returncode == 0, "h1 resolves and pings h3 by name")
    servers = [start_server(cluster, i) for i in range(4)]
    for i in range(4):
        check(cluster.pids(i) == [servers[i].pid], "pids(%d) is the echo server: %s" % (i, cluster.pids(i)))
        s, hello = greet(cluster, (i + 1) % 4, H[i].addr, PORT)
        check(hello == H[i].ns, "h%d:%d answers from h%d as %s (got %r)" % (i, PORT, (i + 1) % 4, H[i].ns, hello))
        if s:
            s.sendall(b"echo me\n")
            check(recv_line(s, 2) == "echo me", "h%d echoes" % i)
            s.close()
    port = cluster.free_port(2)
    check(1024 <= port <= 65535, "free_port(2) = %d" % port)

    # -- link_down / link_up --------------------------------------------------------------------------------
    took = cluster.link_down(2)
    t_down = time.monotonic()
    note("link_down(2) commands", took)
    outcome, t_conn, _ = cluster.tcp_connect(0, H[2].addr, PORT, 0.5)
    check(outcome == "timeout", "after link_down(2), TCP h0 -> h2 gets no answer (%s after %.2f s)" % (outcome, t_conn))
    ok = cluster.ping(0, 2, wait_s=0.4)
    check(not ok, "after link_down(2), h2 does not answer ping")
    gone = time.monotonic() - t_down
    note("link_down(2) -> TCP (0.5 s) and ping (0.4 s) probes failed", gone)
    # The probes' own timeouts are 0.9 s of this; the rest is starting `ip netns exec` twice, which takes a few hundred
    # ms on a loaded 2-core machine. A probe that outlives its timeout (a hung ping) still fails this.
    check(gone < 2.0, "both probes failed within 2 s of link_down (%.2f s; their timeouts sum to 0.9 s)" % gone)
    outcome, t_in, _ = cluster.tcp_connect(2, H[0].addr, PORT, 1.0)
    check(outcome == "unreachable" and t_in < 0.5,
          "inside h2, connect fails at once with no route (%s after %.3f s)" % (outcome, t_in))
    state = cluster.run(2, ["ip", "-o", "link", "show", "eth0"], timeout=10).stdout
    check("state DOWN" in state, "h2's eth0 is down: %s" % state.strip())
    check(cluster.ping(0, 1), "the other hosts still reach each other during link_down(2)")
    note("link_up(2) commands", cluster.link_up(2))
    t_up = time.monotonic()
    back = False
    while time.monotonic() - t_up < 5.0:
        if cluster.ping(0, 2, wait_s=0.2):
            back = True
            break
    note("link_up(2) -> h2 answers ping", time.monotonic() - t_up)
    check(back, "h2 reachable again after link_up")
    s, hello = greet(cluster, 0, H[2].addr, PORT)
    if cluster.ledger.expect(back and hello == H[2].ns, "h2's server reachable over TCP after link_up (%r)" % hello):
        s.close()

    # -- partition / heal -----------------------------------------------------------------------------------
    outcome, t_ref, _ = cluster.tcp_connect(0, H[1].addr, CLOSED_PORT, 2.0)
    check(outcome == "refused" and t_ref < 0.5,
          "before partition, a closed port on h1 refuses at once (%s after %.3f s)" % (outcome, t_ref))
    established, hello = greet(cluster, 0, H[1].addr, PORT)
    check(hello == H[1].ns, "connection to h1 established before the partition (%r)" % hello)
    note("partition(1) commands", cluster.partition(1))
    results = {}

    def probe(key, src, addr, port):
        results[key] = cluster.tcp_connect(src, addr, port, 1.5)[:2]

    probes = [threading.Thread(target=probe, args=a) for a in (
        ("open", 0, H[1].addr, PORT), ("closed", 3, H[1].addr, CLOSED_PORT), ("inside", 1, H[0].addr, PORT))]
    for t in probes:
        t.start()
    for t in probes:
        t.join(10)
    for key, what in (("open", "h0 -> h1's listening port"), ("closed", "h3 -> h1's closed port (no RST)"),
                      ("inside", "h1 -> h0 (from inside the partition)")):
        outcome, took = results.get(key, ("missing", 0))
        check(outcome == "timeout" and took >= 1.4, "partitioned: %s times out silently (%s after %.2f s)"
              % (what, outcome, took))
    note("partition: connect to h1 gave %s after" % results.get("open", ("?",))[0], results.get("open", ("", 0))[1])
    check(cluster.ping(0, 3), "h0 and h3 still reach each other during partition(1)")
    sent_at = time.monotonic()
    lost = None
    if established:
        established.sendall(b"across the partition\n")
        try:
            lost = recv_line(established, 1.0)
        except OSError:
            lost = None
    check(lost is None, "no echo through the partition (got %r)" % lost)
    note("heal(1) commands", cluster.heal(1))
    t_heal = time.monotonic()
    late = None
    if established:
        try:
            late = recv_line(established, 8.0)
        except OSError as e:
            late = repr(e)
        established.close()
    note("heal(1) -> data sent %.1f s before the heal arrived" % (t_heal - sent_at), time.monotonic() - t_heal)
    check(late == "across the partition", "the established connection survives: data sent during the partition "
          "arrives after heal (%r)" % late)
    s, hello = greet(cluster, 0, H[1].addr, PORT)
    if cluster.ledger.expect(hello == H[1].ns and late == "across the partition",
                             "new connections to h1 work after heal (%r)" % hello):
        s.close()

    # -- rate_limit -----------------------------------------------------------------------------------------
    fast = transfer(cluster, 3, 0, MB2)
    if fast is not None:
        note("2 MiB h3 -> h0 unlimited", fast)
    note("rate_limit(3, 1mbit) commands", cluster.rate_limit(3, rate="1mbit", burst="32kbit", latency="50ms"))
    floor = MB2 * 8 / 1e6 * 0.8
    slow = transfer(cluster, 3, 0, MB2)
    if slow is not None:
        note("2 MiB h3 -> h0 at 1mbit (floor %.1f s)" % floor, slow)
    check(slow is not None and floor <= slow < 2.5 * floor,
          "2 MiB out of rate-limited h3 takes %.1f..%.1f s (took %s)" % (floor, 2.5 * floor, slow))
    small = 256 * 1024
    into = transfer(cluster, 0, 3, small)
    if into is not None:
        note("256 KiB h0 -> h3 at 1mbit (floor %.1f s)" % (small * 8 / 1e6 * 0.8), into)
    check(into is not None and into >= small * 8 / 1e6 * 0.8, "traffic into h3 is limited too (took %s)" % into)
    again = transfer(cluster, 1, 2, MB2)
    check(again is not None and again < floor / 4, "h1 -> h2 is not limited meanwhile (took %s)" % again)
    note("unlimit(3) commands", cluster.unlimit(3))
    after = transfer(cluster, 3, 0, MB2)
    if after is not None:
        note("2 MiB h3 -> h0 after unlimit", after)
    cluster.ledger.expect(slow is not None and slow >= floor and after is not None and after < floor / 4,
                          "2 MiB out of h3 is fast again after unlimit (took %s)" % after)

    # -- delaying relay -------------------------------------------------------------------------------------
    delay = 0.2
    direct, hello = greet(cluster, 0, H[2].addr, PORT)
    check(hello == H[2].ns, "direct connection h0 -> h2")
    payload = b"r" * 100
    t0 = time.monotonic()
    direct.sendall(payload)
    check(recv_exact(direct, len(payload), 5) == payload, "direct echo")
    rtt_direct = time.monotonic() - t0
    direct.close()
    note("direct round trip h0 -> h2", rtt_direct)
    t_relay = time.monotonic()
    relay = netns.Relay(cluster, 1, 29500, H[2].addr, PORT, delay)
    note("Relay start", time.monotonic() - t_relay)
    check(relay.port == 29500 and relay.addr == H[1].addr, "relay listens on h1:29500")
    t0 = time.monotonic()
    via, hello = greet(cluster, 0, relay.addr, relay.port, timeout=5)
    t_greet = time.monotonic() - t0
    check(hello == H[2].ns and t_greet >= delay, "through the relay h2 greets after >= %.1f s (%r after %.3f s)"
          % (delay, hello, t_greet))
    rtt_relay = None
    if via:
        t0 = time.monotonic()
        via.sendall(payload)
        echoed = recv_exact(via, len(payload), 5)
        rtt_relay = time.monotonic() - t0
        check(echoed == payload, "echo through the relay")
        big = os.urandom(300 * 1024)
        via.sendall(big)
        check(recv_exact(via, len(big), 10) == big, "300 KiB through the relay and back intact")
        via.close()
        note("round trip h0 -> relay(h1, %.1f s) -> h2" % delay, rtt_relay)
    cluster.ledger.expect(rtt_relay is not None and 2 * delay <= rtt_relay < 2 * delay + 0.5,
                          "the relay adds its delay each way (round trip %s, direct %.4f s)" % (rtt_relay, rtt_direct))
    relay.stop()
    outcome, _, _ = cluster.tcp_connect(0, H[1].addr, 29500, 2.0)
    check(outcome == "refused", "relay stopped: its port refuses (%s)" % outcome)

    # -- kill_all -------------------------------------------------------------------------------------------
    sleeper = cluster.spawn(2, ["sh", "-c", "setsid sleep 300 & exec sleep 301"])
    # `ip netns pids` reads /proc/PID/ns/net, which a process in the middle of exec can fail to show for a moment:
    # the same 3 pids twice in a row, 20 ms apart, is the set kill_all must signal.
    deadline = time.monotonic() + 10
    before, last = [], None
    while time.monotonic() < deadline:
        before = cluster.pids(2)
        if len(before) == 3 and before == last:
            break
        last = before
        time.sleep(0.02)
    check(len(before) == 3, "h2 runs its server, a sleeper and a setsid'd grandchild: %s" % describe(before))
    t0 = time.monotonic()
    sent = cluster.kill_all(2, signal.SIGKILL)
    for p in (servers[2], sleeper):
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    while cluster.pids(2) and time.monotonic() - t0 < 5:
        time.sleep(0.02)
    note("kill_all(2) -> h2 empty", time.monotonic() - t0)
    check(sorted(sent) == sorted(before), "kill_all signalled every process of h2: %s vs %s" % (sent, before))
    cluster.ledger.expect(cluster.pids(2) == [] and servers[2].returncode == -9,
                          "nothing left on h2 after kill_all (%s)" % cluster.pids(2))
    check(set(cluster.leaked()) == {H[0].ns, H[1].ns, H[3].ns}, "leaked() lists the hosts that still run "
          "servers: %s" % cluster.leaked())

    # -- close ----------------------------------------------------------------------------------------------
    left_running = cluster.spawn(3, ["sleep", "300"])
    for p in servers:
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=5)
    check(list(cluster.leaked()) == [H[3].ns], "only the deliberate sleeper is left: %s" % cluster.leaked())
finally:
    t0 = time.monotonic()
    killed = cluster.close(raise_on_leftover=False)
    note("close()", time.monotonic() - t0)

check(left_running.pid in killed.get(H[3].ns, []), "close() killed the process left on h3: %s" % killed)
check(left_running.returncode == -9, "that process died of SIGKILL (%s)" % left_running.returncode)
ours = [ns for ns in netns._netns_list() if ns.startswith(cluster.prefix)]
check(ours == [], "no namespace of the cluster left: %s" % ours)
check(root_links() == links_before, "root namespace interfaces as before: %s" % root_links())
check(not os.path.exists(os.path.join(netns.STATE_DIR, cluster.prefix + ".json")), "state file removed")
check(not any(os.path.exists(os.path.join(netns.ETC_NETNS, h.ns)) for h in H), "/etc/netns entries removed")
leaked = tagged_pids(cluster.tag)
check(leaked == [], "no process of the cluster left: %s" % describe(leaked))
try:
    cluster.spawn(0, ["true"])
    check(False, "spawn after close is refused")
except netns.NetnsError:
    pass

# -- cleanup when the owner fails, is terminated, or is killed outright -------------------------------------
CHILD = r"""
import subprocess, sys, time
sys.path.insert(0, %r)
import netns
c = netns.Cluster(2, prefix=sys.argv[1])
p = c.spawn(1, ["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("READY", p.pid, flush=True)
if sys.argv[2] == "raise":
    raise RuntimeError("a failing test")
time.sleep(60)
""" % os.path.dirname(os.path.abspath(__file__))

for mode in ("raise", "sigterm", "sigkill"):
    prefix = "dtst%s" % os.urandom(3).hex()
    t0 = time.monotonic()
    child = subprocess.Popen([PYTHON, "-c", CHILD, prefix, mode], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    deadline = time.monotonic() + 20
    line = []
    while time.monotonic() < deadline:      # the child logs its cluster first, then READY
        line = netns._readline(child.stdout, max(0.1, deadline - time.monotonic())).split()
        if not line or line[0] == "READY":
            break
    check(len(line) == 2 and line[0] == "READY", "%s: child built its cluster (%r)" % (mode, line))
    sleeper_pid = int(line[1]) if len(line) == 2 else -1
    if mode == "sigterm":
        child.send_signal(signal.SIGTERM)
    elif mode == "sigkill":
        child.kill()
    try:
        child.wait(timeout=20)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=5)
        check(False, "%s: child exited" % mode)
    child.stdout.close()
    if mode == "sigkill":
        # Another run's Cluster() may reap them first (its reap_stale sees the owner is dead): either is right.
        stale = [ns for ns in netns._netns_list() if ns.startswith(prefix)]
        check(alive(sleeper_pid) or not stale, "sigkill: the child's sleeper outlives it until reaped")
        removed = netns.reap_stale()
        check(set(removed) <= set(stale), "reap_stale() removed only the dead run's namespaces: %s" % removed)
    expected_rc = {"raise": 1, "sigterm": -signal.SIGTERM, "sigkill": -signal.SIGKILL}[mode]
    check(child.returncode == expected_rc, "%s: child exit %s, expected %s" % (mode, child.returncode, expected_rc))
    left = [ns for ns in netns._netns_list() if ns.startswith(prefix)]
    check(left == [], "%s: no namespace left: %s" % (mode, left))
    deadline = time.monotonic() + 2
    while alive(sleeper_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    check(not alive(sleeper_pid), "%s: the child's process on h1 is gone" % mode)
    note("cleanup after %s" % mode, time.monotonic() - t0)

cluster_leaked = len(leaked) + len(cluster.leaked())
print(cluster.ledger.line(leaked=cluster_leaked), flush=True)
check(cluster.ledger.injected_count == 5 and cluster.ledger.survived_count == 5,
      "5 faults injected and survived: %s" % cluster.ledger.labels)
total = time.monotonic() - START
print("total %.1f s" % total, flush=True)
check(total < 60, "self-test within 60 s (%.1f s)" % total)
finish()
