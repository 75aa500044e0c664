"""Shared by the trainer's end-to-end tests (test_ddp_*, test_accum_*, test_resume_*, test_trainer_*): find the
binaries, make a token shard with `dtrain-trainer prepare-text`, run dtrain-trainer alone or under the real `dtrain`
launcher, read its --metrics file, compare losses.

Every run gets a unique DTRAIN_TEST_TAG in its environment, so processes it started can be found (and killed)
through /proc/*/environ.
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import scratch  # noqa: E402

BUILD_DIR = os.environ.get("DTRAIN_BUILD_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "build")
DTRAIN = os.environ.get("DTRAIN_BIN") or os.path.join(BUILD_DIR, "bin", "dtrain")
TRAINER = os.path.join(BUILD_DIR, "bin", "dtrain-trainer")
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REFERENCE = os.path.join(SOURCE_DIR, "trainer", "python", "gpt_reference.py")
PYTHON = "/usr/bin/python3"

# Two buckets of DDP gradients (1 MiB, then the rest): L=2 C=128 has about 440k parameters (1.7 MiB).
MODEL = ["--layers", "2", "--channels", "128", "--heads", "4", "--max-seq-len", "64", "--vocab", "256"]

failures = []


def require_binaries(*paths):
    for path in paths:
        if not os.path.exists(path):
            print(f"{path} is not built (build the dtrain and dtrain-trainer targets first)", file=sys.stderr)
            sys.exit(1)


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message, flush=True)
    if not condition:
        failures.append(message)
    return condition


def finish():
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
    scratch.passed()
    sys.exit(0)


# The ten AdamW steps the parity tests compare (warmup, cosine schedule, clipping, weight decay); each test adds
# --init-from, --data, the batch and the threads.
TEN_STEPS = ["--seq-len", "64", "--steps", "10", "--lr", "1e-3", "--warmup-steps", "3", "--lr-schedule", "cosine",
             "--min-lr-ratio", "0.1", "--grad-clip", "1.0", "--weight-decay", "0.1"]


def reference_init(work, model=None, seed=5):
    """The reference's initial checkpoint of `model` (default MODEL) as work/init.bin; ends the test if it fails."""
    init = os.path.join(work, "init.bin")
    proc = run([PYTHON, REFERENCE, "init", "--out", init, "--seed", str(seed)] + (model or MODEL), work)
    if not check(proc.code == 0, "the reference writes an initial checkpoint"):
        finish()
    return init


def workdir():
    return tempfile.mkdtemp(prefix="dtrain-trainer-test-")


