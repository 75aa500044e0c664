// dtrain-model-dump: runs the C++ model on an llm.c checkpoint and a batch file and writes what the parity tests
// compare against PyTorch (tests/parity/*.py).
//
//   dtrain-model-dump --checkpoint M.bin --batches X.bin --out OUT.bin [--accum K]
//       forward + backward on batch 0 (split into K micro-batches of B/K rows, loss_scale 1/K each);
//       writes "loss" (mean over micro-batches), "logits" (K = 1 only, (B, T, Vp)), "grads" (llm.c order)
//   dtrain-model-dump ... --steps N [--lr --beta1 --beta2 --eps --weight-decay --grad-clip --warmup-steps
//                                    --lr-schedule constant|cosine]
//       N optimizer steps, step s on batch s % count; writes "losses", "norms", "lrs" (N each), "params" (final)
//
// Batch file: int32 count, B, T, then count x (B*T input ids, B*T target ids) as int32.
// Output: sections of (int32 name length, name, int64 float count, fp32 values).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/kernels/cpu/backend.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"

namespace {

using namespace dtrain::trainer;

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::unique_ptr<Gpt> load_checkpoint(const std::string& path) {
  const std::vector<char> bytes = read_file(path);
  if (bytes.size() < 256 * sizeof(std::int32_t)) throw std::runtime_error(path + ": shorter than the header");
  const auto* header = reinterpret_cast<const std::int32_t*>(bytes.data());
  if (header[0] != 20240326 || header[1] != 3)
    throw std::runtime_error(path + ": not an llm.c fp32 checkpoint (magic/version)");
  GptConfig config{header[2], header[3], header[7], header[4], header[5], header[6]};
  auto model = std::make_unique<Gpt>(config);
  const std::size_t want = (256 + model->num_params()) * sizeof(float);
  if (bytes.size() != want)
    throw std::runtime_error(path + ": " + std::to_string(bytes.size()) + " bytes, the header implies " +
                             std::to_string(want));
  model->layout().from_checkpoint_order(reinterpret_cast<const float*>(bytes.data()) + 256, model->params());
  return model;
}

class Output {
 public:
  explicit Output(const std::string& path) : out_(path, std::ios::binary) {
    if (!out_) throw std::runtime_error("cannot write " + path);
  }
  void section(const std::string& name, const float* data, std::size_t count) {
    const std::int32_t len = static_cast<std::int32_t>(name.size());
    const std::int64_t n = static_cast<std::int64_t>(count);
    out_.write(reinterpret_cast<const char*>(&len), sizeof len);
    out_.write(name.data(), len);
    out_.write(reinterpret_cast<const char*>(&n), sizeof n);
    out_.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(float)));
  }

 private:
  std::ofstream out_;
};

// backward() with a check of its grads_ready contract: decreasing offsets, contiguous, covering the buffer once.
void checked_backward(Gpt& model, float loss_scale) {
  std::size_t expected_end = model.num_params();
  model.backward(loss_scale, [&](std::size_t offset, std::size_t count) {
    if (offset + count != expected_end || count == 0)
      throw std::logic_error("grads_ready(" + std::to_string(offset) + ", " + std::to_string(count) +
                             ") does not end where the previous range started (" + std::to_string(expected_end) +
                             ")");
    expected_end = offset;
  });
  if (expected_end != 0) throw std::logic_error("grads_ready did not reach offset 0");
}

int run(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key.rfind("--", 0) != 0) throw std::invalid_argument("expected --option value, got " + key);
    args[key.substr(2)] = argv[i + 1];
  }
  auto get = [&](const std::string& key, const std::string& fallback) {
    auto it = args.find(key);
    return it == args.end() ? fallback : it->second;
  };
  if (!args.count("checkpoint") || !args.count("batches") || !args.count("out"))
    throw std::invalid_argument("usage: dtrain-model-dump --checkpoint M.bin --batches X.bin --out OUT.bin ...");
  if (const char* threads = std::getenv("OMP_NUM_THREADS")) kernels::set_cpu_threads(std::atoi(threads));

  std::unique_ptr<Gpt> model = load_checkpoint(args["checkpoint"]);
  const std::vector<char> batch_bytes = read_file(args["batches"]);
  const auto* ints = reinterpret_cast<const std::int32_t*>(batch_bytes.data());
  const int count = ints[0], B = ints[1], T = ints[2];
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  if (batch_bytes.size() != (3 + count * 2 * BT) * sizeof(std::int32_t))
    throw std::runtime_error(args["batches"] + ": size does not match its header");
  auto inputs = [&](int i) { return ints + 3 + static_cast<std::size_t>(i) * 2 * BT; };
  auto targets = [&](int i) { return inputs(i) + BT; };

  Output out(args["out"]);
  std::vector<float> ordered(model->num_params());
  const int steps = std::stoi(get("steps", "0"));
  if (steps == 0) {
    const int K = std::stoi(get("accum", "1"));
    if (K <= 0 || B % K != 0) throw std::invalid_argument("--accum must divide the batch size");
    const int rows = B / K;
    const std::size_t micro = static_cast<std::size_t>(rows) * T;
    model->zero_grad();
    float loss = 0.0f;
    for (int k = 0; k < K; ++k) {
      loss += model->forward(inputs(0) + k * micro, targets(0) + k * micro, rows, T) / static_cast<float>(K);
      checked_backward(*model, 1.0f / static_cast<float>(K));
    }
    out.section("loss", &loss, 1);
    if (K == 1) {
      out.section("logits", model->logits(), BT * model->config().padded_vocab_size);
    }
    model->layout().to_checkpoint_order(model->grads(), ordered.data());
    out.section("grads", ordered.data(), ordered.size());
    return 0;
  }

  AdamWOptions options;
  options.lr = std::stof(get("lr", "1e-3"));
  options.beta1 = std::stof(get("beta1", "0.9"));
  options.beta2 = std::stof(get("beta2", "0.95"));
  options.eps = std::stof(get("eps", "1e-8"));
  options.weight_decay = std::stof(get("weight-decay", "0.1"));
  const float clip = std::stof(get("grad-clip", "1.0"));
  LrSchedule schedule;
  schedule.kind = LrSchedule::parse_kind(get("lr-schedule", "constant"));
  schedule.lr = options.lr;
  schedule.warmup_steps = std::stol(get("warmup-steps", "0"));
  schedule.total_steps = steps;
  AdamW adamw(model->backend(), model->num_params(), model->layout().decay_ranges(), options);
  std::vector<float> losses, norms, lrs;
  for (int s = 0; s < steps; ++s) {
    model->zero_grad();
    losses.push_back(model->forward(inputs(s % count), targets(s % count), B, T));
    checked_backward(*model, 1.0f);
    norms.push_back(clip_grad_norm(model->backend(), model->grads(), model->num_params(), clip));
    lrs.push_back(schedule.at(s));
    adamw.step(model->params(), model->grads(), lrs.back(), s + 1);
  }
  out.section("losses", losses.data(), losses.size());
  out.section("norms", norms.data(), norms.size());
  out.section("lrs", lrs.data(), lrs.size());
  model->layout().to_checkpoint_order(model->params(), ordered.data());
  out.section("params", ordered.data(), ordered.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "dtrain-model-dump: " << e.what() << "\n";
    return 1;
  }
}
