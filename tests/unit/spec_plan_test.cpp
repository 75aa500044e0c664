// make_plan and render_plan: ranks, the worker environment, CPU binding, console filters, the dry-run text.

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "cli/spec/spec.h"

using namespace dtrain::spec;

namespace {

using Env = std::map<std::string, std::string>;

Spec spec_of(std::string_view yaml) { return load_spec_string(yaml, "job.yaml", {}); }

std::vector<unsigned> range(unsigned from, unsigned to) {
  std::vector<unsigned> out;
  for (unsigned c = from; c < to; ++c) out.push_back(c);
  return out;
}

NodeInfo node_info(std::string name, std::string host_id, unsigned ncpus, unsigned gpus = 0) {
  NodeInfo n;
  n.hostname = name;
  n.host_id = std::move(host_id);
  n.address = "10.0.0." + name.substr(name.size() - 1);
  n.agent_address = n.address + ":29400";
  n.cpus = range(0, ncpus);
  n.gpu_count = gpus;
  return n;
}

RoundInfo round_info() {
  RoundInfo r;
  r.job_id = "job-1";
  r.restart_count = 2;
  r.master_addr = "10.0.0.1";
  r.master_port = 29500;
  r.store_address = "10.0.0.1:29401";
  r.store_token = "s3cret";
  r.attempt_dir = "/tmp/runs/job-1/attempt_2";
  return r;
}

std::vector<std::vector<unsigned>> cpus_of(const Plan& plan) {
  std::vector<std::vector<unsigned>> out;
  for (const auto& w : plan.workers) out.push_back(w.cpus);
  return out;
}

std::vector<std::string> omp_of(const Plan& plan) {
  std::vector<std::string> out;
  for (const auto& w : plan.workers) out.push_back(w.env.at("OMP_NUM_THREADS"));
  return out;
}

constexpr std::string_view kTwoByFour = R"(name: job
nodes: {provider: static, agents: [10.0.0.1:29400, 10.0.0.2:29400]}
workers_per_node: 4
command: [python3, train.py]
restart: {max_restarts: 3}
)";

}  // namespace

TEST_CASE("2 nodes x 4 workers: ranks and the complete torchrun-compatible environment") {
  const Plan plan =
      make_plan(spec_of(kTwoByFour), {node_info("node1", "h1", 8), node_info("node2", "h2", 8)}, round_info());
  CHECK(plan.world_size == 8);
  CHECK(plan.nnodes == 2);
  CHECK(plan.workers_per_node == 4);
  CHECK(plan.warnings.empty());
  REQUIRE(plan.workers.size() == 8);
  for (unsigned r = 0; r < 8; ++r) {
    const WorkerPlan& w = plan.workers[r];
    const unsigned node_rank = r / 4, local = r % 4;
    CAPTURE(r);
    CHECK(w.rank == r);
    CHECK(w.node_rank == node_rank);
    CHECK(w.local_rank == local);
    CHECK(w.host == (node_rank == 0 ? "node1" : "node2"));
    CHECK(w.argv == std::vector<std::string>{"python3", "train.py"});
    CHECK(w.working_dir == ".");
    CHECK(w.log_path == "/tmp/runs/job-1/attempt_2/rank_" + std::to_string(r) + ".log");
    CHECK(w.error_file == "/tmp/runs/job-1/attempt_2/rank_" + std::to_string(r) + "_error.json");
    CHECK(w.cpus == range(local * 2, local * 2 + 2));
    const Env expected = {
        {"RANK", std::to_string(r)},
        {"LOCAL_RANK", std::to_string(local)},
        {"WORLD_SIZE", "8"},
        {"LOCAL_WORLD_SIZE", "4"},
        {"GROUP_RANK", std::to_string(node_rank)},
        {"GROUP_WORLD_SIZE", "2"},
        {"ROLE_RANK", std::to_string(r)},
        {"ROLE_NAME", "default"},
        {"ROLE_WORLD_SIZE", "8"},
        {"MASTER_ADDR", "10.0.0.1"},
        {"MASTER_PORT", "29500"},
        {"TORCHELASTIC_RESTART_COUNT", "2"},
        {"TORCHELASTIC_MAX_RESTARTS", "3"},
        {"TORCHELASTIC_RUN_ID", "job-1"},
        {"TORCHELASTIC_USE_AGENT_STORE", "False"},
        {"TORCHELASTIC_ERROR_FILE", w.error_file},
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"OMP_NUM_THREADS", "2"},
        {"PYTHONUNBUFFERED", "1"},
        {"DTRAIN_JOB_ID", "job-1"},
        {"DTRAIN_NODE_RANK", std::to_string(node_rank)},
        {"DTRAIN_STORE_ADDR", "10.0.0.1:29401"},
        {"DTRAIN_JOB_TOKEN", "s3cret"},
        {"DTRAIN_AGENT_ADDR", node_rank == 0 ? "10.0.0.1:29400" : "10.0.0.2:29400"},
        {"DTRAIN_RESTART_COUNT", "2"},
        {"DTRAIN_HEALTH_INTERVAL_MS", "1000"},
    };
    CHECK(w.env == expected);
  }
}

