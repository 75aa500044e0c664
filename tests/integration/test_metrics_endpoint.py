"""The launcher's Prometheus endpoint (observe.metrics_addr) on a real job: 2 local nodes x 2 workers that send health
reports over gRPC as dtrain-trainer does, each rank with its own numbers (rank 2's data loader is slow).
  - with metrics_addr 127.0.0.1:0 the bound port is in events.jsonl (metrics_listening), in `dtrain status --json`
    (metrics_address) and on the console;
  - while the job runs, GET /metrics answers 200 with `Content-Type: text/plain; version=0.0.4`, passes
    `promtool check metrics` (Debian's prometheus package) and a strict parser of the format, and its values are the
    workers' reports and the status snapshot's: step, step seconds, tokens/s, RSS, the data wait and exposed
    communication ratios, restarts 0, both nodes up; other paths get 404, other methods 405;
  - a real Prometheus server (1 s scrape interval) scrapes it, and its query API returns dtrain_worker_step for all
    4 ranks with the job's label;
  - after the job the port is closed;
  - a bad address is refused before anything starts (exit 2, naming the key); a port already in use is a warning
    and the job still runs; 0.0.0.0 is served, with a note that other hosts can read the metrics."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request

from harness import BUILD_DIR, DTRAIN, PYTHON, REPORTING_WORKER, Run, check, finish, wait_for, write

SPEC = """
name: %s
nodes: {provider: local, count: 2}
workers_per_node: 2
command: %s
stop: {grace_s: 1}
logs: {dir: runs, console: none}
observe: {metrics_addr: "%s"}
"""

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')


def parse_exposition(text):
    """A strict reader of the 0.0.4 text format as the launcher writes it: {(name, labels): value} and {name: type};
    fails the test on anything out of form (a sample before its HELP/TYPE, a family twice, a bad label)."""
    samples, types, helps, order = {}, {}, {}, []
    check(text.endswith("\n"), "the exposition ends with a newline")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            check(name not in helps, "one HELP for %s" % name)
            helps[name] = line
            order.append(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            check(name not in types and kind in ("gauge", "counter"), "one TYPE for %s: %s" % (name, kind))
            types[name] = kind
        else:
            m = SAMPLE.match(line)
            if not check(m is not None, "a sample line: %r" % line):
                continue
            name, labels_text, value = m.group(1), m.group(3) or "", m.group(4)
            check(order and order[-1] == name and name in types, "%s's samples follow its HELP and TYPE" % name)
            labels, at = {}, 0
            while at < len(labels_text):
                lm = LABEL.match(labels_text, at)
                if not check(lm is not None, "labels of %r" % line):
                    break
                labels[lm.group(1)] = lm.group(2)
                at = lm.end()
            samples[(name, tuple(sorted(labels.items())))] = float(value)
    return samples, types


def get(url, method="GET"):
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def events_of(job_dir):
    try:
        with open(os.path.join(job_dir, "events.jsonl")) as f:
            return [json.loads(line) for line in f]
    except OSError:
        return []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_scrape(address, job_id, workdir):
    """Debian's prometheus server scrapes the endpoint every second; returns its query API's dtrain_worker_step."""
    port = free_port()
    config = write(os.path.join(workdir, "prometheus.yml"), """
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: dtrain
    honor_labels: true
    static_configs: [{targets: ["%s"]}]