def make_text_shard(directory, name="data.bin", words=60000, seed=7):
    """Pseudo-English text (a small vocabulary of words, so the loss falls), made a shard by prepare-text."""
    rng = random.Random(seed)
    vocab = ["the", "model", "trains", "on", "bytes", "and", "ranks", "share", "gradients", "each", "step",
             "loss", "falls", "while", "buckets", "overlap", "backward", "with", "allreduce", "of", "a", "GPT"]
    text = " ".join(rng.choice(vocab) + ("." if rng.random() < 0.1 else "") for _ in range(words))
    text_path = os.path.join(directory, name + ".txt")
    with open(text_path, "w") as f:
        f.write(text)
    shard = os.path.join(directory, name)
    proc = subprocess.run([TRAINER, "prepare-text", text_path, shard], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        sys.exit(1)
    return shard


def trainer_env(tag, extra=None):
    env = dict(os.environ)
    env["DTRAIN_TEST_TAG"] = tag
    env["OMP_NUM_THREADS"] = "1"
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT"):
        env.pop(name, None)
    env.update(extra or {})
    return env


class Result:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    def show(self):
        print(f"--- exit {self.code}\n--- stdout\n{self.out}--- stderr\n{self.err}---", flush=True)


def run(argv, cwd, timeout=120, env=None):
    tag = uuid.uuid4().hex
    proc = subprocess.Popen(argv, cwd=cwd, env=trainer_env(tag, env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tagged(tag)
        proc.kill()
        out, err = proc.communicate()
        check(False, f"{' '.join(argv[:3])} timed out after {timeout} s")
    result = Result(proc.returncode, out, err)
    if result.code != 0:
        result.show()
    return result


def trainer(args, cwd, **kw):
    """dtrain-trainer as a single process."""
    return run([TRAINER] + list(args), cwd, **kw)


def launched(nproc, args, cwd, launcher_args=(), **kw):
    """dtrain-trainer as nproc ranks started by the real launcher (`dtrain run -n N -- dtrain-trainer ...`)."""
    argv = [DTRAIN, "run", "-n", str(nproc), "--grace-s", "2", "--logs-dir", os.path.join(cwd, "runs"),
            *launcher_args, "--", TRAINER] + list(args)
    return run(argv, cwd, **kw)


def reference_and_one_rank(work, common):
    """10 steps of the PyTorch reference and of one dtrain-trainer rank, both with batch 4 and `common`'s flags: their
    metrics (a list of dicts each); ends the test when either fails."""
    theirs = os.path.join(work, "torch.jsonl")
    ref = run([PYTHON, REFERENCE, "train", "-B", "4", "--metrics", theirs] + common, work, timeout=240)
    check(ref.code == 0, "the PyTorch reference exits 0")
    single = os.path.join(work, "single.jsonl")
    one = trainer(common + ["--batch-size", "4", "--metrics", single], work)
    check(one.code == 0, "1 rank of dtrain-trainer exits 0")
    if ref.code != 0 or one.code != 0:
        finish()
    return metrics(theirs), metrics(single)


def check_layout_run(label, ours, reference, one_rank, bf16):
    """A model-parallel layout's 10 steps (metrics dicts) against the PyTorch reference's and the 1-rank run's: in
    bf16, every loss within 0.05 absolute of the fp32 reference; in fp32, every loss within 1e-5 relative of the
    reference and every gradient norm within 1e-5 relative of 1 rank's."""
    if bf16:
        worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(ours, reference))
        check(len(ours) == 10 and worst <= 0.05, f"{label}: every step within 0.05 of fp32 PyTorch (worst {worst:.4f})")
        return
    compare_losses(f"{label} vs PyTorch", [m["loss"] for m in ours], [m["loss"] for m in reference], 1e-5)
    worst = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(ours, one_rank))
    check(worst <= 1e-5, f"{label}: gradient norms within 1e-5 of 1 rank's (worst {worst:.2e})")


def trained(work, ranks, label, args):
    """`dtrain run -n ranks` (or one process) of dtrain-trainer with args and --metrics work/label.jsonl; its metrics,
    or None (with a failed check and its output) when it did not exit 0."""
    path = os.path.join(work, label + ".jsonl")
    done = launched(ranks, args + ["--metrics", path], work) if ranks > 1 else trainer(args + ["--metrics", path], work)
    if not check(done.code == 0, f"{label}: exits 0"):
        done.show()
        return None
    return metrics(path)


def checkpoint_at(work, source, step, label):
    """A copy of `source`'s checkpoint directory (as work/ckpt-label) with the pair of `step` only."""
    directory = os.path.join(work, "ckpt-" + label)
    shutil.copytree(source, directory)
    for name in os.listdir(directory):
        if not name.endswith(f"_{step}.bin"):
            os.remove(os.path.join(directory, name))
    return directory


def metrics(path):
    """The --metrics file as a list of dicts, in file order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def losses(path):
    return [m["loss"] for m in metrics(path)]


def compare_losses(what, actual, expected, rel_tol):
    """Per-step relative difference of two loss lists; one check line with the worst step."""
    if not check(len(actual) == len(expected) and len(expected) > 0,
                 f"{what}: {len(actual)} steps vs {len(expected)} expected"):
        return
    worst = max(abs(a - e) / abs(e) for a, e in zip(actual, expected))
    check(worst <= rel_tol, f"{what}: worst per-step relative loss difference {worst:.2e} (tolerance {rel_tol:.0e})")
    for step, (a, e) in enumerate(zip(actual, expected), 1):
        print(f"     step {step:2d}: {a:.9f} vs {e:.9f}")


def compare_steps(what, actual, expected, rel_tol):
    """Loss and gradient norm of every step (metrics dicts). The norm catches a wrong gradient scale, which Adam
    (invariant to it) and clipping would hide from the losses."""
    compare_losses(what + ": loss", [m["loss"] for m in actual], [m["loss"] for m in expected], rel_tol)
    if len(actual) == len(expected) and expected:
        worst = max(abs(a["grad_norm"] - e["grad_norm"]) / abs(e["grad_norm"]) for a, e in zip(actual, expected))
        check(worst <= rel_tol, f"{what}: worst per-step relative grad norm difference {worst:.2e}")


def tagged_pids(tag, needle_in_cmdline):
    want = ("DTRAIN_TEST_TAG=" + tag).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if want in env and needle_in_cmdline in cmdline:
            found.append((int(entry), env))
    return found


def kill_tagged(tag):
    for pid, _ in tagged_pids(tag, ""):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Background:
    """A run started in the background, so a test can kill one of its processes mid-training."""

    def __init__(self, argv, cwd, env=None):
        self.tag = uuid.uuid4().hex
        self.proc = subprocess.Popen(argv, cwd=cwd, env=trainer_env(self.tag, env), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)

    def trainer_pids(self, rank=None):
        """Live dtrain-trainer processes of this run (of one rank when given)."""
        pids = []
        for pid, env in tagged_pids(self.tag, "dtrain-trainer"):
            if rank is None or f"RANK={rank}".encode() in env:
                pids.append(pid)
        return pids

    def wait(self, timeout=120):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tagged(self.tag)
            self.proc.kill()
            out, err = self.proc.communicate()
            check(False, f"background run timed out after {timeout} s")
        result = Result(self.proc.returncode, out, err)
        return result


def wait_for_file(path, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.002)
    return False
