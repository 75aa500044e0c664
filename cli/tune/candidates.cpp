// The baseline's facts and the candidates chosen from them (candidates.h has the rules).

#include "cli/tune/candidates.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/tune/stats.h"

namespace dtrain::tune {
namespace {

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// Worker counts to try: powers of two up to `cpus`, and `cpus`, above `theirs`; the largest two, largest last.
std::vector<int> worker_counts(int cpus, int theirs) {
  std::vector<int> counts;
  for (int w = 1; w < cpus; w *= 2) {
    if (w > theirs) counts.push_back(w);
  }
  if (cpus > theirs) counts.push_back(cpus);
  if (counts.size() > 2) counts.erase(counts.begin(), counts.end() - 2);
  return counts;
}

void data_candidates(const JobFacts& f, std::vector<Candidate>& out) {
  if (!f.has_loader) return;
  const bool pin = f.cuda && !f.loader_pin;
  const auto counts = worker_counts(std::max(f.cpus, 1), f.loader_workers);
  for (int w : counts) {
    Candidate c{"num_workers=" + std::to_string(w), "data", {}, {}, {}};
    c.overlay.dataloader.num_workers = w;
    out.push_back(std::move(c));
  }
  const int top = counts.empty() ? f.loader_workers : counts.back();
  if (top > 0) {
    Candidate c{(counts.empty() ? "" : "num_workers=" + std::to_string(top) + ", ") +
                    "prefetch_factor=4, persistent_workers",
                "data", {}, {}, {}};
    if (!counts.empty()) c.overlay.dataloader.num_workers = top;
    c.overlay.dataloader.prefetch_factor = 4;
    c.overlay.dataloader.persistent_workers = true;
    out.push_back(std::move(c));
  }
  for (auto& c : out) {
    if (!pin || c.part != "data") continue;
    c.overlay.dataloader.pin_memory = true;
    c.name += ", pin_memory";
  }
}

// The sizes of `sizes` but `theirs`, nearest to it first, at most `most`.
std::vector<double> other_sizes(std::vector<double> sizes, double theirs, std::size_t most) {
  std::erase_if(sizes, [theirs](double s) { return std::abs(s - theirs) < 1e-9; });
  std::stable_sort(sizes.begin(), sizes.end(), [theirs](double a, double b) {
    return std::abs(std::log(a / theirs)) < std::abs(std::log(b / theirs));
  });
  if (sizes.size() > most) sizes.resize(most);
  return sizes;
}

void comm_candidates(const JobFacts& f, std::vector<Candidate>& out) {
  if (f.trainer) {
    const double theirs = f.trainer_bucket_mb > 0 ? f.trainer_bucket_mb : 25;
    for (double mb : other_sizes({1, 4, 25}, theirs, 2)) {
      out.push_back({"--ddp-bucket-mb " + number_text(mb), "communication", {}, {}, {"--ddp-bucket-mb",
                                                                                      number_text(mb)}});
    }
    std::string other;
    if (f.nodes > 1) other = f.trainer_backend == "hier" ? "gloo" : "hier";
    else if (f.ranks > 1) other = f.trainer_backend == "shm" ? "gloo" : "shm";
    if (!other.empty()) {
      out.push_back({"DTRAIN_COMM_BACKEND=" + other, "communication", {}, {{"DTRAIN_COMM_BACKEND", other}}, {}});
    }
    return;
  }
  if (f.cuda) {
    // NCCL chooses between its ring and tree algorithms by a model of the sizes; each forced is a trial.
    for (const char* algo : {"Ring", "Tree"}) {
      Candidate c{std::string("NCCL_ALGO=") + algo, "communication", {}, {}, {}};
      c.overlay.env["NCCL_ALGO"] = algo;
      out.push_back(std::move(c));
    }
  }
  if (!f.has_ddp) return;
  for (double mb : other_sizes({1, 5, 25, 100}, f.bucket_cap_mb > 0 ? f.bucket_cap_mb : 25, 2)) {
    Candidate c{"bucket_cap_mb=" + number_text(mb), "communication", {}, {}, {}};
    c.overlay.ddp.bucket_cap_mb = mb;
    out.push_back(std::move(c));
  }
  if (!f.bucket_view) {
    Candidate c{"gradient_as_bucket_view", "communication", {}, {}, {}};
    c.overlay.ddp.gradient_as_bucket_view = true;
    out.push_back(std::move(c));
  }
}

// binding: none where several ranks of a node are bound to their own CPUs.
void binding_candidate(const JobFacts& f, std::vector<Candidate>& out) {
  if (!f.bound || f.ranks <= f.nodes) return;
  Candidate c{"binding: none", "compute", {}, {}, {}};
  c.overlay.binding = dtrain::spec::Binding::none;
  out.push_back(std::move(c));
}

void compute_candidates(const JobFacts& f, std::vector<Candidate>& out) {
  binding_candidate(f, out);
  if (f.cuda && !f.trainer) {
    // The caching allocator's expandable segments: less fragmentation and fewer cudaMalloc calls as sizes vary.
    Candidate c{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "compute", {}, {}, {}};
    c.overlay.env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True";
    out.push_back(std::move(c));
  }
  if (f.cpus <= 0 || f.threads == f.cpus) return;
  const std::string n = std::to_string(f.cpus);
  if (f.trainer) {
    out.push_back({"--threads " + n, "compute", {}, {}, {"--threads", n}});
    return;
  }
  Candidate c{"intra_op threads=" + n, "compute", {}, {}, {}};
  c.overlay.intra_op_threads = f.cpus;
  out.push_back(std::move(c));
}

}  // namespace

std::string JobFacts::bottleneck() const {
  if (data_share >= comm_share && data_share >= compute_share) return "data";
  return comm_share >= compute_share ? "communication" : "compute";
}

JobFacts job_facts(const std::vector<RankTrial>& ranks, bool trainer, int nodes) {
  JobFacts f;
  f.trainer = trainer;
  f.nodes = nodes;
  f.ranks = static_cast<int>(ranks.size());
  std::vector<double> data, comm;
  f.cpus = ranks.empty() ? 0 : ranks.front().cpus;
  for (const auto& r : ranks) {
    double total = 0;
    for (double s : r.step_s) total += s;
    data.push_back(total > 0 ? std::min(1.0, r.data_wait_s / total) : 0);
    comm.push_back(total > 0 ? std::min(1.0, r.comm_s / total) : 0);
    if (r.cpus > 0) f.cpus = std::min(f.cpus > 0 ? f.cpus : r.cpus, r.cpus);
    f.cuda = f.cuda || r.device == "cuda";
  }
  f.data_share = median(data);
  f.comm_share = median(comm);
  f.compute_share = std::max(0.0, 1 - f.data_share - f.comm_share);
  if (ranks.empty()) return f;
  const RankTrial& r0 = ranks.front();
  f.threads = r0.threads;
  f.has_loader = r0.loader_num_workers.has_value();
  f.loader_workers = r0.loader_num_workers.value_or(0);
  f.loader_pin = r0.loader_pin_memory.value_or(false);
  f.has_ddp = !r0.ddp_json.empty();
  f.bucket_cap_mb = r0.ddp_bucket_cap_mb.value_or(25);
  f.bucket_view = r0.ddp_gradient_as_bucket_view.value_or(false);
  f.trainer_bucket_mb = r0.trainer_bucket_mb.value_or(0);
  f.trainer_backend = r0.trainer_backend;
  return f;
}

std::vector<Candidate> choose_candidates(const JobFacts& f, const std::set<std::string>& only) {
  struct Part {
    const char* name;
    double share;
    void (*choose)(const JobFacts&, std::vector<Candidate>&);
  };
  std::vector<Part> parts = {{"data", f.data_share, data_candidates},
                             {"communication", f.comm_share, comm_candidates},
                             {"compute", f.compute_share, compute_candidates}};
  std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.share > b.share; });
  std::vector<Candidate> out;
  for (const auto& part : parts) {
    if (only.empty() ? part.share >= kWorthShare : only.count(part.name) > 0) part.choose(f, out);
  }
  // What the bootstrap names when it says what a trial's overlay changed.
  for (auto& c : out) c.overlay.file = "dtrain tune";
  return out;
}

std::vector<std::string> with_flags(std::vector<std::string> command, const std::vector<std::string>& args) {
  for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
    const std::string& flag = args[i];
    const std::string& value = args[i + 1];
    bool replaced = false;
    for (std::size_t j = 1; j < command.size() && !replaced; ++j) {
      if (command[j] == flag && j + 1 < command.size()) {
        command[j + 1] = value;
        replaced = true;
      } else if (command[j].rfind(flag + "=", 0) == 0) {
        command[j] = flag + "=" + value;
        replaced = true;
      }
    }
    if (!replaced) {
      command.push_back(flag);
      command.push_back(value);
    }
  }
  return command;
}

}  // namespace dtrain::tune