""" % address)
    server = subprocess.Popen(["prometheus", "--config.file=" + config, "--storage.tsdb.path=" +
                               os.path.join(workdir, "tsdb"), "--web.listen-address=127.0.0.1:%d" % port],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": "dtrain_worker_step"}))

    def four_series():
        try:
            status, _, body = get(url)
        except OSError:
            return None
        result = json.loads(body).get("data", {}).get("result", []) if status == 200 else []
        return result if len(result) == 4 else None

    try:
        return wait_for("Prometheus to scrape dtrain_worker_step for 4 ranks", four_series, 60) or []
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


# ---- a running job, scraped
run = Run([], env={"PYTHONPATH": os.path.join(BUILD_DIR, "python")}, timeout=200)
stop_file = os.path.join(run.dir, "stop")
command = "[%s, %s, %s, 120]" % (PYTHON, write(os.path.join(run.dir, "worker.py"), REPORTING_WORKER), stop_file)
run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), SPEC % ("scraped", command, "127.0.0.1:0"))]
run.start()
job_dir = wait_for("the job's directory", lambda: (run.job_dirs() or [None])[0], 30) or ""
job_id = os.path.basename(job_dir)
listening = wait_for("the metrics_listening event",
                     lambda: [e for e in events_of(job_dir) if e.get("event") == "metrics_listening"], 30) or [{}]
address = listening[0].get("address", "")
check(re.match(r"^127\.0\.0\.1:[1-9][0-9]*$", address), "port 0 became a real port: %r" % address)
check(listening[0].get("url") == "http://%s/metrics" % address, "the event has the URL: %s" % listening[0])
base = "http://" + address
status_json = subprocess.run([DTRAIN, "status", job_dir, "--json"], capture_output=True, text=True, timeout=30)
check(json.loads(status_json.stdout or "{}").get("metrics_address") == address,
      "dtrain status --json has metrics_address: %s" % status_json.stdout[:300])


def scrape_ready():
    code, headers, body = get(base + "/metrics")
    samples, _ = parse_exposition(body) if code == 200 else ({}, {})
    ratios = [v for (n, _), v in samples.items() if n == "dtrain_worker_data_wait_ratio"]
    # (Each rank's latest report reaches the launcher within one report window: the agent coalesces them.)
    steps = [v for (n, _), v in samples.items() if n == "dtrain_worker_step"]
    return (code, headers, body, samples) if (len(ratios) == 4 and all(v > 0 for v in ratios) and len(steps) == 4
                                              and all(v >= 3 for v in steps)) else None


code, headers, body, samples = wait_for("4 ranks with closed windows and 3 steps in /metrics", scrape_ready,
                                        40) or (0, {}, "", {})
check(code == 200, "GET /metrics answers 200")
check(headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
      "the 0.0.4 content type: %s" % headers.get("Content-Type"))
_, types = parse_exposition(body)
check(types == {"dtrain_worker_step": "gauge", "dtrain_worker_step_seconds": "gauge",
                "dtrain_worker_tokens_per_second": "gauge", "dtrain_worker_samples_per_second": "gauge",
                "dtrain_worker_device_mem_peak_bytes": "gauge", "dtrain_worker_data_wait_ratio": "gauge",
                "dtrain_worker_comm_exposed_ratio": "gauge", "dtrain_worker_pipeline_bubble_ratio": "gauge",
                "dtrain_worker_rss_bytes": "gauge",
                "dtrain_worker_model_flops_per_second": "gauge", "dtrain_worker_mfu": "gauge",
                "dtrain_job_restarts_total": "counter", "dtrain_node_up": "gauge"}, "the families: %s" % types)
if shutil.which("promtool"):
    promtool = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True,
                              timeout=30)
    check(promtool.returncode == 0, "promtool check metrics passes: %s%s" % (promtool.stdout, promtool.stderr))
else:
    check(False, "promtool is installed (scripts/setup.sh installs prometheus)")


def value(name, **labels):
    return samples.get((name, tuple(sorted(dict(labels, job=job_id).items()))))


for rank in range(4):
    where = {"rank": str(rank), "node": str(rank // 2)}
    check((value("dtrain_worker_step", **where) or 0) >= 3, "rank %d's step: %s" % (rank, value("dtrain_worker_step",
                                                                                               **where)))
    check(value("dtrain_worker_step_seconds", **where) == 0.1, "rank %d's step is 0.1 s" % rank)
    check(value("dtrain_worker_tokens_per_second", **where) == 1000.0 + rank, "rank %d's tokens/s" % rank)
    check(value("dtrain_worker_rss_bytes", **where) == (100 + rank) << 20, "rank %d's RSS" % rank)
    wait, comm = (0.38, 0.0) if rank == 2 else (0.03, 0.35)
    check(abs((value("dtrain_worker_data_wait_ratio", **where) or -1) - wait) < 0.005,
          "rank %d's data wait ratio is %s: %s" % (rank, wait, value("dtrain_worker_data_wait_ratio", **where)))
    check(abs((value("dtrain_worker_comm_exposed_ratio", **where) or 0) - comm) < 0.005,
          "rank %d's exposed communication ratio is %s" % (rank, comm))
check(value("dtrain_job_restarts_total") == 0, "no restarts")
check(value("dtrain_node_up", node="0") == 1 and value("dtrain_node_up", node="1") == 1, "both nodes up")
# The same numbers as `dtrain status` (its snapshot is what /metrics is made from).
snapshot = json.loads(subprocess.run([DTRAIN, "status", job_dir, "--json"], capture_output=True, text=True,
                                     timeout=30).stdout or "{}")
row = [r for r in snapshot.get("ranks", []) if r["rank"] == 2]
check(row and abs(row[0]["data_wait_ratio"] - value("dtrain_worker_data_wait_ratio", rank="2", node="1")) < 0.005,
      "rank 2's data wait ratio agrees with dtrain status: %s" % row)
check(get(base + "/")[0] == 404 and get(base + "/metrics", "POST")[0] == 405, "404 for /, 405 for POST")

if shutil.which("prometheus"):
    series = prometheus_scrape(address, job_id, run.dir)
    check(sorted(s["metric"].get("rank") for s in series) == ["0", "1", "2", "3"] and
          all(s["metric"].get("job") == job_id and float(s["value"][1]) > 0 for s in series),
          "Prometheus' query API has dtrain_worker_step of every rank with the job's label: %s" % series)
else:
    check(False, "prometheus is installed (scripts/setup.sh installs it)")

write(stop_file, "")
run.wait()
run.show()
check(run.code == 0, "the job succeeds, got %s" % run.code)
check("serving Prometheus metrics at http://%s/metrics" % address in run.err, "the console names the URL")
check("reachable from other hosts" not in run.err, "no warning for a loopback address")
try:
    socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), timeout=5).close()
    check(False, "the metrics port is closed after the job")
except OSError:
    pass
with open(os.path.join(job_dir, "status.json")) as f:
    check(json.load(f).get("metrics_address") == address, "status.json keeps the address")
run.assert_no_leaks()

# ---- a bad address: refused before anything starts
bad = Run([], timeout=60)
bad.args += ["launch", write(os.path.join(bad.dir, "job.yaml"), SPEC % ("bad", "[true]", "9400"))]
bad.run()
check(bad.code == 2 and "observe.metrics_addr: '9400' has no port" in bad.err,
      "a bad address exits 2 naming the key: %s %s" % (bad.code, bad.err))
check(not bad.job_dirs(), "and starts nothing")

# ---- a port in use: the job runs without metrics, and says so
with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    busy_address = "127.0.0.1:%d" % taken.getsockname()[1]
    busy = Run([], timeout=120)
    busy.args += ["launch", write(os.path.join(busy.dir, "job.yaml"), SPEC % ("busy", "[true]", busy_address))]
    busy.run()
check(busy.code == 0, "a job whose metrics port is taken still runs: %s %s" % (busy.code, busy.err))
check("warning: cannot serve metrics on %s (observe.metrics_addr): bind: Address already in use" % busy_address
      in busy.err, "and warns, naming the address: %s" % busy.err)
busy.assert_no_leaks()

# ---- every interface: allowed, and the console says who can read it
wide = Run([], timeout=120)
wide.args += ["launch", write(os.path.join(wide.dir, "job.yaml"), SPEC % ("wide", "[true]", "0.0.0.0:0"))]
wide.run()
check(wide.code == 0 and re.search(r"serving Prometheus metrics at http://0\.0\.0\.0:[1-9][0-9]*/metrics "
                                   r"\(reachable from other hosts: the metrics carry no secrets", wide.err),
      "a non-loopback address is served with a note on who can read it: %s" % wide.err)
wide.assert_no_leaks()

finish()
