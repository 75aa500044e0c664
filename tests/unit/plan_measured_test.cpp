// `dtrain plan --from RUN_DIR` (cli/plan/measured/measured_run.h) on recorded run directories: a DDP script with one
// rank starved of data, and dtrain-trainer on 2 nodes. The measures are the run's, the bottleneck is named, and the
// remedies carry the lines a user would change, largest gain first. Where the recorded runs lack what a remedy needs
// (device memory, model states, a large model, one node), a run directory is written in a temporary directory in
// the formats the launcher writes (events.jsonl's job_start, worker_started and samples; status.json's rank rows;
// dtrain-trainer's first log line).

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/plan/measured/measured_run.h"
#include "temp_dir.h"

namespace plan_measured_test {

const std::string kRuns = DTRAIN_RUN_FIXTURES;
constexpr std::uint64_t kGB = 1000ull * 1000 * 1000;

bool any_line_has(const dtrain::plan::Remedy& remedy, const std::string& part) {
  for (const std::string& line : remedy.lines) {
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

// The remedy with a line holding `part`, or nullptr.
const dtrain::plan::Remedy* remedy_with(const dtrain::plan::RunAdvice& a, const std::string& part) {
  for (const auto& r : a.remedies) {
    if (any_line_has(r, part)) return &r;
  }
  return nullptr;
}

dtrain::plan::RunAdvice advise(const std::string& dir) {
  const auto advice = dtrain::plan::advise_from_run(dir);
  REQUIRE_MESSAGE(advice.ok(), advice.status.message());
  return advice.value;
}

// A finished job of `ranks` ranks on `nodes` nodes (rank r on node r / (ranks / nodes)), every rank with the same
// one-window step, as the launcher records it.
struct SyntheticRun {
  nlohmann::json command;                // job_start's command
  unsigned ranks = 4;
  unsigned nodes = 1;
  double data_wait_ms = 1, compute_ms = 80, comm_exposed_ms = 5, optimizer_ms = 4;
  unsigned rss_mib = 2000, device_mib = 0;   // the samples' columns
  nlohmann::json status_row = nlohmann::json::object();  // members added to every status.json rank row
  std::string log;                       // attempt_0/rank_0.log, "" = none

  void write(const std::string& dir) const {
    nlohmann::json rank = nlohmann::json::array(), ones = nlohmann::json::array();
    std::ofstream events(dir + "/events.jsonl");
    using Event = nlohmann::ordered_json;  // "ts" and "event" first, as the launcher writes them
    events << Event{{"ts", 1000}, {"event", "job_start"}, {"job", "synthetic"}, {"command", command}}.dump()
           << "\n" << R"({"ts":1001,"event":"round_start","round":0,"nodes":)" << nodes << "}\n";
    nlohmann::json rows = nlohmann::json::array();
    for (unsigned r = 0; r < ranks; ++r) {
      const unsigned node = r / (ranks / nodes);
      events << Event{{"ts", 1002}, {"event", "worker_started"}, {"round", 0}, {"rank", r}, {"node", node}}
                    .dump() << "\n";
      rank.push_back(r);
      ones.push_back(1);
      nlohmann::json row = {{"rank", r}, {"node", node}, {"state", "exited"}, {"rss_bytes", 0}};
      row.update(status_row);
      rows.push_back(row);
    }
    const auto column = [&](double v) { return nlohmann::json(std::vector<double>(ranks, v)); };
    const double step = data_wait_ms + compute_ms + comm_exposed_ms + optimizer_ms;
    events << Event{{"ts", 2000}, {"event", "samples"}, {"round", 0}, {"window_ms", 1000}, {"rank", rank},
                             {"step", ones}, {"step_ms", column(step)}, {"loss", column(2)},
                             {"tokens_per_s", column(1000)}, {"data_wait_ms", column(data_wait_ms)},
                             {"compute_ms", column(compute_ms)}, {"comm_exposed_ms", column(comm_exposed_ms)},
                             {"optimizer_ms", column(optimizer_ms)}, {"rss_mib", column(rss_mib)},
                             {"device_mib", column(device_mib)}}.dump() << "\n";
    std::ofstream(dir + "/status.json") << nlohmann::json{{"job", "synthetic"}, {"state", "succeeded"},
                                                          {"attempt", 0}, {"ranks", rows},
                                                          {"diagnoses", nlohmann::json::array()}}.dump();
    if (!log.empty()) {
      std::filesystem::create_directories(dir + "/attempt_0");
      std::ofstream(dir + "/attempt_0/rank_0.log") << log << "\n";
    }
  }
};

TEST_CASE("a data-starved straggler: the bottleneck is its data wait, the remedy the DataLoader's workers") {
  const auto a = advise(kRuns + "/ddp-data-starved");
  CHECK(a.run.ranks == 4);
  CHECK(a.run.nodes == 2);
  CHECK_FALSE(a.run.trainer);
  CHECK(a.stragglers == std::vector<unsigned>{2});
  CHECK(a.bottleneck == "data");
  CHECK(a.bottleneck_share > 0.5);
  REQUIRE_FALSE(a.remedies.empty());
  CHECK(any_line_has(a.remedies.front(), "num_workers="));
  CHECK(a.remedies.front().gain_ms == doctest::Approx(a.run.data_wait_ms));
  // The others' exposed communication is waiting for rank 2: no communication remedy.
  for (const auto& r : a.remedies) CHECK_FALSE(any_line_has(r, "no_sync"));
  const auto json = nlohmann::json::parse(dtrain::plan::render_advice_json(a));
  CHECK(json["bottleneck"] == "data");
  CHECK(json["stragglers"] == nlohmann::json::array({2}));
  CHECK(dtrain::plan::render_advice_text(a).find("straggler rank(s) 2") != std::string::npos);
}

TEST_CASE("dtrain-trainer on 2 nodes: communication, with the trainer's own flags as the lines to change") {
  const auto a = advise(kRuns + "/trainer-restart");
  CHECK(a.run.trainer);
  CHECK(a.run.precision == "fp32");
  CHECK(a.run.zero_stage == 0);
  CHECK(a.bottleneck == "communication");
  REQUIRE_FALSE(a.remedies.empty());
  CHECK(any_line_has(a.remedies.front(), "--grad-accum 4"));
  CHECK(a.remedies.front().gain_ms == doctest::Approx(a.run.comm_exposed_ms * 3 / 4));
  for (std::size_t i = 1; i < a.remedies.size(); ++i) {
    if (a.remedies[i].gain_ms > 0) CHECK(a.remedies[i - 1].gain_ms >= a.remedies[i].gain_ms);
  }
  for (const auto& r : a.remedies) CHECK_FALSE(any_line_has(r, "DataLoader"));  // Python lines are for scripts
}

TEST_CASE("measured memory: the recorded runs' resident memory, and the trainer's model states from its log") {
  const auto trainer = advise(kRuns + "/trainer-restart");
  // status.json's rss_bytes of rank 0 (26,734,592) is above the samples' 25 MiB.
  CHECK(trainer.run.memory.rss_bytes == 26734592);
  CHECK(trainer.run.memory.device_used_bytes == 0);
  CHECK(trainer.run.memory.rank_bytes() == 26734592);
  // "model L=2 C=64 NH=4 maxT=64 V=256 Vp=256 (120576 parameters), batch 2 x seq 32 x world 2 x accum 1"
  CHECK(trainer.run.model.params == 120576);
  CHECK(trainer.run.model.layers == 2);
  CHECK(trainer.run.model.hidden == 64);
  CHECK(trainer.run.model.batch == 2);
  CHECK(trainer.run.model.seq_len == 32);
  CHECK(trainer.run.memory.states == dtrain::plan::StatesSource::derived);
  CHECK(trainer.run.memory.params_bytes == 4 * 120576);   // fp32 DDP: README "--zero", stage 0
  CHECK(trainer.run.memory.grads_bytes == 4 * 120576);
  CHECK(trainer.run.memory.optim_bytes == 8 * 120576);
  const auto json = nlohmann::json::parse(dtrain::plan::render_advice_json(trainer));
  CHECK(json["run"]["memory"]["rss_bytes"] == 26734592);
  CHECK(json["run"]["memory"]["model_states"] == "derived");
  CHECK(json["run"]["params"] == 120576);
  // The script: the largest rank's, rank 1's 250,830,848 bytes in status.json (above every sample's 239 MiB, and
  // rank 0's 250,560,512); nothing says what its model holds.
  const auto script = advise(kRuns + "/ddp-data-starved");
  CHECK(script.run.memory.rss_bytes == 250830848);
  CHECK(script.run.memory.states == dtrain::plan::StatesSource::not_recorded);
  CHECK(dtrain::plan::render_advice_text(script).find("model states: not recorded") != std::string::npos);
}

TEST_CASE("measured memory: device memory and reported model states, the largest rank's") {
  TempDir dir("plan-measured-memory");
  SyntheticRun run;
  run.command = {"python3", "train.py"};
  run.device_mib = 30000;
  run.status_row = {{"device_mem_used_bytes", 32 * kGB}, {"device_mem_peak_bytes", 40 * kGB},
                    {"device_mem_total_bytes", 80 * kGB}, {"mem_params_bytes", 2 * kGB},
                    {"mem_grads_bytes", 2 * kGB}, {"mem_optim_bytes", 12 * kGB}, {"mem_activations_bytes", 9 * kGB}};
  run.write(dir.path);
  const auto a = advise(dir.path);
  const auto& mem = a.run.memory;
  CHECK(mem.device_used_bytes == 32 * kGB);  // above the samples' 30,000 MiB (31.5 GB)
  CHECK(mem.device_peak_bytes == 40 * kGB);
  CHECK(mem.device_total_bytes == 80 * kGB);
  CHECK(mem.rank_bytes() == 40 * kGB);
  CHECK(mem.states == dtrain::plan::StatesSource::reported);
  CHECK(mem.states_bytes() == 16 * kGB);
  CHECK(mem.activations_bytes == 9 * kGB);
  const std::string text = dtrain::plan::render_advice_text(a);
  CHECK(text.find("device peak 40.0 GB") != std::string::npos);
  CHECK(text.find("optimizer 12.0 GB") != std::string::npos);
}

TEST_CASE("ZeRO for memory, a script: what each stage frees of the measured bytes, after the time remedies") {
  TempDir dir("plan-measured-zero-script");
  SyntheticRun run;
  run.command = {"python3", "train.py"};
  run.status_row = {{"device_mem_peak_bytes", 40 * kGB}, {"mem_params_bytes", 2 * kGB},
                    {"mem_grads_bytes", 2 * kGB}, {"mem_optim_bytes", 12 * kGB}};
  run.write(dir.path);
  const auto a = advise(dir.path);
  CHECK(a.bottleneck == "compute");
  const auto* stage1 = remedy_with(a, "ZeroRedundancyOptimizer(model.parameters()");
  const auto* stage2 = remedy_with(a, "ShardingStrategy.SHARD_GRAD_OP");
  const auto* stage3 = remedy_with(a, "ShardingStrategy.FULL_SHARD");
  REQUIRE(stage1 != nullptr);
  REQUIRE(stage2 != nullptr);
  REQUIRE(stage3 != nullptr);
  // (N - 1)/N over 4 ranks of the optimizer state; also the gradients; also the parameters.
  CHECK(stage1->frees_bytes == 9 * kGB);
  CHECK(stage2->frees_bytes == 10'500'000'000ull);
  CHECK(stage3->frees_bytes == 12 * kGB);
  CHECK(stage1->gain_ms == 0);
  // No activations reported: a larger micro-batch, no size invented.
  CHECK(stage3->what.find("room for a larger micro-batch") != std::string::npos);
  // Time remedies (bf16 for the compute) first, then memory, most freed first.
  REQUIRE(a.remedies.size() >= 4);
  CHECK_FALSE(a.remedies.front().is_memory());
  CHECK(&a.remedies[a.remedies.size() - 3] == stage3);
  CHECK(&a.remedies[a.remedies.size() - 2] == stage2);
  CHECK(&a.remedies.back() == stage1);
  const std::string text = dtrain::plan::render_advice_text(a);
  CHECK(text.find("frees up to 12.0 GB per rank (30% of its 40.0 GB)") != std::string::npos);
  const auto json = nlohmann::json::parse(dtrain::plan::render_advice_json(a));
  CHECK(json["remedies"].back()["kind"] == "memory");
  CHECK(json["remedies"].back()["frees_bytes"] == 9 * kGB);
}

TEST_CASE("ZeRO for memory, dtrain-trainer at --zero 1: only the stages above, and the micro-batch the room holds") {
  TempDir dir("plan-measured-zero-trainer");
  SyntheticRun run;
  run.command = {"dtrain-trainer", "--zero", "1", "--precision", "bf16", "--batch-size", "4"};
  // At stage 1 the optimizer state is already 1/4; the gradients and parameters are whole.
  run.status_row = {{"device_mem_peak_bytes", 20 * kGB}, {"mem_params_bytes", 4 * kGB},
                    {"mem_grads_bytes", 4 * kGB}, {"mem_optim_bytes", 2 * kGB}, {"mem_activations_bytes", 4 * kGB}};
  run.log = "[info] model L=2 C=64 NH=4 maxT=64 V=256 Vp=256 (120576 parameters), batch 4 x seq 64 x world 4 x "
            "accum 1 = 1024 tokens per step, 1 threads, backend cpu, comm gloo";
  run.write(dir.path);
  const auto a = advise(dir.path);
  CHECK(a.run.zero_stage == 1);
  CHECK(a.run.memory.states == dtrain::plan::StatesSource::reported);  // reported wins over the log's count
  CHECK(remedy_with(a, "--zero 1") == nullptr);
  const auto* stage2 = remedy_with(a, "--zero 2");
  const auto* stage3 = remedy_with(a, "--zero 3");
  REQUIRE(stage2 != nullptr);
  REQUIRE(stage3 != nullptr);
  CHECK(stage2->frees_bytes == 3 * kGB);
  CHECK(stage3->frees_bytes == 6 * kGB);
  // Activations 1 GB a sequence at the micro-batch of 4: 3 GB holds 3 more sequences.
  CHECK(stage2->what.find("room for about 3 more sequence(s)") != std::string::npos);
  CHECK(stage3->what.find("room for about 6 more sequence(s)") != std::string::npos);
}

TEST_CASE("ZeRO for memory: no stage when it would free under 10% of the rank's memory") {
  // The recorded trainer's model states (1.9 MB) are 7% of its 26.7 MB resident: ZeRO-3 would free 3.6%.
  const auto a = advise(kRuns + "/trainer-restart");
  for (const auto& r : a.remedies) CHECK_FALSE(r.is_memory());
  CHECK(remedy_with(a, "--zero 3") == nullptr);
}

TEST_CASE("the NIC on several nodes: dtrain topo and the job spec's keys, no gain claimed") {
  const auto a = advise(kRuns + "/trainer-restart");
  const auto* nic = remedy_with(a, "dtrain topo");
  REQUIRE(nic != nullptr);
  CHECK(any_line_has(*nic, "nccl: {auto: true}"));
  CHECK(any_line_has(*nic, "NCCL_IB_HCA"));
  CHECK(any_line_has(*nic, "nodes: {interface:"));
  CHECK(any_line_has(*nic, "NCCL_SOCKET_IFNAME"));
  CHECK(nic->gain_ms == 0);
  CHECK(nic->note.find("no gain claimed") != std::string::npos);
  // One node: no network between ranks, no NIC remedy.
  TempDir dir("plan-measured-one-node");
  SyntheticRun run;
  run.command = {"python3", "train.py"};
  run.compute_ms = 20;
  run.comm_exposed_ms = 60;
  run.write(dir.path);
  const auto one = advise(dir.path);
  CHECK(one.bottleneck == "communication");
  CHECK(remedy_with(one, "no_sync") != nullptr);
  CHECK(remedy_with(one, "dtrain topo") == nullptr);
  CHECK(remedy_with(one, "dtrain plan") == nullptr);
}

TEST_CASE("TP/PP: not for the recorded trainer's 120,576 parameters") {
  const auto a = advise(kRuns + "/trainer-restart");
  CHECK(a.bottleneck == "communication");
  CHECK(a.run.nodes == 2);
  CHECK(remedy_with(a, "dtrain plan") == nullptr);
}

TEST_CASE("TP/PP: a large dtrain-trainer model on 2 nodes gets `dtrain plan` with its own shape, world and batch") {
  TempDir dir("plan-measured-layout-trainer");
  SyntheticRun run;
  run.command = {"dtrain-trainer --layers 24 --hidden 2560 --heads 32 --precision bf16 --batch-size 2 --grad-accum 2"};
  run.ranks = 16;
  run.nodes = 2;
  run.compute_ms = 100;
  run.comm_exposed_ms = 300;
  run.log = "[info] model L=24 C=2560 NH=32 maxT=1024 V=50257 Vp=50304 (2019640320 parameters), batch 2 x seq 1024 x "
            "world 16 x accum 2 = 65536 tokens per step, 8 threads, backend cuda, comm nccl";
  run.write(dir.path);
  const auto a = advise(dir.path);
  CHECK(a.run.precision == "bf16");  // from the one shell string
  CHECK(a.run.ranks_per_node == 8);
  const auto* layout = remedy_with(a, "dtrain plan");
  REQUIRE(layout != nullptr);
  CHECK(layout->lines.front() ==
        "dtrain plan --layers 24 --hidden 2560 --heads 32 --seq-len 1024 --vocab 50257 --micro-batch 2 "
        "--global-batch 64 --gpus 16 --gpus-per-node 8 --precision bf16 --bottleneck communication");
  CHECK(layout->gain_ms == 0);
  CHECK(layout->note.find("no gain claimed") != std::string::npos);
  CHECK(layout->note.find("300.0 ms") != std::string::npos);  // the bound it does not claim
  CHECK(any_line_has(*layout, "dtrain-trainer has no TP/PP"));
}

TEST_CASE("TP/PP: a script's model size is not recorded, and the command says so") {
  TempDir dir("plan-measured-layout-script");
  SyntheticRun run;
  run.command = {"python3", "train.py"};
  run.nodes = 2;
  run.compute_ms = 20;
  run.comm_exposed_ms = 60;
  run.write(dir.path);
  const auto a = advise(dir.path);
  const auto* layout = remedy_with(a, "dtrain plan");
  REQUIRE(layout != nullptr);
  CHECK(layout->lines.front() == "dtrain plan --params <the model's parameters: not recorded> --gpus 4 "
                                 "--gpus-per-node 2 --bottleneck communication");
  CHECK(layout->what.find("does not record") != std::string::npos);
  CHECK(any_line_has(*layout, "--layers --hidden --heads --seq-len"));
  CHECK(layout->gain_ms == 0);
  // Time remedies with a gain come first; those that claim none follow them.
  CHECK(a.remedies.front().gain_ms > 0);
  CHECK(dtrain::plan::render_advice_text(a).find("no gain claimed") != std::string::npos);
}

TEST_CASE("a directory that is no run is refused, naming it") {
  const auto advice = dtrain::plan::advise_from_run(kRuns + "/no-such-run");
  REQUIRE_FALSE(advice.ok());
  CHECK(advice.status.message().find("--from " + kRuns + "/no-such-run") != std::string::npos);
}

}  // namespace plan_measured_test
