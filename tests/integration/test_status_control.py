"""`dtrain status` against a real launcher when its control socket or its run directory is not what it should be:
  idle      30 clients connect to the control socket and never read: `dtrain status` still answers live, at once;
  owner     (root) a second local user asks about root's job: refused at connect (EACCES), the note names the
            owner and how to ask as them, and the last snapshot is shown;
  full      (root) the run directory is a 64 KiB tmpfs that the job's output fills: the launcher warns once that it
            cannot write status.json, a live `dtrain status` says the file is stale, and after the launcher ends
            (its last write failed too) `dtrain status` says the launcher is gone and how old the snapshot is."""

import json
import os
import pwd
import socket
import subprocess
import time
import uuid

from harness import DTRAIN, Run, check, finish, kill_tagged, wait_for, write

SPEC = """
name: %s
nodes: {provider: local, count: 1}
workers_per_node: 1
command: [/bin/sh, -c, "%s"]
stop: {grace_s: 1}
logs: {dir: %s, console: none}
"""


def start(name, script, logs="runs"):
    run = Run([], timeout=60)
    run.args += ["launch", write(os.path.join(run.dir, "job.yaml"), SPEC % (name, script, logs))]
    run.start()
    return run


def job_dir(run, logs="runs"):
    base = logs if os.path.isabs(logs) else os.path.join(run.dir, logs)
    dirs = [os.path.join(base, d) for d in os.listdir(base)] if os.path.isdir(base) else []
    return dirs[0] if len(dirs) == 1 and os.path.exists(os.path.join(dirs[0], "control.sock")) else None


def status(directory, *args, user=None):
    kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    start_time = time.monotonic()
    done = subprocess.run([DTRAIN, "status", directory] + list(args), capture_output=True, text=True, timeout=30,
                          cwd="/", **kwargs)
    return done, time.monotonic() - start_time


def stop(run):
    run.proc.terminate()
    run.wait()
    run.assert_no_leaks()


# ---- idle: 30 clients that never read do not keep `dtrain status` out.
run = start("idle", "exec sleep 300")
directory = wait_for("the control socket", lambda: job_dir(run), 20, interval=0.05)
if directory:
    idle = []
    for _ in range(30):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(directory, "control.sock"))
        idle.append(s)
    done, took = status(directory, "--json")
    snapshot = json.loads(done.stdout) if done.returncode == 0 else {}
    check(snapshot.get("state") == "running" and "stale" not in snapshot,
          "with 30 idle clients, status answers live: exit %d %r %r" % (done.returncode, done.stdout[:200], done.stderr))
    check(took < 4.0, "and at once (%.2f s)" % took)
    done, _ = status(directory)
    check(done.returncode == 0 and "note:" not in done.stdout, "the table has no note: %r" % done.stdout[:300])
    for s in idle:
        s.close()
stop(run)

# ---- owner: another user's job.
if os.geteuid() == 0:
    user_name = "dtst" + uuid.uuid4().hex[:8]
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", user_name],
                   check=True)
    try:
        other = pwd.getpwnam(user_name)
        run = start("owner", "exec sleep 300")
        os.chmod(run.dir, 0o755)
        directory = wait_for("the control socket", lambda: job_dir(run), 20, interval=0.05)
        if directory:
            done, took = status(directory, user=other)
            print("--- status as %s: exit %d\n%s%s" % (user_name, done.returncode, done.stdout, done.stderr))
            check(done.returncode == 0 and "job owner-" in done.stdout, "the other user sees the last snapshot")
            check("Permission denied: the job belongs to root (uid 0)" in done.stdout and
                  "sudo -u root dtrain status " + directory in done.stdout,
                  "its note names the owner and how to ask as them: %r" % done.stdout)
            check("gone" not in done.stdout and "killed" not in done.stdout, "and does not call the launcher gone")
        stop(run)
    finally:
        subprocess.run(["userdel", user_name], check=False)
else:
    print("SKIPPED: owner case: needs root to create a second local user", flush=True)

# ---- full: status.json on a full disk.
if os.geteuid() == 0:
    full = os.path.join(Run([]).dir, "small-fs")
    os.makedirs(full)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", full]).returncode == 0:
        try:
            # The worker fills the disk with its log, then runs past a few status.json rewrites (every 5 s).
            run = start("full", "sleep 0.5; yes | head -c 200000; sleep 7", logs=full)
            directory = wait_for("the control socket", lambda: job_dir(run, full), 20, interval=0.05)
            if directory:
                snapshot = wait_for("the launcher's record of the failed write",
                                    lambda: json.loads(status(directory, "--json")[0].stdout or "{}")
                                    .get("status_file_error"), 15, interval=0.05)
                check(snapshot and "No space left on device" in snapshot.get("message", ""),
                      "a live snapshot records why status.json is not written: %s" % snapshot)
                done, _ = status(directory)
                check("note: live; status.json is stale: the launcher cannot write " in done.stdout,
                      "the live table says the file is stale: %r" % done.stdout[:400])
            run.wait()
            print(run.err)
            check(run.code == 0, "the job still succeeds, got %s" % run.code)
            check(run.err.count("cannot write " + os.path.join(directory or "", "status.json")) == 1,
                  "the launcher warned once: %r" % run.err[-1000:])
            done, _ = status(directory)
            check(done.returncode == 0 and "running" in done.stdout.splitlines()[0] and
                  "the launcher is gone" in done.stdout and "could not write status.json" in done.stdout and
                  " s ago" in done.stdout, "afterwards status says the file is stale and how old: %r" % done.stdout)
            run.assert_no_leaks()
        finally:
            kill_tagged(run.tag)
            subprocess.run(["umount", "-l", full])
    else:
        print("SKIPPED: full-disk case: cannot mount a tmpfs here", flush=True)
else:
    print("SKIPPED: full-disk case: needs root to mount a small tmpfs", flush=True)

finish()
