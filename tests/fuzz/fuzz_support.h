#pragma once

// Helpers shared by the fuzz targets (one target per file in this directory; scripts/fuzz.sh runs them).

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cli/spec/spec.h"

namespace dtrain::fuzz {

// The input as a file the readers under test open by path: a memfd, so no disk is touched and nothing is left
// behind. The path (/proc/self/fd/N) is valid while the object lives.
class MemFile {
 public:
  MemFile(const std::uint8_t* data, std::size_t size) {
    fd_ = ::memfd_create("dtrain-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) throw std::runtime_error("write to memfd failed");
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Splits "a\nb\n" into its lines (no terminators).
inline std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto end = text.find('\n');
    out.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

// A spec that loaded is planned and rendered as `dtrain launch --dry-run` does, on simulated nodes, when it is
// small enough to do so quickly (sizes up to the limits are covered by the unit tests).
inline void plan_and_render(const spec::Spec& spec) {
  int count = spec.nodes.provider == spec::Provider::static_list ? static_cast<int>(spec.nodes.agents.size())
                                                                 : spec.nodes.max_count;
  if (count == 0) count = 1;  // slurm without a count: the allocation's size
  const long long per_node = spec.workers_per_node.kind == spec::Spec::WorkersPerNode::Kind::count
                                 ? spec.workers_per_node.count
                                 : 4;
  if (count > 16 || per_node * count > 256) return;
  std::vector<spec::NodeInfo> nodes;
  for (int i = 0; i < count; ++i) {
    spec::NodeInfo node;
    node.hostname = "node" + std::to_string(i);
    node.host_id = i % 2 ? "host-b" : "host-a";
    node.address = "10.0.0." + std::to_string(i + 1);
    node.agent_address = node.address + ":29400";
    node.cpus = {0, 1, 2, 3, 4, 5};
    node.cpu_numa = {0, 0, 0, 1, 1, 1};
    node.gpu_count = 4;
    node.tuned_env = {{"NCCL_IB_HCA", "=mlx5_0"}};
    nodes.push_back(std::move(node));
  }
  spec::RoundInfo round;
  round.job_id = spec.name + "-20260101-000000";
  round.attempt_dir = "/tmp/runs/" + round.job_id + "/attempt_0";
  try {
    const spec::Plan plan = spec::make_plan(spec, nodes, round);
    if (plan.workers.size() != plan.world_size) __builtin_trap();
    (void)spec::render_plan(spec, plan);
  } catch (const spec::PlanError&) {
  }
}

}  // namespace dtrain::fuzz
