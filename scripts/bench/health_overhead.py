"""What the Python health helper (worker/python/dtrain_health.py) costs a training loop, per step.

Each case runs one loop of empty steps in a fresh interpreter (the helper reads its environment at import):
    bare       for batch in loader: pass                      (the reference)
    off        timed/step/report outside dtrain (no DTRAIN_HEALTH_SOCKET): the no-op path
    on         timed/step/report(loss=float, tokens=...) with a real datagram socket this script binds and drains,
               the helper's heartbeat thread sending every DTRAIN_HEALTH_INTERVAL_MS (100 ms here, the shortest
               dtrain gives)
    on+tensor  as on, with report(loss=<a CPU torch tensor>) (skipped without torch)
Overhead = (case - bare) / steps; the median of --repeats runs of --steps steps each.

    /usr/bin/python3 scripts/bench/health_overhead.py [--steps 200000] [--repeats 5]
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
HELPER_DIR = os.path.join(HERE, "..", "..", "worker", "python")

LOOP = r"""
import sys, time
steps, case = int(sys.argv[1]), sys.argv[2]
loader = range(steps)
if case == "bare":
    began = time.perf_counter()
    for batch in loader:
        pass
else:
    import dtrain_health as health
    assert health.enabled() == case.startswith("on"), case
    loss = 1.0
    if case == "on+tensor":
        import torch
        loss = torch.tensor(1.0)
    began = time.perf_counter()
    for batch in health.timed(loader):
        with health.step():
            health.report(loss=loss, tokens=32)
print(time.perf_counter() - began)
"""


def drain(sock, stop):
    sock.settimeout(0.1)
    while not stop.is_set():
        try:
            sock.recv(65536)
        except socket.timeout:
            pass


def run_case(case, steps, env):
    out = subprocess.run([sys.executable, "-c", LOOP, str(steps), case], env=env, capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="dtrain-bench-")
    path = os.path.join(directory, "socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    stop = threading.Event()
    drainer = threading.Thread(target=drain, args=(sock, stop), daemon=True)
    drainer.start()

    base = {k: v for k, v in os.environ.items() if not k.startswith("DTRAIN_")}
    base["PYTHONPATH"] = HELPER_DIR
    on = dict(base, DTRAIN_HEALTH_SOCKET=path, RANK="0", DTRAIN_JOB_TOKEN="t", DTRAIN_REPORT_TOKEN="r",
              DTRAIN_HEALTH_INTERVAL_MS="100")
    cases = [("bare", base), ("off", base), ("on", on)]
    try:
        import torch  # noqa: F401
        cases.append(("on+tensor", on))
    except ImportError:
        print("on+tensor: skipped (no torch in %s)" % sys.executable)

    times = {name: [] for name, _ in cases}
    for _ in range(args.repeats):   # interleaved, so machine noise hits every case alike
        for name, env in cases:
            times[name].append(run_case(name, args.steps, env))
    bare = statistics.median(times["bare"])
    print("%d steps per run, median of %d runs" % (args.steps, args.repeats))
    print("| case | ns per step | overhead per step (us) |")
    print("| --- | ---: | ---: |")
    for name, _ in cases:
        median = statistics.median(times[name])
        print("| %s | %.0f | %.2f |" % (name, median / args.steps * 1e9, (median - bare) / args.steps * 1e6))
    stop.set()
    drainer.join()
    sock.close()
    os.unlink(path)
    os.rmdir(directory)


if __name__ == "__main__":
    main()