TEST_CASE("a dry run shows what is reserved at launch, and MASTER_ADDR defaults to node 0's address") {
  RoundInfo r;
  r.job_id = "job-1";
  r.attempt_dir = "/runs/job-1/attempt_0";
  const Plan plan = make_plan(spec_of(kTwoByFour), {node_info("node1", "h1", 8), node_info("node2", "h2", 8)}, r);
  const Env& env = plan.workers[5].env;
  CHECK(env.at("MASTER_ADDR") == "10.0.0.1");
  CHECK(env.at("MASTER_PORT") == "<reserved at launch>");
  CHECK(env.at("DTRAIN_STORE_ADDR") == "<reserved at launch>");
  CHECK(env.at("DTRAIN_JOB_TOKEN") == "<reserved at launch>");
}

TEST_CASE("precedence: env over nccl.env over automatic tuning; the user may set OMP and async error handling") {
  const Spec s = spec_of(R"(name: job
nodes: {count: 2}
command: [a]
env: {NCCL_SOCKET_IFNAME: eth9, NCCL_DEBUG: WARN, OMP_NUM_THREADS: "7", TORCH_NCCL_ASYNC_ERROR_HANDLING: "3"}
nccl:
  env: {NCCL_DEBUG: INFO, NCCL_IB_HCA: "=mlx5_0", NCCL_NET_GDR_LEVEL: PHB}
)");
  NodeInfo n = node_info("node1", "h1", 4);
  n.tuned_env = {{"NCCL_IB_HCA", "=mlx5_1"}, {"NCCL_MIN_NCHANNELS", "4"}};
  const Plan plan = make_plan(s, {n, n}, round_info());
  const Env& env = plan.workers[1].env;
  CHECK(env.at("NCCL_SOCKET_IFNAME") == "eth9");      // env beats the local provider's loopback
  CHECK(env.at("GLOO_SOCKET_IFNAME") == "lo");        // automatic for provider local
  CHECK(env.at("NCCL_DEBUG") == "WARN");              // env beats nccl.env
  CHECK(env.at("NCCL_IB_HCA") == "=mlx5_0");          // nccl.env beats the node's tuning
  CHECK(env.at("NCCL_NET_GDR_LEVEL") == "PHB");
  CHECK(env.at("NCCL_MIN_NCHANNELS") == "4");         // tuning applies where nobody overrode it
  CHECK(env.at("OMP_NUM_THREADS") == "7");
  CHECK(plan.workers[1].omp_threads == 7);            // what the diagnoser counts once env went to the agent
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "3");
  CHECK(plan.warnings.empty());
}

