// dtrain-trainer: GPT-2 training on CPU, one process or one rank of a data-parallel job (see train/loop.h), and
// `prepare-text` to turn a text file into a token shard (see data/shard.h), and `gemm-rate` to measure its kernels'
// fp32 GEMM rate (see kernels/cpu/gemm_rate.h).

#include <cstdio>

#include <spdlog/spdlog.h>

#include "trainer/data/shard.h"
#include "trainer/kernels/cpu/gemm_rate.h"
#include "trainer/train/report/console.h"
#include "trainer/train/loop.h"
#include "trainer/train/options.h"

int main(int argc, char** argv) {
  using namespace dtrain::trainer;
  setup_console();
  Command command = parse_command_line(argc, argv);
  if (command.exit_code >= 0) return command.exit_code;
  if (command.prepare_text) {
    try {
      std::size_t tokens = prepare_text(command.prepare_text->input, command.prepare_text->output);
      spdlog::info("wrote {} tokens (bytes of {}, vocabulary 256) to {}", tokens, command.prepare_text->input,
                   command.prepare_text->output);
      return 0;
    } catch (const DataError& e) {
      spdlog::error("{}", e.what());
      return 1;
    }
  }
  if (command.gemm_rate) {
    const kernels::GemmRate rate = kernels::measure_gemm_rate(command.gemm_rate->threads, command.gemm_rate->size);
    std::printf("{\"flops_per_s\": %.6g, \"threads\": %d, \"size\": %d, \"repeats\": %d}\n", rate.flops_per_s,
                rate.threads, rate.size, rate.repeats);
    return 0;
  }
  return run_training(command.train);
}
