#pragma once

// The recommended layout as the frameworks people run take it, ready to paste: Megatron-LM's arguments, a
// torchtitan job config (TOML) and a DeepSpeed config (JSON). The names are those of the versions cited below; a
// unit test (plan_launch_lines_test.cpp) holds every emitted name to the lists read from those sources:
//   Megatron-LM  megatron/training/arguments.py at tag core_v0.12.0 (--tensor-model-parallel-size,
//                --pipeline-model-parallel-size, --num-layers-per-virtual-pipeline-stage, --sequence-parallel, --recompute-granularity, --recompute-method,
//                --recompute-num-layers, --micro-batch-size, --global-batch-size, --use-distributed-optimizer,
//                --bf16/--fp16, --num-layers, --hidden-size, --num-attention-heads, --group-query-attention,
//                --num-query-groups, --seq-length, --max-position-embeddings)
//   torchtitan   torchtitan/config/job_config.py at v0.2.0 ([parallelism] data_parallel_replicate_degree,
//                data_parallel_shard_degree, fsdp_reshard_after_forward, tensor_parallel_degree,
//                pipeline_parallel_degree, pipeline_parallel_schedule (1F1B, Interleaved1F1B); [activation_checkpoint]
//                mode; [training]
//                local_batch_size, global_batch_size, seq_len, mixed_precision_param)
//   DeepSpeed    deepspeed/runtime/constants.py and runtime/zero/config.py at 0.19.6 (train_batch_size,
//                train_micro_batch_size_per_gpu, gradient_accumulation_steps, zero_optimization.stage,
//                bf16.enabled, fp16.enabled)
// What a framework cannot express is said in a note beside its lines, never emitted as a guess.

#include <string>
#include <vector>

#include "cli/plan/advisor.h"
#include "cli/plan/request.h"

namespace dtrain::plan {

struct LaunchLines {
  std::vector<std::string> megatron;          // arguments for pretrain_gpt.py (empty without the shape)
  std::vector<std::string> megatron_notes;
  std::vector<std::string> torchtitan;        // TOML lines
  std::vector<std::string> torchtitan_notes;
  std::string deepspeed;                      // JSON, one line
  std::vector<std::string> deepspeed_notes;
};

LaunchLines launch_lines(const PlanRequest& request, const Evaluation& choice);

}  // namespace dtrain::plan
