#pragma once

// The training loop of dtrain-trainer. One optimizer step, on every rank:
//   zero_grad
//   for micro-step m in 0 .. K-1:                    (K = --grad-accum)
//     batch = prefetcher.next()                      (trainer/data/loader.h: which tokens)
//     loss_m = forward(batch)                        (mean over this rank's B*T positions)
//     ddp.begin_backward(sync = m == K-1)            (world > 1; no allreduce before the last micro-step)
//     backward(loss_scale = 1/K, ddp.grads_ready)    (buckets' allreduce overlaps the rest of backward)
//     ddp.finish_backward()                          (grads: mean over ranks and micro-steps)
//   loss = allreduce(mean_m loss_m) / world          (mean over the global batch, for metrics and the console)
//   grad_norm = clip_grad_norm(grads, --grad-clip)   (identical on every rank: the grads are)
//   AdamW step with lr = schedule(step)
//   metrics line, console line (rank 0), health report (every rank), checkpoint every --save-every steps
//
// The loss and the norm stay in the backend's memory (report/step_window.h): on a GPU a step queues its work and reads
// nothing back, its collectives are ordered on the device rather than waited for, and the host reads a window of
// steps once every --log-every steps (or 10 s, or before a checkpoint), then reports each. On the CPU the window is
// one step. The exception is fp16, whose overflow flag is read every step (AdamW steps or not: the host decides),
// as torch.cuda.amp.GradScaler does. DTRAIN_SYNC_DEBUG=warn|error reports any other host wait inside a step
// (trainer/common/host_wait.h). Batches come from the prefetcher in page-locked memory and are copied
// asynchronously (data/token_pool.h).
//
// Start: parameters come from a checkpoint (resume), --init-from, or init_weights(--seed), and are then broadcast
// from rank 0, so every rank starts from rank 0's weights. Resume: rank 0 picks the newest complete checkpoint pair
// in --checkpoint-dir (trainer/ckpt/checkpoint_dir.h), loads it and broadcasts weights, AdamW moments and the step,
// so only rank 0 needs the files. A worker restarted by the launcher (TORCHELASTIC_RESTART_COUNT > 0) resumes
// without --resume when the directory holds a checkpoint. The resumed run repeats the uninterrupted run's losses
// exactly when the global batch (B*T*world*K) and CPU thread count are unchanged; a different global batch is
// refused (the data position would not mean the same thing).
// Checkpoints: rank 0 writes model_<s>.bin then state_<s>.bin, each atomically; the other ranks wait on a
// one-float allreduce that also tells them whether rank 0 succeeded.
// In loop.cpp each phase is one function of Training: setup (the constructor), the start, fresh or resumed
// (choose_start), one step (train_step, then report: metrics, console, health) and the checkpoint (save).

#include "trainer/train/options.h"

namespace dtrain::trainer {

// Trains as the options say; returns the process exit code (0 success, 2 bad options, 1 any other failure,
// after printing what failed and writing TORCHELASTIC_ERROR_FILE when it is set).
int run_training(const TrainOptions& options);

}  // namespace dtrain::trainer
