#include "trainer/train/trial.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <system_error>

#include <spdlog/spdlog.h>

#include "trainer/common/env.h"
#include "trainer/kernels/cpu/backend.h"
#include "trainer/parallel/ddp/buckets.h"

namespace dtrain::trainer {
namespace {

// The largest W, N or K (a trial of a billion steps is a mistake; the sums stay far from overflowing).
constexpr long kTrialMaxSteps = 1'000'000'000;

// The one shape DTRAIN_TUNE_TRIAL's value has: a JSON object whose members are whole numbers. Throws
// std::invalid_argument saying what is wrong (parse_trial_plan adds the variable and its value).
class TrialValueReader {
 public:
  explicit TrialValueReader(std::string_view text) : text_(text) {}

  std::map<std::string, long> members() {
    std::map<std::string, long> members;
    expect('{', "at the start");
    bool more = !next_is('}');
    while (more) {
      const std::string name = member_name();
      expect(':', "after \"" + name + "\"");
      const long value = whole_number(name);
      if (!members.emplace(name, value).second) fail("\"" + name + "\" appears twice");
      more = next_is(',');
      if (more) ++at_;
    }
    expect('}', "at the end of the object");
    space();
    if (at_ != text_.size()) fail("there is text after the object");
    return members;
  }

 private:
  [[noreturn]] static void fail(const std::string& what) { throw std::invalid_argument(what); }

  void space() {
    while (at_ < text_.size() && std::string_view(" \t\n\r").find(text_[at_]) != std::string_view::npos) ++at_;
  }
  bool next_is(char c) {
    space();
    return at_ < text_.size() && text_[at_] == c;
  }
  void expect(char c, const std::string& where) {
    if (!next_is(c)) fail(std::string("expected '") + c + "' " + where);
    ++at_;
  }
  std::string member_name() {
    expect('"', "before a member's name");
    const std::size_t end = text_.find('"', at_);
    if (end == std::string_view::npos) fail("a member's name has no closing '\"'");
    std::string name(text_.substr(at_, end - at_));
    at_ = end + 1;
    if (name != "warmup" && name != "steps" && name != "losses") fail("\"" + name + "\" is not one of its members");
    return name;
  }
  long whole_number(const std::string& name) {
    space();
    long value = 0;
    const char* begin = text_.data() + at_;
    const auto [end, error] = std::from_chars(begin, text_.data() + text_.size(), value);
    const bool fraction = end < text_.data() + text_.size() && (*end == '.' || *end == 'e' || *end == 'E');
    if (error != std::errc() || fraction || value > kTrialMaxSteps || value < -kTrialMaxSteps) {
      fail("\"" + name + "\" is not a whole number of steps (up to " + std::to_string(kTrialMaxSteps) + ")");
    }
    at_ = static_cast<std::size_t>(end - text_.data());
    return value;
  }

  std::string_view text_;
  std::size_t at_ = 0;
};

// W >= 0, N >= 1, 0 <= K <= W + N; what is wrong, or "".
std::string trial_plan_problem(const TrialPlan& plan) {
  if (plan.warmup < 0) return "\"warmup\" is below 0";
  if (plan.steps < 1) return "\"steps\" is below 1";
  if (plan.losses < 0 || plan.losses > plan.total()) {
    return "\"losses\" is not from 0 to warmup + steps (" + std::to_string(plan.total()) + ")";
  }
  return "";
}

void append_trial_key(std::string& out, const char* key) {
  if (out.back() != '{') out += ',';
  out += '"';
  out += key;
  out += "\":";
}

void append_trial_number(std::string& out, double value) {
  char number[40];
  std::snprintf(number, sizeof(number), "%.9g", value);
  out += std::isfinite(value) ? number : "null";
}

void append_trial_numbers(std::string& out, const char* key, const std::vector<double>& values) {
  append_trial_key(out, key);
  out += '[';
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    append_trial_number(out, values[i]);
  }
  out += ']';
}

// A JSON string of `text` (the backend's name: plain, but escaped all the same).
std::string trial_json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void append_trial_trainer(std::string& out, const TrialReport& r) {
  append_trial_key(out, "trainer");
  if (!r.described) {
    out += "null";
    return;
  }
  out += "{\"ddp_bucket_mb\":";
  append_trial_number(out, r.ddp_bucket_mb);
  out += ",\"backend\":" + trial_json_string(r.backend) + "}";
}

// The CPUs this process may run on; the online CPUs when the affinity cannot be read.
int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

}  // namespace

