#include "cli/plan/measured/measured_run.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/plan/measured/measured_memory.h"
#include "cli/plan/measured/remedies.h"
#include "cli/report/model/rank_sample.h"
#include "cli/report/model/run_model.h"

namespace dtrain::plan {
namespace {

// The value of `flag` in the job's command ("--zero 2" or "--zero=2"), "" when it is not given. A command run by the
// shell (`shell: true`) is one string: its words are split at spaces.
std::string flag_value(const std::vector<std::string>& command, const std::string& flag) {
  std::vector<std::string> words;
  for (const std::string& arg : command) {
    std::istringstream split(arg);
    for (std::string word; split >> word;) words.push_back(word);
  }
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i] == flag && i + 1 < words.size()) return words[i + 1];
    if (words[i].rfind(flag + "=", 0) == 0) return words[i].substr(flag.size() + 1);
  }
  return "";
}

// The job's command and placement: dtrain-trainer's precision and ZeRO stage, the ranks and the nodes.
void describe_job(MeasuredRun& m, const report::RunModel& model) {
  m.dir = model.dir;
  m.job_id = model.job_id;
  m.trainer = std::any_of(model.command.begin(), model.command.end(), [](const std::string& word) {
    return word.find("dtrain-trainer") != std::string::npos;
  });
  if (m.trainer) {
    const std::string precision = flag_value(model.command, "--precision");
    m.precision = precision.empty() ? "fp32" : precision;
    const std::string zero = flag_value(model.command, "--zero");
    m.zero_stage = zero.size() == 1 && zero[0] >= '0' && zero[0] <= '3' ? zero[0] - '0' : 0;
  }
  m.ranks = model.ranks();
  std::map<unsigned, std::size_t> per_node;
  for (const auto& [rank, node] : model.node_of) ++per_node[node];
  m.nodes = per_node.size();
  for (const auto& [node, count] : per_node) m.ranks_per_node = std::max(m.ranks_per_node, count);
}

std::uint32_t last_round(const report::RunModel& model) {
  std::uint32_t round = 0;
  for (const auto& window : model.samples) round = std::max(round, window.round);
  return round;
}

// The samples of the job's last round, of `only` ranks when it is not empty.
MeasuredRun measure(const report::RunModel& model, const std::set<unsigned>& only = {}) {
  MeasuredRun m;
  describe_job(m, model);
  const std::uint32_t round = last_round(model);
  std::vector<double> step, data, compute, comm, optim, tokens;
  for (const auto& window : model.samples) {
    if (window.round != round) continue;
    for (const auto& s : window.ranks) {
      if (s.step_ms <= 0 || (!only.empty() && only.count(s.rank) == 0)) continue;
      step.push_back(s.step_ms);
      data.push_back(s.data_wait_ms);
      compute.push_back(s.compute_ms);
      comm.push_back(s.comm_exposed_ms);
      optim.push_back(s.optimizer_ms);
      tokens.push_back(s.tokens_per_s);
    }
  }
  m.samples = step.size();
  m.step_ms = report::median_of(step);
  m.data_wait_ms = report::median_of(data);
  m.compute_ms = report::median_of(compute);
  m.comm_exposed_ms = report::median_of(comm);
  m.optimizer_ms = report::median_of(optim);
  m.tokens_per_s = report::median_of(tokens) * static_cast<double>(m.ranks);
  return m;
}

// The bottleneck: the largest part of the step (a straggler's own communication is the others' waiting for it, not
// its bottleneck).
void name_bottleneck(RunAdvice& a) {
  const MeasuredRun& m = a.run;
  const std::pair<const char*, double> parts[] = {{"data", m.data_wait_ms},
                                                  {"communication", m.comm_exposed_ms},
                                                  {"optimizer", m.optimizer_ms},
                                                  {"compute", m.compute_ms}};
  const auto* largest = std::max_element(std::begin(parts), std::end(parts), [&](const auto& x, const auto& y) {
    const bool skip_x = !a.stragglers.empty() && std::string(x.first) == "communication";
    const bool skip_y = !a.stragglers.empty() && std::string(y.first) == "communication";
    return skip_x || (!skip_y && x.second < y.second);
  });
  a.bottleneck = largest->first;
  a.bottleneck_share = largest->second / m.step_ms;
}

