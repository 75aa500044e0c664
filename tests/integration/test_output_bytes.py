"""Worker output is bytes: whatever a worker writes (bytes that are not UTF-8, multi-byte characters across the
64 KiB line limit, a 100 MB line) reaches the log file byte for byte and the console without breaking the session,
and a launcher whose agent stops answering still exits on SIGTERM within stop.grace_s + 1 s."""

import os
import re
import signal
import subprocess
import time

from harness import Run, argv_of, check, describe, finish, kill_tagged, tagged_pids, wait_no_leaks, write


def run_bytes(args, timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    """Runs dtrain with binary stdout/stderr (worker bytes need not decode); returns the Run with out/err bytes."""
    run = Run(args, timeout=timeout)
    proc = subprocess.Popen(run.args, cwd=run.dir, env=run.env, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        run.out, run.err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        run.out, run.err = proc.communicate()
        kill_tagged(run.tag)
        run.out, run.err = run.out or b"", run.err or b""
        check(False, "dtrain %s did not return within %d s" % (" ".join(args[:6]), timeout))
    run.code = proc.returncode
    return run


def rank_log(run, rank=0):
    jobs = run.job_dirs()
    if not check(len(jobs) == 1, "one job directory in %s" % run.dir):
        return b""
    with open(os.path.join(jobs[0], "attempt_0", "rank_%d.log" % rank), "rb") as f:
        return f.read()


# 1. A byte that is not UTF-8, on stderr and on stdout, with and without the console showing it.
for console, stream in (("none", ">&2"), ("all", ">&2"), ("all", "")):
    run = run_bytes(["run", "-n", "1", "--console", console, "--", "/bin/sh", "-c",
                     "printf 'err\\377\\n' %s; exit 0" % stream], timeout=30)
    check(run.code == 0, "\\377 on %s, console %s: exit 0, got %s: %r" % (stream or "stdout", console, run.code, run.err[-400:]))
    check(rank_log(run) == b"err\xff\n", "the log holds the byte as written")
    if console == "all":
        shown = run.err if stream else run.out
        check(b"[0] err\xff\n" in shown, "the console shows the worker's bytes: %r" % shown[-200:])

# 2. A failing worker whose stderr tail and error file are not UTF-8: the summary carries them.
error_file_writer = "printf '{\"message\": \"bad \\377 byte\"}' > \"$TORCHELASTIC_ERROR_FILE\"; printf 'boom \\377\\n' >&2; exit 3"
run = run_bytes(["run", "-n", "1", "--console", "none", "--", "/bin/sh", "-c", error_file_writer], timeout=30)
check(run.code == 3, "failing worker: exit 3, got %s: %r" % (run.code, run.err[-400:]))
check(b"| boom \\xff" in run.err, "the summary quotes the stderr tail, the byte escaped: %r" % run.err[-600:])
check(b"bad \\xff byte" in run.err, "the summary quotes the error file, the byte escaped: %r" % run.err[-600:])
check(b"\xff" not in run.err, "no raw \\xff on the launcher's terminal: %r" % run.err[-600:])
check(rank_log(run) == b"boom \xff\n", "the log holds the byte as written")

# 2b. Terminal controls from a worker (ESC, BEL: retitle the window, clear the screen) in its stderr tail, its
#     reported phase and its error file reach the summary escaped; its log keeps them exact.
hostile = r"""
import json, os, sys, time
import dtrain_health as health
health.phase("\x1b]0;pwned\x07phase\x1b[2J")
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
    json.dump({"message": "error \x1b[31mfile\x07"}, f)
sys.stderr.write("boom \x1b]0;pwned\x07\x1b[2J\n")
sys.stderr.flush()
time.sleep(1.5)   # a heartbeat carries the last report
sys.exit(3)
"""
run = run_bytes(["run", "-n", "1", "--console", "none", "--", "/usr/bin/python3", "-c", hostile], timeout=30)
check(run.code == 3, "hostile worker: exit 3, got %s: %r" % (run.code, run.err[-400:]))
check(b"| boom \\x1b]0;pwned\\x07\\x1b[2J" in run.err, "the stderr tail, escaped: %r" % run.err[-900:])
check(b"last phase: \\x1b]0;pwned\\x07phase\\x1b[2J" in run.err, "the phase, escaped: %r" % run.err[-900:])
check(b"error \\x1b[31mfile\\x07" in run.err, "the error file's text, escaped: %r" % run.err[-900:])
check(b"\x1b" not in run.err and b"\x07" not in run.err, "no raw ESC or BEL on the terminal: %r" % run.err[-900:])
check(rank_log(run) == b"boom \x1b]0;pwned\x07\x1b[2J\n", "the log keeps the bytes exact: %r" % rank_log(run))

# 3. Valid UTF-8 that the 64 KiB splitter used to cut inside a character.
run = run_bytes(["run", "-n", "1", "--console", "all", "--", "/usr/bin/python3", "-c", "print('\u20ac' * 40000)"],
                timeout=60)
check(run.code == 0, "'\u20ac' * 40000: exit 0, got %s: %r" % (run.code, run.err[-400:]))
check(rank_log(run) == ("\u20ac" * 40000 + "\n").encode(), "the log holds the line unchanged")
shown = [line for line in run.out.split(b"\n") if line.startswith(b"[0] ")]
check(b"".join(line[4:] for line in shown) == ("\u20ac" * 40000).encode(),
      "the console shows the line in pieces that join to it (%d pieces)" % len(shown))
for line in shown:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as e:
        check(False, "a console piece is not valid UTF-8: %s" % e)

# 4. A 100 MB line without a newline: the log file gets no newline inserted.
run = run_bytes(["run", "-n", "1", "--console", "none", "--", "/bin/sh", "-c",
                 "head -c 100000000 /dev/zero | tr '\\0' x"], timeout=120)
check(run.code == 0, "100 MB line: exit 0, got %s" % run.code)
log = rank_log(run)
check(len(log) == 100000000 and log.count(b"\n") == 0,
      "100 MB line: the log holds exactly 100000000 bytes and no newline (got %d bytes, %d newlines)" %
      (len(log), log.count(b"\n")))
del log

# 5. Console lines stay whole when the launcher's stdout and stderr go to one file.
out_path = os.path.join(Run([]).dir, "console.txt")
with open(out_path, "wb") as out_file:
    script = ("import sys\n"
              "for i in range(3000):\n"
              "    (sys.stdout if i % 2 else sys.stderr).write(('a' if i % 2 else 'b') * 3000 + '\\n')\n")
    run = run_bytes(["run", "-n", "2", "--console", "all", "--", "/usr/bin/python3", "-c", script], timeout=120,
                    stdout=out_file, stderr=subprocess.STDOUT)
check(run.code == 0, "console to a file: exit 0, got %s" % run.code)
with open(out_path, "rb") as f:
    lines = f.read().split(b"\n")[:-1]
whole = re.compile(rb"^\[[01]\] (a{3000}|b{3000})$")
broken = [line[:60] for line in lines if not whole.match(line) and not line.startswith(b"dtrain: ")]
check(not broken, "every console line is whole (%d of %d are not, e.g. %r)" % (len(broken), len(lines), broken[:3]))
check(sum(1 for line in lines if whole.match(line)) == 6000, "all 6000 worker lines are there")

# 6. An agent that stops answering mid-job (SIGSTOP: its session stays open, nothing comes back) cannot keep the
#    launcher from exiting on SIGTERM: it exits within stop.grace_s + 1 s, and nothing is left running.
spec = """
name: stalled
nodes: {provider: local, count: 2}
workers_per_node: 1
command: [/bin/sh, -c, "echo started; exec sleep 300"]
stop: {grace_s: 2}
health: {node_timeout_s: 30}
"""
run = Run([], timeout=60)
run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), spec)]
run.start()


