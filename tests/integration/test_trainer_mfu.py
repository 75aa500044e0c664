"""dtrain-trainer reports its model for the launcher's model FLOP/s and MFU: in status.json, each rank's
model_params is the parameter count rank 0's log states ("model L=2 C=64 ... (N parameters)") and model_flops_per_token
the trainer's exact count, PaLM's 6N + 12*L*C*T (tiny: L=2, C=64; --seq-len 32), so flops_basis is "exact"; its
model_flops_per_s is that times its tokens/s, and on CPU (device "cpu") with no GEMM rate cached by `dtrain doctor`
(XDG_STATE_HOME is an empty directory of this test's) its MFU is null; test_trainer_mfu_cpu.py has the cached case."""

import os
import re
import shutil
import tempfile

from harness import check, finish, tiny_trainer_job

LAYERS, CHANNELS, SEQ_LEN = 2, 64, 32   # --model tiny

state = tempfile.mkdtemp(prefix="dtrain-it-state-")
run, job, status = tiny_trainer_job("mfu", "--batch-size 2 --seq-len %d --threads 1 --steps 8" % SEQ_LEN,
                                    env={"XDG_STATE_HOME": state})
ranks = status.get("ranks", [])
check(len(ranks) == 2, "status.json has both ranks: %s" % ranks)
# Rank 0 logs the model (the other ranks train the same one).
with open(os.path.join(job, "attempt_0", "rank_0.log")) as f:
    stated = re.search(r"model L=\S+ C=\S+ .*?\((\d+) parameters\)", f.read())
check(stated is not None, "rank 0's log states the parameter count")
params = int(stated.group(1)) if stated else -1
for row in ranks:
    exact = 6 * params + 12 * LAYERS * CHANNELS * SEQ_LEN
    check(row.get("model_params") == params, "rank %d: model_params %s is the log's %d" % (
        row["rank"], row.get("model_params"), params))
    check(row.get("model_flops_per_token") == exact, "rank %d: model_flops_per_token %s is 6N + 12*L*C*T = %d" % (
        row["rank"], row.get("model_flops_per_token"), exact))
    check(row.get("flops_basis") == "exact" and row.get("device_name") == "cpu", "rank %d: exact, on cpu: %s %s" % (
        row["rank"], row.get("flops_basis"), row.get("device_name")))
    flops, tokens = row.get("model_flops_per_s"), row.get("tokens_per_s") or 0
    check(flops is not None and abs(flops - exact * tokens) <= 1e-9 * exact * tokens,
          "rank %d: model_flops_per_s %s is model_flops_per_token x tokens_per_s (%s)" % (row["rank"], flops, tokens))
    check(row.get("mfu") is None, "rank %d: no MFU without a peak for cpu: %s" % (row["rank"], row.get("mfu")))
check(status.get("flops_basis") == "exact" and status.get("model_flops_per_s") is not None,
      "the job's model FLOP/s are known and exact: %s %s" % (
          status.get("model_flops_per_s"), status.get("flops_basis")))
shutil.rmtree(state, ignore_errors=True)
finish()