// The remedies of every part worth one (at least kWorthShare of the step), and of memory, in order.
void list_remedies(RunAdvice& a) {
  const MeasuredRun& m = a.run;
  const auto add = [&](std::vector<Remedy> more) {
    for (Remedy& r : more) a.remedies.push_back(std::move(r));
  };
  const double worth = kWorthShare * m.step_ms;
  if (m.data_wait_ms >= worth) add(data_remedies(m));
  if (a.stragglers.empty() && m.comm_exposed_ms >= worth) add(comm_remedies(m));
  if (a.stragglers.empty() && a.bottleneck == "communication") add(layout_remedies(m));
  if (m.optimizer_ms >= worth) add(optimizer_remedies(m));
  if (m.compute_ms >= worth) add(compute_remedies(m));
  add(memory_remedies(m));
  order_remedies(a.remedies);
}

std::string straggler_text(const RunAdvice& a) {
  if (a.stragglers.empty()) return "";
  std::string ranks;
  for (unsigned r : a.stragglers) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return " of straggler rank(s) " + ranks + " (the launcher's diagnosis; the step above is theirs, and every other "
         "rank waits for them in the gradient reduction)";
}

const char* states_source_name(StatesSource source) {
  switch (source) {
    case StatesSource::reported: return "reported";
    case StatesSource::derived: return "derived";
    case StatesSource::not_recorded: break;
  }
  return "not_recorded";
}

// Why a run has no model-state bytes, or where they come from.
std::string states_origin(const MeasuredRun& m) {
  switch (m.memory.states) {
    case StatesSource::reported: return "as the ranks reported them";
    case StatesSource::derived:
      return "derived from the " + std::to_string(m.model.params) + " parameters of the trainer's log, fp32 at ZeRO-" +
             std::to_string(m.zero_stage) + ", by README \"--zero\"";
    case StatesSource::not_recorded: break;
  }
  if (!m.trainer) return "the ranks reported no mem_params/grads/optim_bytes (`instrument: auto` measures none)";
  if (m.model.params == 0) return "no parameter count in the trainer's log";
  return "dtrain-trainer in " + m.precision + " keeps 16-bit and widened copies; `dtrain plan --trainer-accounting` "
         "gives them";
}

std::string memory_text(const MeasuredRun& m) {
  const MeasuredMemory& mem = m.memory;
  std::string measured;
  const std::pair<const char*, std::uint64_t> parts[] = {{"resident ", mem.rss_bytes},
                                                         {"device in use ", mem.device_used_bytes},
                                                         {"device peak ", mem.device_peak_bytes},
                                                         {"device total ", mem.device_total_bytes}};
  for (const auto& [name, bytes] : parts) {
    if (bytes > 0) measured += (measured.empty() ? "" : ", ") + std::string(name) + bytes_text(bytes);
  }
  std::string out = "memory of a rank (the largest): " + (measured.empty() ? "not reported" : measured) +
                    "\nmodel states: ";
  if (mem.states == StatesSource::not_recorded) return out + "not recorded: " + states_origin(m) + "\n";
  return out + "parameters " + bytes_text(mem.params_bytes) + ", gradients " + bytes_text(mem.grads_bytes) +
         ", optimizer " + bytes_text(mem.optim_bytes) +
         (mem.activations_bytes > 0 ? ", activations " + bytes_text(mem.activations_bytes) : "") + ", " +
         states_origin(m) + "\n";
}

std::string gain_text(const Remedy& r, const MeasuredRun& m) {
  char text[96];
  if (r.is_memory()) {
    const std::uint64_t rank = m.memory.rank_bytes();
    const std::string share = rank > 0 ? std::to_string(static_cast<int>(100.0 * r.frees_bytes / rank + 0.5)) +
                                             "% of its " + bytes_text(rank)
                                       : "its whole memory not reported";
    return "frees up to " + bytes_text(r.frees_bytes) + " per rank (" + share + ")";
  }
  if (r.gain_ms > 0) {
    std::snprintf(text, sizeof text, "up to %.1f ms a step (%.0f%%)", r.gain_ms, 100 * r.gain_ms / m.step_ms);
    return text;
  }
  return r.note.empty() ? "gain not measured" : r.note;
}

}  // namespace

