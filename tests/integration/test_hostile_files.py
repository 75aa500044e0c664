"""Every file dtrain reads is a regular file of bounded size, or a prompt refusal (exit 2) that names it.

For each command that reads a file a user names (`topo --import`, `agent --topology`, a spec and its
`nodes.topology`, `status`'s status.json, `report`'s events.jsonl and status.json), the file is replaced by /dev/zero
(never ends), a FIFO nobody writes (a blocking open or read waits forever), a directory, and a regular file past the
command's bound. Each must end within seconds with exit 2 and a message naming the file. A 300-GPU topology matrix is
refused by its GPU count, and events.jsonl is streamed: a line past the line bound is skipped, not read whole."""

import os
import subprocess
import tempfile
import time

from harness import DTRAIN, check, finish, write

PROMPT_S = 5
WORK = tempfile.mkdtemp(prefix="dtrain-hostile-files-")


def dtrain(args, cwd=WORK):
    start = time.monotonic()
    try:
        done = subprocess.run([DTRAIN] + args, cwd=cwd, capture_output=True, text=True, timeout=30,
                              errors="replace")
    except subprocess.TimeoutExpired:
        check(False, "dtrain %s did not end within 30 s" % " ".join(args))
        return None, 0
    return done, time.monotonic() - start


def refused(args, named, why, cwd=WORK):
    done, took = dtrain(args, cwd)
    if done is None:
        return
    what = "dtrain %s (%s)" % (" ".join(args), why)
    check(done.returncode == 2, "%s -> exit 2, got %s: %s" % (what, done.returncode, done.stderr[-400:]))
    check(named in done.stderr and why in done.stderr, "%s names %s and says %r: %s" % (what, named, why,
                                                                                         done.stderr[-400:]))
    check(took < PROMPT_S, "%s ends within %d s, took %.1f s" % (what, PROMPT_S, took))


def fifo(path):
    os.mkfifo(path)
    return path


def sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def hostile_files(directory, name, too_large):
    """(path, what the refusal says) for each kind of hostile file, made under `directory` as `name`."""
    os.makedirs(directory, exist_ok=True)
    base = os.path.join(directory, name)
    zero = base + ".zero"
    os.symlink("/dev/zero", zero)
    return [(zero, "is a character device, not a regular file"),
            (fifo(base + ".fifo"), "is a FIFO (named pipe), not a regular file"),
            (os.makedirs(base + ".dir") or base + ".dir", "is a directory, not a regular file"),
            (sparse(base + ".big", too_large + 1), "bytes, more than the %d read here" % too_large)]


# topo --import and agent --topology: at most 4 MiB.
for path, why in hostile_files(os.path.join(WORK, "topo"), "topo.txt", 4 << 20):
    refused(["topo", "--import", path], path, why)
    refused(["agent", "--listen", "127.0.0.1:0", "--topology", path], path, why)

header = "\t" + "\t".join("GPU%d" % i for i in range(300)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
wide = write(os.path.join(WORK, "300gpus.txt"), header)
refused(["topo", "--import", wide], wide + ":1:", "the header names 300 GPUs and 0 NICs; a node has at most 256")

# A spec and its nodes.topology: a spec is at most 1 MiB.
for path, why in hostile_files(os.path.join(WORK, "spec"), "job.yaml", 1 << 20):
    refused(["validate", path], path, why)
for path, why in hostile_files(os.path.join(WORK, "spec-topology"), "topo.txt", 4 << 20):
    spec = write(os.path.join(WORK, "job-%d.yaml" % abs(hash(path))),
                 "name: x\ncommand: [a]\nnodes: {count: 1, topology: %s}\n" % path)
    refused(["validate", spec], path, why)

# status: status.json at most 128 MiB; report: status.json the same, events.jsonl streamed.
EVENTS = '{"ts":1000,"event":"job_start","job":"j","name":"n","command":["a"]}\n'
for path, why in hostile_files(os.path.join(WORK, "status-files"), "status.json", 128 << 20):
    run = tempfile.mkdtemp(dir=WORK)
    write(os.path.join(run, "events.jsonl"), EVENTS)
    os.rename(path, os.path.join(run, "status.json"))
    refused(["status", run], os.path.join(run, "status.json"), why)
    refused(["report", run], os.path.join(run, "status.json"), why)
for path, why in hostile_files(os.path.join(WORK, "event-files"), "events.jsonl", 0)[:3]:
    run = tempfile.mkdtemp(dir=WORK)
    os.rename(path, os.path.join(run, "events.jsonl"))
    refused(["report", run], os.path.join(run, "events.jsonl"), why)

# Without a run named, status and report look for the newest job under ./runs by its events.jsonl's first line:
# that look must not block on a FIFO or read /dev/zero either.
for path, why in hostile_files(os.path.join(WORK, "newest-files"), "events.jsonl", 0)[:3]:
    cwd = tempfile.mkdtemp(dir=WORK)
    job = os.path.join(cwd, "runs", "job-1")
    os.makedirs(job)
    os.rename(path, os.path.join(job, "events.jsonl"))
    refused(["report"], os.path.join("runs", "job-1", "events.jsonl"), why, cwd=cwd)
    done, took = dtrain(["status"], cwd)
    check(done is not None and done.returncode != 0 and took < PROMPT_S,
          "status in a directory whose newest job's events.jsonl %s ends at once with an error (%.1f s, exit %s)" %
          (why, took, done and done.returncode))

# A line past the 8 MiB line bound is skipped whole; the lines around it are read.
run = tempfile.mkdtemp(dir=WORK)
with open(os.path.join(run, "events.jsonl"), "w") as f:
    f.write(EVENTS + '{"ts":2000,"event":"node_lost","what":"' + "x" * (9 << 20) + '"}\n' +
            '{"ts":3000,"event":"job_end","outcome":"succeeded","exit_code":0}\n')
done, took = dtrain(["report", run])
check(done is not None and done.returncode == 0, "report with a 9 MiB line -> exit 0: %s" % (done and done.stderr))
with open(os.path.join(run, "report.html")) as f:
    page = f.read()
check("xxxxxxxxxx" not in page and "succeeded" in page, "the long line is skipped, the job's end is read")

finish()