def agents_and_sleepers(tag):
    agents, sleepers = [], []
    for pid in tagged_pids(tag):
        argv = argv_of(pid)
        if argv[1:2] == [b"agent"]:
            agents.append(pid)
        elif argv[:1] == [b"sleep"]:
            sleepers.append(pid)
    return agents, sleepers


deadline = time.monotonic() + 30
agents, sleepers = [], []
while time.monotonic() < deadline:
    agents, sleepers = agents_and_sleepers(run.tag)
    if len(agents) == 2 and len(sleepers) == 2:
        break
    time.sleep(0.05)
if check(len(agents) == 2 and len(sleepers) == 2, "2 agents and 2 workers running: %s" % describe(tagged_pids(run.tag))):
    os.kill(agents[0], signal.SIGSTOP)
    time.sleep(0.5)
    start = time.monotonic()
    os.kill(run.proc.pid, signal.SIGTERM)
    run.wait()
    took = time.monotonic() - start
    run.show()
    check(run.code == 143, "SIGTERM with a stalled agent: exit 143, got %s" % run.code)
    check(took <= 2.0 + 1.0, "the launcher exited %.2f s after SIGTERM (stop.grace_s 2 + 1 s allowed)" % took)
    run.assert_no_leaks(timeout=5.0)
else:
    run.proc.kill()
    kill_tagged(run.tag)

# 7. A log file on a full disk: the launcher warns the moment it happens and again when the job ends, naming the
#    rank, the file and how much was lost; the job itself still succeeds (its output was not the job's result).
if os.geteuid() == 0:
    full = os.path.join(Run([]).dir, "small-fs")
    os.makedirs(full)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", full]).returncode == 0:
        try:
            run = run_bytes(["run", "-n", "2", "--console", "none", "--logs-dir", full, "--",
                             "/bin/sh", "-c", "seq 1 100000; sleep 0.5"], timeout=60)
            err = run.err.decode(errors="replace")
            check(run.code == 0, "full disk: the job still exits 0, got %s: %s" % (run.code, err[-500:]))
            check(re.search(r"warning: attempt 0 rank [01]: cannot append to log file '.*rank_[01]\.log': "
                            r"No space left on device", err) is not None, "a warning as it happens: %s" % err[-800:])
            check(re.search(r"warning: 2 log files are incomplete:\n.*attempt 0 rank 0: .*No space left on device "
                            r"\(\d+ bytes of output not written\)", err) is not None,
                  "a closing warning with the bytes lost: %s" % err[-800:])
        finally:
            subprocess.run(["umount", "-l", full])
    else:
        print("SKIPPED: full-disk case: cannot mount a tmpfs here", flush=True)
else:
    print("SKIPPED: full-disk case: needs root to mount a small tmpfs", flush=True)

finish()
