"""A node whose /dev/shm cannot hold the shm backend's staging slots (Docker gives a container 64 MiB unless told
otherwise). /dev/shm itself cannot be filled safely for one test, so a 1 MiB tmpfs of the test's own stands in for it
through DTRAIN_SHM_DIR (trainer/comm/shm/segment.h). Mounting it needs root; without root the test says SKIPPED.

1. The default backend, auto, falls back to gloo on every rank together and dtrain-trainer trains; rank 0 says so
   once, naming the directory's free space and the size a segment reserves.
2. DTRAIN_COMM_BACKEND=shm, asked for by name, fails with posix_fallocate's own error ("No space left on device", not
   a stale errno), where, and the fix.
3. A 6 MiB tmpfs, room for the job's segment of 2 ranks (4 MiB of staging slots) but not for a pipeline group's
   besides: dtrain-trainer --pp 2 makes its job's communicator in shared memory, its pipeline group over gloo (rank 0
   says so once, naming the group and what was short), and trains."""

import os
import subprocess
import sys
import tempfile

from harness import BUILD_DIR, Run, check, finish

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import trainer_harness  # noqa: E402

TRAINER = os.path.join(BUILD_DIR, "bin", "dtrain-trainer")


def mount_small_tmpfs(size="1m"):
    """A fresh directory with a tmpfs of `size` on it, or exits 77 saying why that is not possible here."""
    if os.geteuid() != 0:
        print("SKIPPED: mounting a 1 MiB tmpfs as a full /dev/shm needs root")
        raise SystemExit(77)
    path = tempfile.mkdtemp(prefix="dtrain-shm-full-")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", path], capture_output=True,
                          text=True)
    if done.returncode != 0:
        os.rmdir(path)
        print("SKIPPED: mount -t tmpfs -o size=%s failed: %s" % (size, done.stderr.strip()))
        raise SystemExit(77)
    return path


def train(name, shm_dir, shard, work, backend=None, extra=()):
    env = {"DTRAIN_SHM_DIR": shm_dir, "OMP_NUM_THREADS": "1", "DTRAIN_COMM_TIMEOUT_MS": "20000"}
    if backend:
        env["DTRAIN_COMM_BACKEND"] = backend
    run = Run(["run", "-n", "2", "--console", "all", "--grace-s", "2", "--name", name, "--", TRAINER] +
              trainer_harness.MODEL + ["--data", shard, "--seq-len", "64", "--batch-size", "2", "--steps", "3",
                                       "--threads", "1", "--metrics", os.path.join(work, name + ".jsonl"),
                                       *extra],
              cwd=work, env=env, timeout=120)
    run.run()
    run.show()
    return run


def main():
    if not os.path.exists(TRAINER):
        print("SKIPPED: %s is not built" % TRAINER)
        raise SystemExit(77)
    shm_dir = mount_small_tmpfs()
    try:
        work = trainer_harness.workdir()
        shard = trainer_harness.make_text_shard(work)

        auto = train("shm-full-auto", shm_dir, shard, work)
        check(auto.code == 0, "auto with a full /dev/shm trains to the end, exit %s" % auto.code)
        text = auto.out + auto.err
        check("comm gloo" in text and "comm shm" not in text, "the trainer runs over gloo")
        notice = "DTRAIN_COMM_BACKEND=auto uses gloo for every rank, without shared memory"
        check(text.count(notice) == 1, "rank 0 says once that auto uses gloo")
        check(shm_dir + " has 1.0 MiB free (of 1.0 MiB); a segment of 2 ranks reserves 4.0 MiB" in text,
              "the notice names the free space and the size a segment reserves")
        check("--shm-size" in text, "the notice says how to give /dev/shm more room")
        check(len(trainer_harness.metrics(os.path.join(work, "shm-full-auto.jsonl"))) == 3, "3 steps were trained")
        auto.assert_no_leaks()

        shm = train("shm-full-shm", shm_dir, shard, work, backend="shm")
        check(shm.code != 0, "the shm backend asked for by name fails, exit %s" % shm.code)
        text = shm.out + shm.err
        check("posix_fallocate: No space left on device" in text, "it names posix_fallocate's error")
        check("Operation now in progress" not in text, "not a stale errno")
        check(shm_dir + "/dtrain@shm-full-shm" in text, "it names the segment file")
        check("docker run --shm-size" in text and "DTRAIN_COMM_BACKEND=gloo" in text, "it names the fixes")
        check(os.listdir(shm_dir) == [], "no segment is left in the directory: %s" % os.listdir(shm_dir))
        shm.assert_no_leaks()
    finally:
        subprocess.run(["umount", "-l", shm_dir])
        os.rmdir(shm_dir)
    group_without_room()
    finish()


def group_without_room():
    shm_dir = mount_small_tmpfs("6m")
    try:
        work = trainer_harness.workdir()
        shard = trainer_harness.make_text_shard(work)
        run = train("shm-full-group", shm_dir, shard, work, extra=["--pp", "2", "--grad-accum", "2"])
        check(run.code == 0, "--pp 2 with room for the job's segment only trains to the end, exit %s" % run.code)
        text = run.out + run.err
        check("comm shm" in text, "the job's communicator is in shared memory")
        check("groups over tp local, dp local, pp gloo" in text, "the pipeline group is over gloo")
        notice = "dtrain: group 'pp-tp0-dp0' uses gloo, without shared memory"
        check(text.count(notice) == 1, "rank 0 of the group says so once")
        check("as its segment could not be made: shm communicator: cannot reserve 4.0 MiB" in text and
              "No space left on device" in text and "--shm-size" in text, "it names what was short and the fix")
        check(len(trainer_harness.metrics(os.path.join(work, "shm-full-group.jsonl"))) == 3, "3 steps were trained")
        check(os.listdir(shm_dir) == [], "no segment is left in the directory: %s" % os.listdir(shm_dir))
        run.assert_no_leaks()
    finally:
        subprocess.run(["umount", "-l", shm_dir])
        os.rmdir(shm_dir)


main()
