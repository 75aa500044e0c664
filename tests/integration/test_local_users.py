"""Loopback is not a trust boundary. As root, the test creates a second local user and, as that user, drives a raw
session client (dtrain-session-probe) against
  * an agent listening on 127.0.0.1 (the cluster secret in root's 0700 directory, named by DTRAIN_SECRET_DIR):
    plaintext without the token is refused and runs nothing;
  * the local agents of a running provider-local job: their TCP ports serve no session at all, and their private
    Unix sockets are closed to other users, and to root's processes that are not the launcher (SO_PEERCRED);
and checks least privilege and path confinement with the right credentials:
  * a worker's credentials (its certificate; it holds no cluster token) open no session, on its own agent or on
    another one, and its certificate is bound to the job (not a 10-year certificate);
  * a launcher with the right token cannot read /etc/shadow through error_file, nor write outside the agent's run
    directory through log_path; a proper job through the same client works and its log lands in the run dir."""

import glob
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
import uuid

from harness import BUILD_DIR, DTRAIN, Run, check, finish, kill_tagged, tagged_pids, write

if os.geteuid() != 0:
    print("SKIPPED: needs root to create a second local user (useradd) and run a client as that user")
    sys.exit(77)
PROBE = os.path.join(BUILD_DIR, "bin", "dtrain-session-probe")
if not os.path.exists(PROBE):
    print("SKIPPED: %s is not built" % PROBE)
    sys.exit(77)

USER = "dtit" + uuid.uuid4().hex[:8]
subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", USER], check=True)
entry = pwd.getpwnam(USER)
work = Run([]).dir
os.chmod(work, 0o755)   # the other user must be able to leave marker files here (and fail to elsewhere)
marker_dir = os.path.join(work, "markers")
os.makedirs(marker_dir)
os.chmod(marker_dir, 0o1777)


def probe(args, as_other=False, env=None, timeout=40):
    """Runs dtrain-session-probe; returns its exit code and output."""
    kwargs = {}
    if as_other:
        kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    p = subprocess.run([PROBE] + args, capture_output=True, text=True, timeout=timeout, cwd="/",
                       env=env or {"PATH": "/usr/bin:/bin", "HOME": "/"}, **kwargs)
    print("--- probe %s%s: exit %d\n%s%s" % ("(as %s) " % USER if as_other else "", " ".join(args), p.returncode,
                                            p.stdout, p.stderr), flush=True)
    return p.returncode, p.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return None


def start_agent(tag, secret, run_dir):
    """An agent on loopback as an operator would start it: the secret through DTRAIN_SECRET_DIR, no flags."""
    port = free_port()
    env = dict(os.environ, DTRAIN_TEST_TAG=tag, DTRAIN_SECRET_DIR=secret)
    log = open(os.path.join(work, "agent_%d.log" % port), "w")
    proc = subprocess.Popen([DTRAIN, "agent", "--listen", "127.0.0.1:%d" % port, "--run-dir", run_dir], env=env,
                            stdout=log, stderr=subprocess.STDOUT)

    def up():
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            return False
    check(wait_for(up, 10) is not None, "agent on 127.0.0.1:%d listening" % port)
    return proc, "127.0.0.1:%d" % port


