"""--zero 1, 2, 3 (fp32) under the real launcher on 2 and 4 ranks against --zero 0 (DDP) at the same world size and
against the single-process PyTorch reference, over 10 AdamW steps with warmup, a cosine schedule, clipping and
weight decay, all from one llm.c checkpoint the reference wrote:
  - per-step losses within 1e-5 relative of --zero 0 (grad norms too) and of PyTorch;
  - parameters after 10 steps (the consolidated model file rank 0 writes) equal DDP's within 1e-6 relative, as the
    2-norm of the difference over the 2-norm of DDP's parameters (on 2 ranks they are bit for bit equal; on 4, Gloo's
    reduce-scatter adds the four ranks' gradients in another order than its allreduce, and AdamW turns those last-bit
    differences of near-zero gradients into differences of up to about lr * 1e-3 in single elements);
  - gradient accumulation: K=2 micro-steps of B/2 equal K=1 of B under every stage;
  - the memory metrics equal the README formulas exactly (P = padded parameter count), stage 3 reports its gathered
    peak, and comm_bytes follows the ring accounting.
  - the shared-memory communicator (DTRAIN_COMM_BACKEND=shm, the buffers in its segment) gives the Gloo runs'
    losses, gradient norms and parameters exactly, for --zero 0 (DDP) and 1, 2, 3 on 2 ranks (2 ranks add in the same
    order on both); Gloo is named explicitly for the others;
  - a running shm worker's segment mapping (/proc/<pid>/smaps under /dev/shm) holds at least its parameter and
    gradient buffers resident: they live in the segment, where without communicator-allocated buffers only the
    staging slots (4 MiB on 2 ranks) would be;
  - with /dev/shm too small for those buffers (a 16 MiB tmpfs in a mount namespace, as a container's default 64 MiB
    is for bigger models) the job still trains, to the Gloo run's losses, and rank 0 says once on stderr that the
    buffers are in ordinary memory and how to give /dev/shm room.
The model has 129 channels (3 heads), so its layers' slices are odd and ZeRO pads them on both world sizes."""

import os
import re
import shutil
import time

import trainer_harness as h

h.require_binaries(h.TRAINER, h.DTRAIN)
MODEL = ["--layers", "2", "--channels", "129", "--heads", "3", "--max-seq-len", "64", "--vocab", "256"]
L, C, VP, MAXT = 2, 129, 256, 64
work = h.workdir()
shard = h.make_text_shard(work)
init = h.reference_init(work, MODEL)
GLOBAL_B = 8
schedule = ["--init-from", init, "--data", shard] + h.TEN_STEPS + ["--threads", "1"]
common = schedule + ["--save-every", "10"]