TEST_CASE("automatic tuning: loopback for local jobs, nodes.interface, nothing with nccl.auto false") {
  const std::vector<NodeInfo> local = {node_info("node1", "h", 4)};
  const Env auto_env = make_plan(spec_of("name: j\ncommand: [a]\n"), local, round_info()).workers[0].env;
  CHECK(auto_env.at("NCCL_SOCKET_IFNAME") == "lo");
  CHECK(auto_env.at("GLOO_SOCKET_IFNAME") == "lo");

  NodeInfo tuned = node_info("node1", "h", 4);
  tuned.tuned_env = {{"NCCL_IB_HCA", "=mlx5_0"}};
  const Env off = make_plan(spec_of("name: j\ncommand: [a]\nnccl: {auto: false}\n"), {tuned}, round_info())
                      .workers[0]
                      .env;
  CHECK(off.count("NCCL_SOCKET_IFNAME") == 0);
  CHECK(off.count("GLOO_SOCKET_IFNAME") == 0);
  CHECK(off.count("NCCL_IB_HCA") == 0);
  CHECK(off.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");

  const Env iface = make_plan(spec_of("name: j\ncommand: [a]\nnodes: {provider: slurm, count: 1, interface: ib0}\n"), {tuned},
                              round_info())
                        .workers[0]
                        .env;
  CHECK(iface.at("NCCL_SOCKET_IFNAME") == "ib0");
  CHECK(iface.at("GLOO_SOCKET_IFNAME") == "ib0");
  CHECK(iface.at("NCCL_IB_HCA") == "=mlx5_0");
}

TEST_CASE("deprecated NCCL_ASYNC_ERROR_HANDLING is translated, with a warning") {
  const Plan plan = make_plan(spec_of("name: j\ncommand: [a]\nenv: {NCCL_ASYNC_ERROR_HANDLING: \"0\"}\n"),
                              {node_info("node1", "h", 2)}, round_info());
  const Env& env = plan.workers[0].env;
  CHECK(env.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(plan.warnings == std::vector<std::string>{
                             "env: NCCL_ASYNC_ERROR_HANDLING is deprecated (PyTorch reads "
                             "TORCH_NCCL_ASYNC_ERROR_HANDLING); passed to workers as "
                             "TORCH_NCCL_ASYNC_ERROR_HANDLING=0. Rename it in the spec."});

  const Plan both = make_plan(spec_of("name: j\ncommand: [a]\nenv: {TORCH_NCCL_ASYNC_ERROR_HANDLING: \"2\"}\n"
                                      "nccl: {env: {NCCL_ASYNC_ERROR_HANDLING: \"0\"}}\n"),
                              {node_info("node1", "h", 2)}, round_info());
  CHECK(both.workers[0].env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "2");
  CHECK(both.workers[0].env.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
  CHECK(both.warnings == std::vector<std::string>{
                             "nccl.env: NCCL_ASYNC_ERROR_HANDLING is deprecated and was not passed on: "
                             "TORCH_NCCL_ASYNC_ERROR_HANDLING is set too and replaces it. Remove "
                             "NCCL_ASYNC_ERROR_HANDLING."});
}

TEST_CASE("deprecated TORCH_NCCL_AVOID_RECORD_STREAMS is kept, with an explanation") {
  const Spec s = spec_of("name: j\ncommand: [a]\nnccl: {env: {TORCH_NCCL_AVOID_RECORD_STREAMS: \"1\"}}\n");
  const Plan plan = make_plan(s, {node_info("node1", "h", 2)}, round_info());
  CHECK(plan.workers[0].env.at("TORCH_NCCL_AVOID_RECORD_STREAMS") == "1");
  REQUIRE(plan.warnings.size() == 1);
  CHECK(plan.warnings[0] ==
        "nccl.env: TORCH_NCCL_AVOID_RECORD_STREAMS is deprecated: recent PyTorch avoids recordStream in "
        "ProcessGroupNCCL by default, so the variable has no effect there except a warning. Passed on unchanged for "
        "older PyTorch; remove it if you run a recent one.");
}

TEST_CASE("binding: 8 workers on 2 CPUs are pinned round-robin with OMP_NUM_THREADS=1") {
  const Plan plan = make_plan(spec_of("name: j\ncommand: [a]\nworkers_per_node: 8\n"), {node_info("node1", "h", 2)},
                              round_info());
  CHECK(cpus_of(plan) == std::vector<std::vector<unsigned>>{{0}, {1}, {0}, {1}, {0}, {1}, {0}, {1}});
  CHECK(omp_of(plan) == std::vector<std::string>(8, "1"));
  CHECK(plan.warnings == std::vector<std::string>{
                             "host node1: 8 workers share 2 CPUs; each is pinned to one CPU, round-robin, with "
                             "OMP_NUM_THREADS=1"});
}

TEST_CASE("binding: 4 workers on 16 CPUs in 2 NUMA nodes get blocks of 4 within a NUMA node") {
  NodeInfo n = node_info("node1", "h", 16);
  for (unsigned c = 0; c < 16; ++c) n.cpu_numa.push_back(static_cast<int>(c % 2));  // even CPUs on node 0
  const Plan plan = make_plan(spec_of("name: j\ncommand: [a]\nworkers_per_node: 4\n"), {n}, round_info());
  CHECK(cpus_of(plan) == std::vector<std::vector<unsigned>>{
                             {0, 2, 4, 6}, {8, 10, 12, 14}, {1, 3, 5, 7}, {9, 11, 13, 15}});
  CHECK(omp_of(plan) == std::vector<std::string>(4, "4"));
}

TEST_CASE("binding: two simulated nodes on one host split its CPUs; the remainder goes to the first blocks") {
  const Spec s = spec_of("name: j\nnodes: {count: 2}\ncommand: [a]\nworkers_per_node: 2\n");
  const Plan plan = make_plan(s, {node_info("node1", "same", 10), node_info("node2", "same", 10)}, round_info());
  CHECK(cpus_of(plan) == std::vector<std::vector<unsigned>>{{0, 1, 2}, {3, 4, 5}, {6, 7}, {8, 9}});
  CHECK(omp_of(plan) == std::vector<std::string>{"3", "3", "2", "2"});
  // Different machines: each node's workers share only that node's CPUs.
  const Plan apart = make_plan(s, {node_info("node1", "h1", 10), node_info("node2", "h2", 10)}, round_info());
  CHECK(cpus_of(apart) == std::vector<std::vector<unsigned>>{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9},
                                                             {0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}});
}

TEST_CASE("binding none: nobody pinned, OMP_NUM_THREADS is the share of the CPUs") {
  const Spec s = spec_of("name: j\ncommand: [a]\nworkers_per_node: 4\nbinding: none\n");
  const Plan plan = make_plan(s, {node_info("node1", "h", 16)}, round_info());
  CHECK(cpus_of(plan) == std::vector<std::vector<unsigned>>(4));
  CHECK(omp_of(plan) == std::vector<std::string>(4, "4"));
  const Plan crowded = make_plan(s, {node_info("node1", "h", 2)}, round_info());
  CHECK(omp_of(crowded) == std::vector<std::string>(4, "1"));
}

TEST_CASE("workers_per_node gpu and cpu resolve per node, and must agree") {
  const Spec gpu = spec_of("name: j\nnodes: {provider: slurm, count: 2}\ncommand: [a]\nworkers_per_node: gpu\n");
  const Plan plan = make_plan(gpu, {node_info("node1", "h1", 32, 8), node_info("node2", "h2", 32, 8)}, round_info());
  CHECK(plan.workers_per_node == 8);
  CHECK(plan.world_size == 16);
  CHECK(plan.workers[9].env.at("LOCAL_WORLD_SIZE") == "8");
  CHECK(plan.workers[9].cpus == std::vector<unsigned>{4, 5, 6, 7});

  CHECK_THROWS_WITH_AS(make_plan(gpu, {node_info("node1", "h1", 8, 8), node_info("node2", "h2", 8, 0)}, round_info()),
                       "workers_per_node: gpu but node 1 (node2) has no GPU; use an integer", PlanError);
  CHECK_THROWS_WITH_AS(make_plan(gpu, {node_info("node1", "h1", 8, 8), node_info("node2", "h2", 8, 4)}, round_info()),
                       "workers_per_node: gpu gives a different number of workers per node (node 0 (node1) has 8 "
                       "GPUs, node 1 (node2) has 4 GPUs); every node must run the same number: use an integer, e.g. "
                       "workers_per_node: 4",
                       PlanError);

  const Spec cpu = spec_of("name: j\ncommand: [a]\nworkers_per_node: cpu\n");
  const Plan per_cpu = make_plan(cpu, {node_info("node1", "h", 3)}, round_info());
  CHECK(per_cpu.workers_per_node == 3);
  CHECK(cpus_of(per_cpu) == std::vector<std::vector<unsigned>>{{0}, {1}, {2}});
  CHECK(omp_of(per_cpu) == std::vector<std::string>(3, "1"));
}

TEST_CASE("the number of nodes must match nodes.count") {
  CHECK_THROWS_WITH_AS(make_plan(spec_of(kTwoByFour), {node_info("node1", "h1", 8)}, round_info()),
                       "the job needs 2 nodes (nodes.count) but 1 joined", PlanError);
  const Spec elastic = spec_of("name: j\nnodes: {provider: slurm, count: 2:4}\ncommand: [a]\n");
  CHECK(make_plan(elastic, {node_info("node1", "h1", 2), node_info("node2", "h2", 2), node_info("node3", "h3", 2)},
                  round_info())
            .nnodes == 3);
  CHECK_THROWS_WITH_AS(make_plan(elastic, {node_info("node1", "h1", 2)}, round_info()),
                       "the job needs between 2 and 4 nodes (nodes.count) but 1 joined", PlanError);
}

TEST_CASE("console filters choose which ranks stream to the launcher") {
  const auto streaming = [](std::string_view console) {
    const Spec s = spec_of("name: j\ncommand: [a]\nworkers_per_node: 4\nlogs: {console: " + std::string(console) +
                           "}\n");
    std::vector<unsigned> out;
    for (const auto& w : make_plan(s, {node_info("node1", "h", 4)}, round_info()).workers) {
      CHECK(w.stream_stdout == w.stream_stderr);
      if (w.stream_stdout) out.push_back(w.rank);
    }
    return out;
  };
  CHECK(streaming("rank0") == std::vector<unsigned>{0});
  CHECK(streaming("all") == std::vector<unsigned>{0, 1, 2, 3});
  CHECK(streaming("none").empty());
  CHECK(streaming("[1, 3]") == std::vector<unsigned>{1, 3});

  // With a world size known only at plan time, a rank that does not exist is a warning.
  const Spec gpu = spec_of("name: j\ncommand: [a]\nworkers_per_node: gpu\nlogs: {console: [1, 9]}\n");
  const Plan plan = make_plan(gpu, {node_info("node1", "h", 4, 2)}, round_info());
  CHECK(plan.workers[1].stream_stdout);
  CHECK(plan.warnings ==
        std::vector<std::string>{"logs.console lists rank 9, but the job has 2 ranks; it is ignored"});
}

TEST_CASE("shell: true runs the string through /bin/sh -c; working_dir is passed as given") {
  const Spec s = spec_of("name: j\ncommand: \"python3 train.py | tee out\"\nshell: true\nworking_dir: /work/x\n");
  const WorkerPlan w = make_plan(s, {node_info("node1", "h", 2)}, round_info()).workers[0];
  CHECK(w.argv == std::vector<std::string>{"/bin/sh", "-c", "python3 train.py | tee out"});
  CHECK(w.working_dir == "/work/x");
}

TEST_CASE("render_plan: one block per rank with its placement, argv and full sorted env") {
  const Spec s = spec_of(kTwoByFour);
  const Plan plan = make_plan(s, {node_info("node1", "h1", 8), node_info("node2", "h2", 8)}, round_info());
  const std::string text = render_plan(s, plan);
  CHECK(text.starts_with("job job: 2 nodes x 4 workers = 8 ranks (provider static, binding auto, max restarts 3)\n"));
  for (const auto& w : plan.workers) {
    CAPTURE(w.rank);
    const std::string header = "\nrank " + std::to_string(w.rank) + ": node " + std::to_string(w.node_rank) +
                               ", host " + w.host + ", local rank " + std::to_string(w.local_rank) + "\n";
    const auto start = text.find(header);
    REQUIRE(start != std::string::npos);
    const auto end = text.find("\nrank ", start + header.size());
    const std::string block = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    CHECK(block.find("  cpus:        " + std::to_string(w.local_rank * 2) + "-" +
                     std::to_string(w.local_rank * 2 + 1) + "\n") != std::string::npos);
    CHECK(block.find("  argv:        python3 train.py\n") != std::string::npos);
    std::string previous;
    std::size_t listed = 0;
    for (const auto& [name, value] : w.env) {
      const std::string shown = name == "DTRAIN_JOB_TOKEN" ? "<hidden>" : value;
      const auto at = block.find("\n    " + name + "=" + shown + "\n");
      CHECK_MESSAGE(at != std::string::npos, name);
      CHECK(name > previous);
      previous = name;
      ++listed;
    }
    CHECK(listed == w.env.size());
  }
  CHECK(text.find("s3cret") == std::string::npos);
  CHECK(text.find("(shown on the console)") != std::string::npos);
}

TEST_CASE("render_plan quotes arguments for the shell and lists the warnings") {
  const Spec s = spec_of("name: j\ncommand: [python3, -c, \"print('hi there')\"]\nworkers_per_node: 3\n"
                         "env: {NCCL_ASYNC_ERROR_HANDLING: \"1\"}\n");
  RoundInfo dry;
  dry.job_id = "j-1";
  const std::string text = render_plan(s, make_plan(s, {node_info("node1", "h", 2)}, dry));
  CHECK(text.find("  argv:        python3 -c 'print('\\''hi there'\\'')'\n") != std::string::npos);
  CHECK(text.find("\nwarning: env: NCCL_ASYNC_ERROR_HANDLING is deprecated") != std::string::npos);
  CHECK(text.find("\nwarning: host node1: 3 workers share 2 CPUs") != std::string::npos);
  CHECK(text.find("    MASTER_PORT=<reserved at launch>\n") != std::string::npos);
  CHECK(text.find("    DTRAIN_JOB_TOKEN=<reserved at launch>\n") != std::string::npos);
}

TEST_CASE("sizes are checked in 64 bits: a plan that would wrap or exceed the limits is refused, not built") {
  // 65536 x 65536 wrapped to 0 ranks in 32 bits; the spec would be refused by validate, make_plan refuses it too.
  Spec spec = spec_of("name: x\ncommand: [a]\n");
  spec.workers_per_node.count = 65536;
  CHECK_THROWS_WITH_AS(make_plan(spec, {node_info("node1", "h1", 2)}, round_info()),
                       "workers_per_node must be 1 to 1024, got 65536", PlanError);
  // gpu/cpu resolve on the nodes: a node with more CPUs than a node may run workers.
  Spec cpu = spec_of("name: x\ncommand: [a]\nworkers_per_node: cpu\n");
  CHECK_THROWS_WITH_AS(make_plan(cpu, {node_info("node1", "h1", 2000)}, round_info()),
                       "workers_per_node: cpu gives 2000 workers on node 0 (node1); a node runs at most 1024: use an "
                       "integer", PlanError);
  // 1024 per node on 65 nodes is more ranks than a job may have.
  Spec gpu = spec_of("name: x\ncommand: [a]\nnodes: {provider: static, count: 65, agents: [" + [] {
    std::string list;
    for (int i = 0; i < 65; ++i) list += (i ? ", " : "") + std::string("h") + std::to_string(i) + ":1";
    return list;
  }() + "]}\nworkers_per_node: gpu\n");
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < 65; ++i) {
    nodes.push_back(node_info("node" + std::to_string(i % 10), "h" + std::to_string(i), 1, 1024));
  }
  CHECK_THROWS_WITH_AS(make_plan(gpu, nodes, round_info()),
                       "1024 workers on each of 65 nodes make 66560 ranks; a job has at most 65536: lower "
                       "workers_per_node or nodes.count", PlanError);
}
