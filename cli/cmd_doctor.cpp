// `dtrain doctor [JOB.yaml] [--json]`: preflight checks. Without a spec, on this node (GPUs, NCCL, RDMA, limits,
// /dev/shm, disks, environment), and the node's fp32 GEMM rate, measured by dtrain-trainer (beside this binary) and
// cached for CPU ranks' MFU (agent/node/cpu_gemm.h). With one, on every node of that job through its agents
// (started or dialed as `dtrain launch` would; they report the cached rate, measuring nothing), plus checks across
// the nodes: same dtrain/driver/NCCL versions, clock skew, every node reaches node 0's MASTER_PORT range and the
// other agents, nodes.interface exists everywhere.
// Exit 0 when no check fails, 1 otherwise, 2 for a bad spec.

#include <cstdio>
#include <filesystem>

#include "agent/node/doctor/checks.h"
#include "agent/node/doctor/cluster.h"
#include "cli/commands.h"
#include "cli/controller/controller.h"

namespace dtrain::cli {
namespace {

int doctor_job(const spec::Spec& spec, const LaunchFlags& flags, const std::string& checkpoint_dir, double timeout_s,
               bool json) {
  namespace doctor = node::doctor;
  block_termination_signals();
  controller::ControllerOptions options;
  options.self_exe = self_executable();
  options.insecure = flags.insecure;
  options.secret_dir = flags.secret_dir;
  controller::Controller controller(spec, options);
  on_termination_signal([&controller](int signal) { controller.signal(signal); });
  std::vector<controller::ProbedNode> probed;
  try {
    probed = controller.probe(checkpoint_dir, std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)));
  } catch (const std::exception& e) {
    on_termination_signal(nullptr);
    std::fprintf(stderr, "dtrain doctor: cannot reach the job's nodes: %s\n", e.what());
    return 1;
  }
  on_termination_signal(nullptr);

  std::vector<doctor::NodeReport> reports;
  std::vector<doctor::NodeFindings> findings;
  for (const auto& p : probed) {
    doctor::NodeFindings f;
    f.node = "node " + std::to_string(p.node_rank) + " (" + p.hostname + ")";
    if (p.checks) {
      f.answered = true;
      f.dtrain_version = p.checks->dtrain_version;
      f.driver_version = p.checks->driver_version;
      f.nccl_version = p.checks->nccl_version;
      f.clock_offset_ms = p.clock_offset_ms;
      f.interfaces = p.checks->interfaces;
      try {
        doctor::NodeReport report = doctor::parse_json(p.checks->node_checks_json);
        report.node = f.node;
        reports.push_back(std::move(report));
      } catch (const std::exception& e) {
        reports.push_back({f.node, {{"node.report", doctor::Status::fail, e.what(), "run dtrain doctor on that node"}}});
      }
    } else {
      reports.push_back({f.node, {{"node.report", doctor::Status::fail, "its agent did not answer the probe in time",
                                   "check the agent's log on that node"}}});
    }
    if (p.reach) {
      // Node 0's port comes first in every other node's list (see JobProbe::run).
      for (std::size_t i = 0; i < p.reach->reach.size(); ++i) {
        const bool master = p.node_rank != 0 && i == 0;
        (master ? f.master_port : f.agents).push_back(p.reach->reach[i]);
      }
    }
    findings.push_back(std::move(f));
  }
  doctor::ClusterOptions cluster_options;
  cluster_options.interface = spec.nodes.interface;
  const auto cluster = doctor::cluster_checks(findings, cluster_options);

  bool failed = false;
  for (const auto& r : reports) failed = failed || r.failed();
  for (const auto& c : cluster) failed = failed || c.status == doctor::Status::fail;
  std::string out;
  if (json) {
    out = doctor::render_job_json(reports, cluster);
  } else {
    for (const auto& r : reports) out += doctor::render_table(r) + "\n";
    out += doctor::render_table({"across the " + std::to_string(reports.size()) + " nodes of " + spec.name, cluster});
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return failed ? 1 : 0;
}

}  // namespace

Action add_doctor_command(CLI::App& app) {
  struct Args {
    bool json = false;
    node::doctor::GatherOptions gather;
    std::string file;
    std::vector<std::string> sets;
    LaunchFlags flags;
    double timeout_s = 30;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("doctor", "Preflight checks on this node, or on every node of a job");
  cmd->add_option("spec", args->file, "job spec (YAML): check every node of that job through its agents");
  cmd->add_flag("--json", args->json,
                "print JSON: {\"node\", \"checks\":[{\"id\",\"status\",\"message\",\"fix\"}]}; with a spec "
                "{\"nodes\":[...], \"cluster\":{\"checks\":[...]}}");
  cmd->add_option("--set", args->sets, "override a key of the spec (repeatable)");
  cmd->add_option("--log-dir", args->gather.log_dir, "where job logs will go (free space is checked; with a spec: "
                  "its logs.dir)")->capture_default_str();
  cmd->add_option("--checkpoint-dir", args->gather.checkpoint_dir, "where checkpoints will go (free space is checked)");
  cmd->add_option("--sysfs-root", args->gather.roots.sysfs, "sysfs to read")->capture_default_str();
  cmd->add_option("--procfs-root", args->gather.roots.procfs, "procfs to read")->capture_default_str();
  cmd->add_option("--timeout-s", args->timeout_s, "with a spec: how long to wait for each round of answers")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  add_launch_flags(*cmd, args->flags);
  return [args]() {
    if (!args->file.empty()) {
      const std::optional<spec::Spec> spec = load_spec_or_report(args->file, args->sets);
      if (!spec) return 2;
      return doctor_job(*spec, args->flags, args->gather.checkpoint_dir, args->timeout_s, args->json);
    }
    // This node's fp32 GEMM rate, measured with the trainer's kernels and cached for CPU ranks' MFU (cpu.gemm).
    args->gather.gemm_trainer =
        (std::filesystem::path(self_executable()).parent_path() / "dtrain-trainer").string();
    node::doctor::NodeReport report = node::doctor::run_node_checks(node::doctor::gather_inputs(args->gather));
    std::string out = args->json ? node::doctor::render_json(report) : node::doctor::render_table(report);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return report.exit_code();
  };
}

}  // namespace dtrain::cli