def padded_params(world):
    units = [(VP + MAXT) * C] + [12 * C * C + 13 * C] * L + [2 * C]
    return sum(-(-u // world) * world for u in units)


def params_of(path):
    import array
    values = array.array("f")
    with open(path, "rb") as f:
        f.seek(256 * 4)
        values.frombytes(f.read())
    return values


def train(world, zero, accum=1, backend="gloo"):
    name = f"n{world}_z{zero}_k{accum}_{backend}"
    path = os.path.join(work, name + ".jsonl")
    ck = os.path.join(work, "ck_" + name)
    batch = GLOBAL_B // world // accum
    run = h.launched(world, MODEL + common + ["--zero", str(zero), "--batch-size", str(batch), "--grad-accum",
                                             str(accum), "--metrics", path, "--checkpoint-dir", ck], work,
                     env={"DTRAIN_COMM_BACKEND": backend})
    if not h.check(run.code == 0, f"{name}: `dtrain run -n {world} ... --zero {zero}` exits 0"):
        return None, None
    h.check(f"comm {backend}" in run.out + run.err, f"{name}: the ranks talk over {backend}")
    return h.metrics(path), params_of(os.path.join(ck, "model_10.bin"))


def check_shm_equals_gloo(zero, gloo_steps, gloo_params):
    steps, params = train(2, zero, backend="shm")
    if steps is None or gloo_steps is None:
        return
    label = f"-n 2 --zero {zero}, shm vs gloo"
    h.compare_steps(label, steps, gloo_steps, 0.0)
    h.check(params == gloo_params, f"{label}: parameters after 10 steps bit for bit equal")


def segment_rss_bytes(pid):
    """Resident bytes of the shm communicator's segments that process `pid` maps (/proc/<pid>/smaps)."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                inside = "/dev/shm/dtrain@" in line
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


WIDE = ["--layers", "2", "--channels", "512", "--heads", "4", "--max-seq-len", "64", "--vocab", "256"]


def wide_ddp(name, extra=(), backend="shm"):
    """DDP on 2 ranks of the wide model (2 x 26 MB of parameters and gradients): the launcher's argv and metrics."""
    path = os.path.join(work, name + ".jsonl")
    return [h.DTRAIN, "run", "-n", "2", "--grace-s", "2", "--logs-dir", os.path.join(work, "runs"), "--",
            h.TRAINER] + WIDE + ["--data", shard, "--seq-len", "16", "--batch-size", "1", "--threads", "1",
                                 "--metrics", path] + list(extra), path


def check_small_shm_falls_back():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("skip /dev/shm fallback: needs root and unshare for a private /dev/shm", flush=True)
        return
    argv, path = wide_ddp("small_shm", ["--steps", "3"])
    # A private mount namespace whose /dev/shm is a 16 MiB tmpfs: room for the segment's staging slots, not for the
    # model's buffers.
    small = h.run(["unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec "$@"', "sh"]
                  + argv, work, env={"DTRAIN_COMM_BACKEND": "shm"})
    if not h.check(small.code == 0, "a 16 MiB /dev/shm: the shm job still trains and exits 0"):
        return
    said = (small.out + small.err).count("is in ordinary memory, not in the shm communicator's shared memory")
    h.check(said == 1, f"the fallback is said once (said {said} times)")
    h.check("--shm-size" in small.err, "on stderr, with the fix")
    gloo_argv, gloo_path = wide_ddp("small_shm_gloo", ["--steps", "3"])
    gloo = h.run(gloo_argv, work, env={"DTRAIN_COMM_BACKEND": "gloo"})
    if h.check(gloo.code == 0, "the same job over gloo exits 0"):
        h.compare_steps("a 16 MiB /dev/shm vs gloo", h.metrics(path), h.metrics(gloo_path), 0.0)


def check_buffers_in_segment():
    """DDP on shm with a model of 2 x 26 MB of parameters and gradients, stalled before step 3 (--debug-stall-step):
    each worker's segment mapping must hold both buffers resident."""
    argv, path = wide_ddp("segment", ["--steps", "5", "--debug-stall-step", "3"])
    bg = h.Background(argv, work, env={"DTRAIN_COMM_BACKEND": "shm"})
    deadline = time.monotonic() + 120  # start-up and two steps of a 6.5M-parameter model on one core each
    while time.monotonic() < deadline and not (os.path.exists(path) and len(open(path).readlines()) >= 2):
        time.sleep(0.2)
    try:
        if not h.check(os.path.exists(path) and len(h.metrics(path)) >= 2, "the shm run made two steps"):
            return
        c = 512
        buffer_bytes = 4 * ((VP + MAXT) * c + L * (12 * c * c + 13 * c) + 2 * c)  # fp32, no padding under DDP
        pids = bg.trainer_pids(0) + bg.trainer_pids(1)  # the workers, not the launcher whose argv names the trainer
        h.check(len(pids) == 2, f"two workers: {pids}")
        for pid in pids:
            rss = segment_rss_bytes(pid)
            h.check(rss >= 2 * buffer_bytes, f"worker {pid}: {rss} bytes of its shm segment resident, at least its "
                                             f"parameters and gradients ({2 * buffer_bytes}) expected")
    finally:
        h.kill_tagged(bg.tag)
        bg.wait()


def check_memory(label, steps, world, zero):
    P = padded_params(world)
    full, shard = 4 * P, 4 * P // world
    want = {1: (full, full, 2 * shard), 2: (full, shard, 2 * shard), 3: (shard, shard, 2 * shard)}[zero]
    got = [(m["mem_params_bytes"], m["mem_grads_bytes"], m["mem_optim_bytes"]) for m in steps]
    h.check(all(g == want for g in got), f"{label}: params/grads/optim bytes {got[0]} = formula {want} (P = {P})")
    peak = [m.get("mem_gathered_peak_bytes") for m in steps]
    h.check((zero == 3) == all(p is not None and p > 0 for p in peak), f"{label}: gathered peak {peak[0]}")
    ring = (world - 1) * P // world * 4  # one reduce-scatter (or all-gather) of the whole buffer
    # Stage 3 gathers the layers a second time in backward (the embeddings stay, the final LayerNorm is kept).
    layers = (world - 1) * (L * -(-(12 * C * C + 13 * C) // world)) * 4
    expected = {1: 2 * ring, 2: 2 * ring, 3: 2 * ring + layers}[zero]
    h.check(all(m["comm_bytes"] == expected for m in steps),
            f"{label}: comm_bytes {steps[0]['comm_bytes']} per step = {expected} (ring accounting)")
    h.check(all(m["mem_activations_bytes"] > 0 for m in steps), f"{label}: activation bytes reported")


def param_differences(a, b):
    """(norm of the difference / norm of DDP's parameters, largest difference / largest parameter)."""
    norm = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5 / sum(y * y for y in b) ** 0.5
    return norm, max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)


reference = os.path.join(work, "torch.jsonl")
ref = h.run([h.PYTHON, h.REFERENCE, "train", "--init-from", init, "-B", str(GLOBAL_B), "--threads", "1",
             "--metrics", reference] + schedule,
            work, timeout=240)
h.check(ref.code == 0, "the PyTorch reference exits 0")
torch_losses = [m["loss"] for m in h.metrics(reference)] if ref.code == 0 else []

check_buffers_in_segment()
check_small_shm_falls_back()
for world in (2, 4):
    ddp, ddp_params = train(world, 0)
    if world == 2:
        check_shm_equals_gloo(0, ddp, ddp_params)
    for zero in (1, 2, 3):
        label = f"-n {world} --zero {zero}"
        steps, params = train(world, zero)
        if world == 2:
            check_shm_equals_gloo(zero, steps, params)
        if steps is None or ddp is None:
            continue
        h.compare_steps(f"{label} vs --zero 0", steps, ddp, 1e-5)
        if torch_losses:
            h.compare_losses(f"{label} vs PyTorch", [m["loss"] for m in steps], torch_losses, 1e-5)
        norm, largest = param_differences(params, ddp_params)
        h.check(norm <= 1e-6, f"{label}: parameters after 10 steps vs DDP's: relative difference {norm:.2e} "
                              f"(2-norm; tolerance 1e-6), largest element difference {largest:.2e} of the "
                              f"largest parameter")
        check_memory(label, steps, world, zero)
        accum, _ = train(world, zero, accum=2)
        if accum is not None:
            h.compare_steps(f"{label}: K=2 x B/2 vs K=1 x B", accum, steps, 1e-5)
h.finish()