TrialPlan parse_trial_plan(std::string_view value) {
  const std::string what = std::string(kTrialEnv) + "='" + std::string(value) + "' is not a trial: ";
  const std::string hint = "; dtrain tune sets it to {\"warmup\":W,\"steps\":N,\"losses\":K} (whole numbers, W >= 0, "
                           "N >= 1, 0 <= K <= W + N)";
  std::map<std::string, long> members;
  try {
    members = TrialValueReader(value).members();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(what + e.what() + hint);
  }
  for (const char* name : {"warmup", "steps", "losses"}) {
    if (members.count(name) == 0) throw std::invalid_argument(what + "\"" + name + "\" is missing" + hint);
  }
  const TrialPlan plan{members["warmup"], members["steps"], members["losses"]};
  const std::string problem = trial_plan_problem(plan);
  if (!problem.empty()) throw std::invalid_argument(what + problem + hint);
  return plan;
}

std::optional<TrialPlan> trial_plan_from_env() {
  const char* raw = std::getenv(kTrialEnv);
  if (raw == nullptr) return std::nullopt;
  return parse_trial_plan(raw);
}

std::string trial_line(const TrialReport& r) {
  std::string out = "{";
  append_trial_key(out, "rank");
  out += std::to_string(r.rank);
  append_trial_key(out, "steps");
  out += std::to_string(r.steps);
  append_trial_key(out, "complete");
  out += r.complete ? "true" : "false";
  out += ",\"device\":\"" + r.device + "\"";
  append_trial_numbers(out, "step_s", r.step_s);
  append_trial_key(out, "data_wait_s");
  append_trial_number(out, r.data_wait_s);
  append_trial_key(out, "comm_s");
  append_trial_number(out, r.comm_s);
  out += ",\"samples\":" + std::to_string(r.samples) + ",\"tokens\":" + std::to_string(r.tokens);
  append_trial_numbers(out, "losses", r.losses);
  out += ",\"rss_bytes\":" + std::to_string(r.rss_bytes) + ",\"device_peak_bytes\":0";
  out += ",\"cpus\":" + std::to_string(r.cpus) + ",\"threads\":" + std::to_string(r.threads);
  out += ",\"loader\":null,\"ddp\":null";
  append_trial_trainer(out, r);
  return std::string(kTrialPrefix) + out + "}";
}

TrialRun::TrialRun(const TrainOptions& options) : plan_(trial_plan_from_env()), options_(options) {
  if (!plan_) return;
  const Result<int> rank = env_int("RANK", 0, "");
  report_.rank = rank.ok() ? rank.value : 0;
  if (report_.rank == 0 && (options.save_every > 0 || options.resume)) {
    std::string ignored = options.save_every > 0 ? "--save-every " + std::to_string(options.save_every) : "";
    if (options.resume) ignored += ignored.empty() ? "--resume" : " and --resume";
    spdlog::warn("{}: a trial of dtrain tune runs {} steps from a fresh start and writes no checkpoints; ignoring {}",
                 kTrialEnv, plan_->total(), ignored);
  }
  options_.steps = plan_->total();
  options_.save_every = 0;
  options_.resume = false;
}

void TrialRun::record(const StepMetrics& m, const StepTimes& times, const Communicator& comm,
                      const TrainState& shape, bool windowed) {
  if (!plan_) return;
  const Clock::time_point now = Clock::now();
  // The process's first step has no step before it: train_step's own span, from zero_grad and the first batch.
  const double took_s = report_.steps == 0 || windowed ? m.step_ms / 1000
                                                       : std::chrono::duration<double>(now - last_end_).count();
  last_end_ = now;
  if (!report_.described) describe(comm, shape);
  const long step = ++report_.steps;
  if (step <= plan_->losses) report_.losses.push_back(m.loss);
  if (step <= plan_->warmup || step > plan_->total()) return;
  report_.step_s.push_back(took_s);
  report_.data_wait_s += times.data_wait_ms / 1000;
  report_.comm_s += m.comm_exposed_ms.value_or(0) / 1000;
  const std::uint64_t samples = static_cast<std::uint64_t>(shape.batch_size) * shape.grad_accum;
  report_.samples += samples;
  report_.tokens += samples * static_cast<std::uint64_t>(shape.seq_len);
}

void TrialRun::describe(const Communicator& comm, const TrainState& shape) {
  report_.rank = comm.rank();
  report_.backend = comm.backend();
  // As start_ddp (setup.cpp) sizes DDP's buckets; no DDP on one rank or with --zero.
  if (comm.size() > 1 && options_.zero == 0) {
    constexpr double kMiB = 1 << 20;
    const std::uint64_t bytes = options_.ddp_bucket_mb
                                    ? static_cast<std::uint64_t>(*options_.ddp_bucket_mb * kMiB)
                                    : default_bucket_bytes(shape.num_params * sizeof(float));
    report_.ddp_bucket_mb = static_cast<double>(bytes) / kMiB;
  }
  report_.described = true;
}

int TrialRun::end(int code) {
  if (!plan_) return code;
  report_.complete = code == 0 && report_.steps >= plan_->total();
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) report_.rss_bytes = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
  report_.cpus = affinity_cpus();
  report_.threads = kernels::cpu_threads();
  const std::string line = trial_line(report_) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  plan_.reset();
  return code;
}

}  // namespace dtrain::trainer