tag = uuid.uuid4().hex
try:
    secret = os.path.join(work, "secret")
    subprocess.run([DTRAIN, "secret", "init", "--dir", secret], check=True, stdout=subprocess.DEVNULL)
    run_dir = os.path.join(work, "agent-runs")
    agent, address = start_agent(tag, secret, run_dir)
    idle, idle_address = start_agent(tag, secret, os.path.join(work, "idle-runs"))

    # 1. Another user, plaintext, no token: no session, nothing runs.
    pwned = os.path.join(marker_dir, "listening")
    code, out = probe([address, "--command", "id > %s" % pwned], as_other=True)
    check(code == 3 and out.startswith("refused"), "another user gets no session from a loopback agent")
    check(not os.path.exists(pwned), "another user's command did not run through a loopback agent")
    code, out = probe([address, "--secret-dir", secret], as_other=True)
    check(code == 3, "another user cannot load root's cluster secret (0700)")

    # 2. A launcher with the right token cannot read /etc/shadow through error_file ...
    code, out = probe([address, "--secret-dir", secret, "--command", "true", "--error-file", "/etc/shadow"])
    check("hello" in out, "the right token opens a session on loopback")
    check("agent error:" in out and "'/etc/shadow' is outside this job's directory" in out,
          "error_file /etc/shadow is refused with a clear message: " + out.strip())
    check("root:" not in out, "no line of /etc/shadow came back")
    check("started rank" not in out, "nothing was started for a refused path")
    # ... nor write outside the run directory through log_path (absolute or with ..).
    for name, path in (("absolute", os.path.join(work, "escaped.log")), ("dotdot", "../../escaped2.log")):
        code, out = probe([address, "--secret-dir", secret, "--command", "echo x", "--log-path", path])
        check("is outside this job's directory" in out, "log_path %s (%s) is refused" % (path, name))
    escaped = [name for name in ("escaped.log", "escaped2.log") if os.path.exists(os.path.join(work, name))]
    check(not escaped, "no file was written outside the run directory: %s" % escaped)

    # 3. A proper job through the same client runs; its log is in the agent's run directory. Its worker tries to
    # open sessions with its own credentials: on its own agent (running its job) and on an idle one.
    worker_out = os.path.join(work, "worker-probe.out")
    script = ("env | grep -c DTRAIN_CLUSTER_TOKEN > {o}.token; "
              "openssl x509 -noout -enddate -ext subjectAltName,extendedKeyUsage -in \"$DTRAIN_TLS_CERT\" "
              "> {o}.cert 2>&1; "
              "{p} {own} --worker --timeout-s 10 > {o}.own 2>&1; "
              "{p} {idle} --worker --timeout-s 10 > {o}.idle 2>&1; echo worker done").format(
                  o=worker_out, p=PROBE, own=address, idle=idle_address)
    code, out = probe([address, "--secret-dir", secret, "--command", script], timeout=60)
    check("started rank 0" in out and "exited rank 0 code 0" in out, "a proper job runs through the right token")
    logs = glob.glob(os.path.join(run_dir, "probe-*", "attempt_0", "rank_0.log"))
    check(len(logs) == 1 and "worker done" in open(logs[0]).read() if logs else False,
          "the worker's log is in <run dir>/<job id>/attempt_0/rank_0.log: %s" % logs)
    read = lambda suffix: open(worker_out + suffix).read() if os.path.exists(worker_out + suffix) else ""
    check(read(".token").strip() == "0", "workers get no DTRAIN_CLUSTER_TOKEN")
    check("a worker's certificate cannot open a session" in read(".own"),
          "a worker's certificate opens no session on its own agent: " + read(".own").strip())
    check(read(".idle").startswith("refused") and "hello" not in read(".idle"),
          "a worker's certificate opens no session on another agent: " + read(".idle").strip())
    cert = read(".cert")
    check("URI:spiffe://dtrain.cluster/worker/probe-" in cert and "TLS Web Client Authentication" in cert and
          "Server Authentication" not in cert, "the worker certificate is a client-only worker identity: " + cert)
    end = [line for line in cert.splitlines() if line.startswith("notAfter=")]
    if end:
        left = (time.mktime(time.strptime(end[0][len("notAfter="):], "%b %d %H:%M:%S %Y %Z")) - time.time()) / 86400
        check(left < 32, "the worker certificate lives at most about 30 days, not 10 years (%.0f days)" % left)
    else:
        check(False, "openssl printed the worker certificate's end date")
    agent.terminate()
    idle.terminate()
    agent.wait(10)
    idle.wait(10)

    # 4. A provider-local job: the other user reaches neither the agents' TCP ports nor their sockets.
    local = Run(["launch", write(os.path.join(work, "local.yaml"),
                                "name: sleeper\nnodes: {provider: local, count: 2}\nworkers_per_node: 1\n"
                                "command: [sleep, '60']\nstop: {grace_s: 1}\nlogs: {dir: %s}\n"
                                % os.path.join(work, "local-runs"))], cwd=work).start()

    def local_agents():
        found = {}
        for pid in tagged_pids(local.tag):
            try:
                argv = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
            except OSError:
                continue
            if b"agent" in argv and b"--session-socket" in argv:
                found[pid] = argv[argv.index(b"--session-socket") + 1].decode()
        return found if len(found) == 2 else None
    agents = wait_for(local_agents, 20) or {}
    check(len(agents) == 2, "the launcher started 2 local agents with --session-socket: %s" % agents)
    agent_logs = glob.glob(os.path.join(work, "local-runs", "sleeper-*", "agent_*.log"))
    started = wait_for(lambda: len(glob.glob(os.path.join(work, "local-runs", "sleeper-*", "attempt_0",
                                                          "rank_*.log"))) == 2, 20)
    check(started, "the local job's workers started")
    tcp = []
    for path in agent_logs:
        for line in open(path):
            if line.startswith("dtrain-agent listening on "):
                tcp.append(line.split()[-1])
    check(len(tcp) == 2, "both local agents printed their TCP address: %s" % tcp)
    for number, target in enumerate(tcp):
        pwned = os.path.join(marker_dir, "local-tcp-%d" % number)
        code, out = probe([target, "--command", "id > %s" % pwned], as_other=True)
        check(code == 3 and "already serves" not in out,
              "a local agent's TCP port serves no session (refused for want of authority, not for being busy): "
              + out.strip())
        check(not os.path.exists(pwned), "another user's command did not run through a local agent's port")
    for path in agents.values():
        mode = os.stat(os.path.dirname(path)).st_mode & 0o777
        check(mode == 0o700, "the session sockets' directory is 0700 (got %o)" % mode)
        code, out = probe(["unix:" + path], as_other=True)
        check(code == 3, "another user cannot reach a local agent's session socket")
        code, out = probe(["unix:" + path, "--timeout-s", "5"])
        check(code == 3, "a process of the same user that is not the launcher gets no session (SO_PEERCRED)")
    check(local.proc.poll() is None, "the local job still runs after the attempts")
    local.proc.send_signal(signal.SIGINT)
    local.wait()
    check(local.code == 130, "the local job stops on SIGINT with 130, got %s" % local.code)
    refusals = "".join(open(p).read() for p in agent_logs)
    check("is not from the launcher that started this agent" in refusals,
          "a local agent logged the refused same-user connection")
    for path in agents.values():
        check(not os.path.exists(os.path.dirname(path)), "the sockets' directory is gone after the job")
    local.assert_no_leaks()
finally:
    kill_tagged(tag)
    subprocess.run(["userdel", USER], check=False)
finish()
