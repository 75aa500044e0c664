// dtrain-model-bench: times training steps of the C++ model (forward, backward, clip, AdamW) on random tokens and
// prints one JSON line, the counterpart of `gpt_reference.py bench` for PyTorch eager.
//
//   dtrain-model-bench [--threads 1] [--layers 4 --channels 256 --heads 4 --max-seq-len 256 --vocab 256]
//                      [-B 8 -T 256] [--warmup 2 --steps 5]

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "trainer/kernels/cpu/backend.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"

int main(int argc, char** argv) {
  using namespace dtrain::trainer;
  std::map<std::string, int> args{{"threads", 1}, {"layers", 4},  {"channels", 256}, {"heads", 4},
                                  {"max-seq-len", 256}, {"vocab", 256}, {"B", 8}, {"T", 256},
                                  {"warmup", 2}, {"steps", 5}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    key = key.substr(key.find_first_not_of('-'));
    if (!args.count(key)) {
      std::cerr << "dtrain-model-bench: unknown option " << argv[i] << "\n";
      return 2;
    }
    args[key] = std::stoi(argv[i + 1]);
  }
  kernels::set_cpu_threads(args["threads"]);
  GptConfig config{args["max-seq-len"], args["vocab"], GptConfig::pad_vocab(args["vocab"]), args["layers"],
                   args["heads"], args["channels"]};
  Gpt model(config);
  model.init_weights(0);
  AdamW adamw(model.backend(), model.num_params(), model.layout().decay_ranges(), AdamWOptions{});
  const int B = args["B"], T = args["T"];
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B) * T + 1);
  std::mt19937 rng(1);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(config.vocab_size));
  long t = 0;
  auto step = [&] {
    model.zero_grad();
    model.forward(tokens.data(), tokens.data() + 1, B, T);
    model.backward(1.0f, {});
    clip_grad_norm(model.backend(), model.grads(), model.num_params(), 1.0f);
    adamw.step(model.params(), model.grads(), 6e-4f, ++t);
  };
  for (int i = 0; i < args["warmup"]; ++i) step();
  // Wall time per step, and the process's CPU time per step (all threads), which a busy machine distorts less.
  auto cpu_ms = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  };
  std::vector<double> ms, cpu;
  for (int i = 0; i < args["steps"]; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_ms();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    cpu.push_back(cpu_ms() - cpu_start);
  }
  std::sort(cpu.begin(), cpu.end());
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::printf("{\"impl\": \"dtrain-cpp\", \"threads\": %d, \"B\": %d, \"T\": %d, \"step_ms_median\": %.3f, "
              "\"tokens_per_s\": %.1f, \"cpu_ms_median\": %.3f, \"step_ms\": [",
              args["threads"], B, T, median, B * T / (median / 1000.0), cpu[cpu.size() / 2]);
  for (std::size_t i = 0; i < ms.size(); ++i) std::printf("%s%.3f", i ? ", " : "", ms[i]);
  std::printf("]}\n");
  return 0;
}
