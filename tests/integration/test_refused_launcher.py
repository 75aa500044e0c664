"""A launcher refused by an agent of another cluster (another CA) says so at once and exits 1, every time: gRPC's
background reconnects once crashed it in OpenSSL after exit had cleaned it up (exit 139, about one run in five). A
plaintext launcher (--insecure) against a TLS agent is refused as fast, with what to do."""

import os
import socket
import subprocess
import time

from harness import DTRAIN, Run, check, finish, kill_tagged, write

run = Run([])
ours, theirs = os.path.join(run.dir, "ours"), os.path.join(run.dir, "theirs")
for d in (ours, theirs):
    subprocess.run([DTRAIN, "secret", "init", "--dir", d], check=True, stdout=subprocess.DEVNULL)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
agent = subprocess.Popen([DTRAIN, "agent", "--listen", "127.0.0.1:%d" % port, "--secret-dir", theirs,
                          "--run-dir", os.path.join(run.dir, "agent-runs")],
                         env=run.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    spec = write(os.path.join(run.dir, "job.yaml"),
                 "name: refused\nnodes: {provider: static, agents: ['127.0.0.1:%d']}\nworkers_per_node: 1\n"
                 "command: [/bin/true]\n" % port)
    codes, slowest, messages = [], 0.0, set()
    for _ in range(30):
        start = time.monotonic()
        p = subprocess.run([DTRAIN, "launch", spec, "--secret-dir", ours], cwd=run.dir, env=run.env,
                           capture_output=True, text=True, timeout=60)
        slowest = max(slowest, time.monotonic() - start)
        codes.append(p.returncode)
        messages.add("refused this launcher" in p.stderr and "TLS handshake" in p.stderr)
    check(all(code == 1 for code in codes), "30 refused launches all exit 1: %s" % codes)
    check(messages == {True}, "each says the agent refused it in the TLS handshake")
    check(slowest < 5.0, "a refusal is reported at once, not after the connect timeout (slowest %.2f s)" % slowest)

    # A plaintext launcher (--insecure) against the same TLS agent: the agent closes the connection at the first
    # bytes; the launcher says the agent requires TLS within about a second, not after the 10 s connect timeout.
    for _ in range(3):
        start = time.monotonic()
        p = subprocess.run([DTRAIN, "launch", spec, "--insecure"], cwd=run.dir, env=run.env, capture_output=True,
                           text=True, timeout=60)
        took = time.monotonic() - start
        check(p.returncode == 1, "a plaintext launcher against a TLS agent exits 1, got %d: %s" % (p.returncode,
                                                                                                   p.stderr[-600:]))
        check("it requires TLS" in p.stderr and "give this side the cluster secret instead of --insecure" in p.stderr,
              "it says the agent requires TLS and what to do: %s" % p.stderr[-600:])
        check(took < 2.5, "within about a second, not after the connect timeout (took %.2f s)" % took)
finally:
    agent.kill()
    agent.wait()
    kill_tagged(run.tag)
finish()