Result<RunAdvice> advise_from_run(const std::string& dir) {
  auto model = report::read_run(dir);
  if (!model.ok()) return {{model.status.code(), "--from " + dir + ": " + model.status.message()}};
  RunAdvice a;
  a.run = measure(model.value);
  // A straggler (the launcher's diagnosis, in status.json) makes every other rank wait in the gradient reduction:
  // their exposed communication is its slowness. The bottleneck and the remedies are then the straggler's own.
  const std::vector<unsigned> stragglers = model.value.stragglers();
  if (!stragglers.empty()) {
    const std::set<unsigned> slow(stragglers.begin(), stragglers.end());
    MeasuredRun own = measure(model.value, slow);
    if (own.samples > 0) {
      own.tokens_per_s = a.run.tokens_per_s;
      a.stragglers = stragglers;
      a.run = own;
    }
  }
  MeasuredRun& m = a.run;
  if (m.samples == 0 || m.step_ms <= 0) {
    return {{StatusCode::not_found, "--from " + dir + ": the job reported no step times (its workers sent no health "
                                    "reports with step_ms: dtrain-trainer, dtrain_health, or instrument: auto)"}};
  }
  // Memory is every rank's, stragglers or not: the rank that runs out first decides.
  const std::uint32_t round = last_round(model.value);
  m.memory = read_memory(model.value, round);
  if (m.trainer) m.model = read_trainer_model(dir, round);
  derive_trainer_states(m);
  name_bottleneck(a);
  list_remedies(a);
  return {{}, std::move(a)};
}

std::string render_advice_text(const RunAdvice& a) {
  const MeasuredRun& m = a.run;
  char head[512];
  std::snprintf(head, sizeof head,
                "dtrain plan --from %s: job %s, %zu ranks on %zu node(s), %s\n"
                "a step: %.1f ms (median of %zu samples): data wait %.1f, compute %.1f, exposed communication %.1f, "
                "optimizer %.1f; %.0f tokens/s\n",
                m.dir.c_str(), m.job_id.c_str(), m.ranks, m.nodes,
                m.trainer ? ("dtrain-trainer, " + m.precision + ", ZeRO-" + std::to_string(m.zero_stage)).c_str()
                          : "a script",
                m.step_ms, m.samples, m.data_wait_ms, m.compute_ms, m.comm_exposed_ms, m.optimizer_ms,
                m.tokens_per_s);
  std::string out = head + memory_text(m);
  char bottleneck[64];
  std::snprintf(bottleneck, sizeof bottleneck, "bottleneck: %s, %.0f%% of a step", a.bottleneck.c_str(),
                100 * a.bottleneck_share);
  out += bottleneck + straggler_text(a) + "\n";
  if (a.remedies.empty()) out += "no part of the step is worth a remedy (each under 10% or already addressed)\n";
  for (const Remedy& r : a.remedies) {
    out += "\n- " + r.what + ": " + gain_text(r, m) + "\n";
    for (const std::string& line : r.lines) out += "    " + line + "\n";
  }
  return out;
}

std::string render_advice_json(const RunAdvice& a) {
  const MeasuredRun& m = a.run;
  const MeasuredMemory& mem = m.memory;
  nlohmann::json remedies = nlohmann::json::array();
  for (const Remedy& r : a.remedies) {
    remedies.push_back({{"what", r.what}, {"kind", r.is_memory() ? "memory" : "time"}, {"gain_ms", r.gain_ms},
                        {"frees_bytes", r.frees_bytes}, {"note", r.note}, {"lines", r.lines}});
  }
  const nlohmann::json memory = {
      {"rss_bytes", mem.rss_bytes}, {"device_used_bytes", mem.device_used_bytes},
      {"device_peak_bytes", mem.device_peak_bytes}, {"device_total_bytes", mem.device_total_bytes},
      {"model_states", states_source_name(mem.states)}, {"params_bytes", mem.params_bytes},
      {"grads_bytes", mem.grads_bytes}, {"optim_bytes", mem.optim_bytes},
      {"activations_bytes", mem.activations_bytes}};
  const nlohmann::json out = {
      {"run", {{"dir", m.dir}, {"job", m.job_id}, {"trainer", m.trainer}, {"precision", m.precision},
               {"zero_stage", m.zero_stage}, {"params", m.model.params}, {"ranks", m.ranks}, {"nodes", m.nodes},
               {"ranks_per_node", m.ranks_per_node}, {"samples", m.samples}, {"step_ms", m.step_ms},
               {"data_wait_ms", m.data_wait_ms}, {"compute_ms", m.compute_ms},
               {"comm_exposed_ms", m.comm_exposed_ms}, {"optimizer_ms", m.optimizer_ms},
               {"tokens_per_s", m.tokens_per_s}, {"memory", memory}}},
      {"bottleneck", a.bottleneck},
      {"stragglers", a.stragglers},
      {"bottleneck_share", a.bottleneck_share},
      {"remedies", remedies}};
  return out.dump(2) + "\n";
}

}  // namespace dtrain::plan
