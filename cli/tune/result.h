#pragma once

// What `dtrain tune` found, as the tune directory keeps it:
//
//   <logs dir>/<name>-tune-<YYYYmmdd-HHMMSS>/
//     tune.json       this file's TuneResult (below)
//     tune.yaml       the recommended overlay for `--tune` (only when a candidate is recommended)
//     events.jsonl    one {"ts":ms,"event":"tune_trial",...} line per trial, tune_start and tune_end
//     report.html     the baseline's report page with a "Tuning" section (cli/report/tuning.h)
//     trials/<name>-t<NN>-<timestamp>/   each trial's own run directory, as `dtrain launch` writes one
//
// tune.json:
//   {"version":1, "job":"name", "command":["python3","train.py"], "started_ms":U, "ended_ms":U,
//    "budget_s":600, "warmup_steps":10, "trial_steps":30, "repeats":3, "ranks":2,
//    "unit":"tokens"|"samples"|"steps",             what rate is counted in (tokens when the job reports them)
//    "bottleneck":"data"|"communication"|"compute", "shares":{"data":f,"communication":f,"compute":f},
//    "baseline_run":"trials/<dir>",                  the first baseline trial's run directory, relative
//    "candidates":[                                  entry 0 is the baseline
//      {"name":"num_workers=1, persistent_workers","knobs":{...the overlay's Python knobs as DTRAIN_TUNE...},
//       "env":{"NAME":"value"}, "args":["--ddp-bucket-mb","4"],
//       "status":"measured"|"failed"|"loss_changed"|"timed_out"|"not_run",
//       "trials":3, "rate":123.4, "speedup":1.42, "ci":[1.30,1.55],
//       "data_wait_ms":2.1, "comm_ms":0.4, "memory_bytes":123456789,
//       "loss_check":"same"|"differs"|"n/a", "note":"why it failed, or what the loss check saw"}],
//    "recommended":1,                                index into candidates, -1 for none
//    "verdict":"one sentence", "lines":["what to put in the script"], "suggestions":["numerics, not tried"],
//    "tune_yaml":"tune.yaml"|"", "seconds":S, "trials_run":N, "ended":"why it ended early"|""}
// rate: the median over the candidate's trials of the job's units per second; speedup: its rate over the baseline's
// (1 for the baseline), ci the 95% interval (stats.h); data_wait_ms and comm_ms the median per step per rank.
