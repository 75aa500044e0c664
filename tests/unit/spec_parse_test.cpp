// Reading job specs: every key, the defaults, and the messages for every kind of mistake, with their positions.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "cli/spec/spec.h"

using namespace dtrain::spec;

namespace {

std::vector<std::string> errors_of(std::string_view yaml) {
  try {
    load_spec_string(yaml, "job.yaml", {});
  } catch (const SpecError& e) {
    std::vector<std::string> out;
    for (const auto& d : e.diagnostics) out.push_back(d.format());
    return out;
  }
  FAIL("the spec loaded, but an error was expected:\n" << yaml);
  return {};
}

std::string sole_error(std::string_view yaml) {
  const auto errors = errors_of(yaml);
  REQUIRE(errors.size() == 1);
  return errors.front();
}

constexpr std::string_view kFull = R"(name: tiny-gpt
nodes:
  provider: static
  count: 2
  agents: [10.0.0.1:29400, "[fe80::1]:29401"]
  interface: eth0
  join_timeout_s: 90
workers_per_node: gpu
command: [dtrain-trainer, --model, tiny]
shell: false
env: {NCCL_DEBUG: INFO, FOO: 1}
working_dir: /data/job
restart: {max_restarts: 3, backoff_s: 2.5}
stop: {grace_s: 5}
health: {heartbeat_timeout_s: 20, hang_timeout_s: 300, node_timeout_s: 15}
logs: {dir: /tmp/runs, console: [0, 3]}
nccl: {auto: false, env: {NCCL_IB_HCA: "=mlx5_0"}}
binding: none
)";

}  // namespace

TEST_CASE("a spec with every key is read completely") {
  const Spec s = load_spec_string(kFull, "job.yaml", {});
  CHECK(s.name == "tiny-gpt");
  CHECK(s.source == "job.yaml");
  CHECK(s.nodes.provider == Provider::static_list);
  CHECK(s.nodes.min_count == 2);
  CHECK(s.nodes.max_count == 2);
  CHECK(s.nodes.agents == std::vector<std::string>{"10.0.0.1:29400", "[fe80::1]:29401"});
  CHECK(s.nodes.interface == "eth0");
  CHECK(s.nodes.join_timeout_s == 90);
  CHECK(s.workers_per_node.kind == Spec::WorkersPerNode::Kind::gpu);
  CHECK(s.command == std::vector<std::string>{"dtrain-trainer", "--model", "tiny"});
  CHECK_FALSE(s.shell);
  CHECK(s.env == std::map<std::string, std::string>{{"FOO", "1"}, {"NCCL_DEBUG", "INFO"}});
  CHECK(s.working_dir == "/data/job");
  CHECK(s.restart.max_restarts == 3);
  CHECK(s.restart.backoff_s == 2.5);
  CHECK(s.stop.grace_s == 5);
  CHECK(s.health.heartbeat_timeout_s == 20);
  CHECK(s.health.hang_timeout_s == 300);
  CHECK(s.health.node_timeout_s == 15);
  CHECK(s.logs.dir == "/tmp/runs");
  CHECK(s.logs.console == Spec::Logs::Console::ranks);
  CHECK(s.logs.console_ranks == std::vector<int>{0, 3});
  CHECK_FALSE(s.nccl.automatic);
  CHECK(s.nccl.env == std::map<std::string, std::string>{{"NCCL_IB_HCA", "=mlx5_0"}});
  CHECK(s.binding == Binding::none);
}

TEST_CASE("only name and command are required; everything else has the documented default") {
  const Spec s = load_spec_string("name: job-1\ncommand: [python3, train.py]\n", "job.yaml", {});
  CHECK(s.nodes.provider == Provider::local);
  CHECK(s.nodes.min_count == 1);
  CHECK(s.nodes.max_count == 1);
  CHECK(s.nodes.agents.empty());
  CHECK(s.nodes.interface.empty());
  CHECK(s.nodes.join_timeout_s == 60);
  CHECK(s.workers_per_node.kind == Spec::WorkersPerNode::Kind::count);
  CHECK(s.workers_per_node.count == 1);
  CHECK_FALSE(s.shell);
  CHECK(s.env.empty());
  CHECK(s.working_dir == ".");
  CHECK(s.restart.max_restarts == 0);
  CHECK(s.restart.backoff_s == 1);
  CHECK(s.stop.grace_s == 10);
  CHECK(s.health.heartbeat_timeout_s == 30);
  CHECK(s.health.hang_timeout_s == 0);
  CHECK(s.health.exit_timeout_s == 120);
  CHECK(s.health.node_timeout_s == 10);
  CHECK(s.logs.dir == "runs");
  CHECK(s.logs.console == Spec::Logs::Console::rank0);
  CHECK(s.nccl.automatic);
  CHECK(s.nccl.env.empty());
  CHECK(s.binding == Binding::automatic);
}

TEST_CASE("other accepted forms: elastic range, shell string, console words, empty sections") {
  const Spec s = load_spec_string(R"(name: elastic
nodes: {provider: slurm, count: 2:8}
workers_per_node: 4
command: "python3 train.py --lr 0.1 | tee out.txt"
shell: true
restart:
logs: {console: all}
)", "job.yaml", {});
  CHECK(s.nodes.min_count == 2);
  CHECK(s.nodes.max_count == 8);
  CHECK(s.workers_per_node.count == 4);
  CHECK(s.command == std::vector<std::string>{"python3 train.py --lr 0.1 | tee out.txt"});
  CHECK(s.shell);
  CHECK(s.restart.max_restarts == 0);
  CHECK(s.logs.console == Spec::Logs::Console::all);
  CHECK(load_spec_string("name: a\ncommand: [a]\nlogs: {console: none}\nworkers_per_node: cpu\n", "j", {})
            .logs.console == Spec::Logs::Console::none);
}

TEST_CASE("static without count takes the number of agents") {
  const Spec s = load_spec_string("name: a\ncommand: [a]\nnodes: {provider: static, agents: [h1:1, h2:2, h3:3]}\n",
                                  "job.yaml", {});
  CHECK(s.nodes.min_count == 3);
  CHECK(s.nodes.max_count == 3);
}

TEST_CASE("unknown key: position of the key, did-you-mean and the allowed keys") {
  CHECK(sole_error("name: x\ncommand: [a]\nnodes:\n  cuont: 2\n") ==
        "job.yaml:4:3: nodes.cuont: unknown key. Did you mean 'nodes.count'? Allowed keys under nodes: provider, "
        "count, agents, hosts, rendezvous, interface, join_timeout_s, ssh_command, srun_command, remote_dtrain, topology");
  CHECK(sole_error("name: x\ncomand: [a]\n") ==
        "job.yaml:2:1: comand: unknown key. Did you mean 'command'? Allowed top-level keys: name, nodes, "
        "workers_per_node, command, shell, env, working_dir, restart, stop, health, logs, nccl, binding, gpu_isolation, observe");
  // A misspelt required key gets its did-you-mean and no "missing required key" on top.
  CHECK(errors_of("nmae: x\ncommand: [a]\n").size() == 1);
  // A key written at the wrong level is found in its section.
  CHECK(sole_error("name: x\ncommand: [a]\ngrace_s: 3\n").starts_with(
      "job.yaml:3:1: grace_s: unknown key. Did you mean 'stop.grace_s'? Allowed top-level keys: name,"));
  // Nothing close: no suggestion, only the list.
  CHECK(sole_error("name: x\ncommand: [a]\nstop: {zzzzzz: 1}\n") ==
        "job.yaml:3:8: stop.zzzzzz: unknown key. Allowed keys under stop: grace_s");
}

TEST_CASE("the diagnostic's fields are 1-based positions, the dotted key and a separate hint") {
  try {
    load_spec_string("name: x\ncommand: [a]\nhealth:\n  hang_timeout: 5\n", "job.yaml", {});
    FAIL("expected an error");
  } catch (const SpecError& e) {
    REQUIRE(e.diagnostics.size() == 1);
    const Diagnostic& d = e.diagnostics[0];
    CHECK(d.file == "job.yaml");
    CHECK(d.line == 4);
    CHECK(d.column == 3);
    CHECK(d.key == "health.hang_timeout");
    CHECK(d.message == "unknown key.");
    CHECK(d.hint == "Did you mean 'health.hang_timeout_s'? Allowed keys under health: heartbeat_timeout_s, "
                    "hang_timeout_s, startup_timeout_s, exit_timeout_s, node_timeout_s, straggler_ratio, "
                    "instrument");
    CHECK(std::string(e.what()) == d.format());
  }
}

TEST_CASE("wrong types name what was expected and what was found, at the value") {
  CHECK(sole_error("name: x\ncommand: [a]\nrestart:\n  max_restarts: abc\n") ==
        "job.yaml:4:17: restart.max_restarts: expected an integer, got 'abc'.");
  CHECK(sole_error("name: x\ncommand: [a]\nstop: {grace_s: soon}\n") ==
        "job.yaml:3:17: stop.grace_s: expected a number of seconds, got 'soon'.");
  CHECK(sole_error("name: x\ncommand: [a]\nshell: yes\n") ==
        "job.yaml:3:8: shell: expected true or false, got 'yes'.");
  CHECK(sole_error("name: [a, b]\ncommand: [a]\n") == "job.yaml:1:7: name: expected a string, got a list.");
  CHECK(sole_error("name: x\ncommand: {a: b}\n") ==
        "job.yaml:2:10: command: expected a list of arguments, got a mapping. Example: command: [python3, train.py]");
  CHECK(sole_error("name: x\ncommand: [a]\nrestart: 3\n") ==
        "job.yaml:3:10: restart: expected a mapping, got '3'. Keys under restart: max_restarts, backoff_s.");
  CHECK(sole_error("name: x\ncommand: [a]\nenv: [A=1]\n") ==
        "job.yaml:3:6: env: expected a mapping of variable names to values, got a list. Example: env: "
        "{NCCL_DEBUG: INFO}");
  CHECK(sole_error("name: x\ncommand: [a]\nenv:\n  B:\n") ==
        "job.yaml:4:3: env.B: expected a string, got nothing. Write B: \"\" for an empty value.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {count: abc}\n") ==
        "job.yaml:3:16: nodes.count: expected an integer or MIN:MAX, got 'abc'. Examples: count: 2, count: 2:4");
  CHECK(sole_error("name: x\ncommand: [a]\nstop: {grace_s: .nan}\n") ==
        "job.yaml:3:17: stop.grace_s: expected a number of seconds, got '.nan' (not a number).");
}

TEST_CASE("values outside a fixed set suggest the closest one") {
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: locl}\n") ==
        "job.yaml:3:19: nodes.provider: expected local, static, ssh, slurm or join, got 'locl'. Did you mean 'local'?");
  CHECK(sole_error("name: x\ncommand: [a]\nbinding: autp\n") ==
        "job.yaml:3:10: binding: expected auto or none, got 'autp'. Did you mean 'auto'?");
  CHECK(sole_error("name: x\ncommand: [a]\nworkers_per_node: gpus\n") ==
        "job.yaml:3:19: workers_per_node: expected an integer >= 1, gpu or cpu, got 'gpus'. Did you mean 'gpu'?");
  CHECK(sole_error("name: x\ncommand: [a]\nlogs:\n  console: al\n") ==
        "job.yaml:4:12: logs.console: expected rank0, all, none or a list of ranks, got 'al'. Did you mean 'all'?");
  CHECK(sole_error("name: x\ncommand: [a]\nlogs:\n  console: rank3\n") ==
        "job.yaml:4:12: logs.console: expected rank0, all, none or a list of ranks, got 'rank3'. To show rank 3 "
        "only, write console: [3].");
}

TEST_CASE("impossible values") {
  CHECK(sole_error("name: x\ncommand: [a]\nnodes:\n  count: -2\n") ==
        "job.yaml:4:10: nodes.count: must be at least 1, got -2.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes:\n  provider: slurm\n  count: 3:2\n") ==
        "job.yaml:5:10: nodes.count: minimum 3 is greater than maximum 2. Write MIN:MAX with MIN <= MAX, e.g. 2:3.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {count: 1:4}\n") ==
        "job.yaml:3:16: nodes.count: a range (MIN:MAX) needs provider static, join, ssh or slurm; provider local has a fixed "
        "number of nodes. Write count: N.");
  CHECK(sole_error("name: x\ncommand: [a]\nstop:\n  grace_s: -1\n") ==
        "job.yaml:4:12: stop.grace_s: must be >= 0, got -1. Use 0 to turn it off.");
  CHECK(sole_error("name: x\ncommand: [a]\nrestart: {max_restarts: -1}\n") ==
        "job.yaml:3:25: restart.max_restarts: must be >= 0, got -1.");
  CHECK(sole_error("name: x\ncommand: [a]\nworkers_per_node: 0\n") ==
        "job.yaml:3:19: workers_per_node: must be at least 1, got 0. Use an integer >= 1, gpu (one per GPU) or cpu "
        "(one per CPU).");
  CHECK(sole_error("name: Tiny_GPT\ncommand: [a]\n") ==
        "job.yaml:1:7: name: 'Tiny_GPT' is not a valid job name: use lowercase letters, digits and '-'. Did you "
        "mean 'tiny-gpt'?");
  CHECK(sole_error("name: x\ncommand: [a]\nlogs:\n  console: [0, -1]\n") ==
        "job.yaml:4:16: logs.console[1]: ranks are >= 0, got -1.");
  CHECK(sole_error("name: x\ncommand: [a]\nworkers_per_node: 2\nlogs:\n  console: [2]\n") ==
        "job.yaml:5:13: logs.console[0]: rank 2 does not exist: the job has 2 ranks (0-1).");
  CHECK(sole_error("name: x\ncommand: [a]\nenv: {RANK: \"3\"}\n") ==
        "job.yaml:3:7: env.RANK: RANK is set by dtrain for every worker and cannot be overridden. Remove it; ranks, "
        "sizes and addresses follow from nodes and workers_per_node.");
  for (const char* name : {"DTRAIN_HEALTH_SOCKET", "DTRAIN_STACKS_FILE", "DTRAIN_HEALTH_INTERVAL_MS"}) {
    CAPTURE(name);
    CHECK(sole_error(std::string("name: x\ncommand: [a]\nenv: {") + name + ": \"/tmp/x\"}\n").find(
              std::string(name) + " is set by dtrain for every worker and cannot be overridden") != std::string::npos);
  }
  CHECK(sole_error("name: x\ncommand: [a]\nnccl:\n  env: {NCCL-DEBUG: INFO}\n") ==
        "job.yaml:4:9: nccl.env.NCCL-DEBUG: 'NCCL-DEBUG' is not an environment variable name. Use letters, digits "
        "and '_', not starting with a digit.");
}

TEST_CASE("static provider: agents required, one per node, each host:port") {
  CHECK(sole_error("name: x\ncommand: [a]\nnodes:\n  provider: static\n  count: 2\n") ==
        "job.yaml:3:1: nodes.agents: provider static needs the address of every node's agent. Example: agents: "
        "[10.0.0.1:29400, 10.0.0.2:29400]");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes:\n  provider: static\n  count: 2\n  agents: [a:1, b:2, c:3]\n") ==
        "job.yaml:6:11: nodes.agents: 3 agents are listed but nodes.count is 2. List one agent per node, or leave "
        "out count (it defaults to the number of agents).");
  CHECK(errors_of("name: x\ncommand: [a]\nnodes:\n  provider: static\n  agents:\n    - node1\n    - 'n:99999'\n"
                  "    - node1:80\n    - node1:80\n") ==
        std::vector<std::string>{
            "job.yaml:6:7: nodes.agents[0]: 'node1' has no port. Write host:port, e.g. node1:29400 or "
            "[fe80::1]:29400.",
            "job.yaml:7:7: nodes.agents[1]: 'n:99999' has a port outside 1-65535. Write host:port, e.g. node1:29400 "
            "or [fe80::1]:29400.",
            "job.yaml:9:7: nodes.agents[3]: 'node1:80' is listed twice. List each node's agent once."});
  CHECK(sole_error("name: x\ncommand: [a]\nnodes:\n  agents: [a:1]\n") ==
        "job.yaml:4:11: nodes.agents: is only for provider static (provider is local). Remove agents, or set "
        "provider: static.");
}

TEST_CASE("command: empty, string without shell, list with shell") {
  CHECK(sole_error("name: x\ncommand: []\n") ==
        "job.yaml:2:10: command: is empty. Example: command: [python3, train.py]");
  CHECK(sole_error("name: x\ncommand: python3 train.py --lr 3\n") ==
        "job.yaml:2:10: command: a single string needs shell: true. Write it as a list, command: [python3, "
        "train.py, --lr, 3], or add 'shell: true' to run it with /bin/sh -c.");
  CHECK(sole_error("name: x\ncommand: [python3, train.py]\nshell: true\n") ==
        "job.yaml:2:10: command: with shell: true, command must be one string, got a list of 2. Write it as one "
        "string: command: \"python3 train.py\"");
  CHECK(sole_error("name: x\ncommand: ['', a]\n") ==
        "job.yaml:2:11: command[0]: the program to run is empty. Example: command: [python3, train.py]");
  // A one-element list with shell is the same as the string.
  CHECK(load_spec_string("name: x\ncommand: [echo hi]\nshell: true\n", "j", {}).command.size() == 1);
}

TEST_CASE("missing required keys name the key and show an example") {
  CHECK(errors_of("nodes: {count: 2}\n") ==
        std::vector<std::string>{"job.yaml: name: missing required key. Example: name: tiny-gpt",
                                 "job.yaml: command: missing required key. Example: command: [python3, train.py]"});
  CHECK(errors_of("") ==
        std::vector<std::string>{"job.yaml: name: missing required key. Example: name: tiny-gpt",
                                 "job.yaml: command: missing required key. Example: command: [python3, train.py]"});
}

TEST_CASE("every error is reported at once, in file order") {
  const auto errors = errors_of(R"(name: My Job
nodes:
  provider: static
  cuont: 2
  agents: [a:1, b]
workers_per_node: zero
command: [python3, train.py]
stop: {grace_s: -3}
logs:
  console: everyone
restart:
  max_restarts: many
)");
  CHECK(errors == std::vector<std::string>{
                      "job.yaml:1:7: name: 'My Job' is not a valid job name: use lowercase letters, digits and '-'. "
                      "Did you mean 'my-job'?",
                      "job.yaml:4:3: nodes.cuont: unknown key. Did you mean 'nodes.count'? Allowed keys under "
                      "nodes: provider, count, agents, hosts, rendezvous, interface, join_timeout_s, ssh_command, "
                      "srun_command, remote_dtrain, topology",
                      "job.yaml:5:17: nodes.agents[1]: 'b' has no port. Write host:port, e.g. node1:29400 or "
                      "[fe80::1]:29400.",
                      "job.yaml:6:19: workers_per_node: expected an integer >= 1, gpu or cpu, got 'zero'.",
                      "job.yaml:8:17: stop.grace_s: must be >= 0, got -3. Use 0 to turn it off.",
                      "job.yaml:10:12: logs.console: expected rank0, all, none or a list of ranks, got 'everyone'. "
                      "Example: console: [0, 4]",
                      "job.yaml:12:17: restart.max_restarts: expected an integer, got 'many'."});
}

TEST_CASE("repeated keys, non-mapping documents and several documents are refused") {
  CHECK(sole_error("name: x\ncommand: [a]\nname: y\n") ==
        "job.yaml:3:1: name: repeated key; each key may appear once. Remove one of them.");
  CHECK(sole_error("- a\n- b\n") ==
        "job.yaml:1:1: the spec must be a mapping of keys, got a list. Start with e.g. 'name: tiny-gpt' and "
        "'command: [python3, train.py]'.");
  CHECK(sole_error("name: x\ncommand: [a]\n---\nname: y\n") ==
        "job.yaml:4:1: a spec is one YAML document, this file has 2. Remove the '---' separators, or split the jobs "
        "into separate files.");
}

TEST_CASE("YAML syntax errors carry their position") {
  CHECK(sole_error("name: x\ncommand: [a]\nnodes:\n  count: 2\n   bad: 3\n") ==
        "job.yaml:5:7: invalid YAML: illegal map value. Check the indentation and quoting here and on the line "
        "before.");
  const auto d = [] {
    try {
      load_spec_string("name: x\ncommand: [a, b\nshell: true\n", "job.yaml", {});
    } catch (const SpecError& e) {
      return e.diagnostics;
    }
    return std::vector<Diagnostic>{};
  }();
  REQUIRE(d.size() == 1);
  CHECK(d[0].line == 3);
  CHECK(d[0].column == 6);
  CHECK(d[0].message == "invalid YAML: end of sequence flow not found.");
}

TEST_CASE("load_spec_file reads a file and names it in messages") {
  const auto path = std::filesystem::temp_directory_path() / ("dtrain_spec_test_" + std::to_string(::getpid()) +
                                                             ".yaml");
  {
    std::ofstream out(path);
    out << "name: from-file\ncommand: [a]\nnodes: {count: x}\n";
  }
  try {
    load_spec_file(path.string(), {});
    FAIL("expected an error");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()) == path.string() + ":3:16: nodes.count: expected an integer or MIN:MAX, got 'x'. "
                                                   "Examples: count: 2, count: 2:4");
  }
  const Spec s = load_spec_file(path.string(), {"nodes.count=3"});
  CHECK(s.name == "from-file");
  CHECK(s.source == path.string());
  CHECK(s.nodes.min_count == 3);
  std::filesystem::remove(path);

  try {
    load_spec_file(path.string(), {});
    FAIL("expected an error");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()) == "cannot read " + path.string() + ": No such file or directory. Pass the path of "
                                   "the job's YAML file (at most 1048576 bytes).");
  }
  const auto error_of = [](const std::string& file) {
    try {
      load_spec_file(file, {});
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string temp = std::filesystem::temp_directory_path().string();
  CHECK(error_of(temp).starts_with(temp + " is a directory, not a regular file."));
  CHECK(error_of("/dev/zero").starts_with("/dev/zero is a character device, not a regular file."));
  // No writer ever opens the FIFO: reading it as a stream would wait forever.
  const std::string fifo = temp + "/spec-fifo-" + std::to_string(::getpid()) + ".yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(error_of(fifo).starts_with(fifo + " is a FIFO (named pipe), not a regular file."));
  std::filesystem::remove(fifo);
  std::ofstream(path) << "name: big\n#" << std::string(1 << 20, 'x') << "\n";
  CHECK(error_of(path.string()).starts_with(path.string() + " is 1048588 bytes, more than the 1048576 read here."));
  std::filesystem::remove(path);
}

TEST_CASE("validate checks a spec built in code, naming its source") {
  Spec s;
  s.source = "dtrain run";
  s.name = "run";
  s.command = {"python3", "train.py"};
  CHECK_NOTHROW(validate(s));
  s.workers_per_node.count = 0;
  s.nodes.min_count = s.nodes.max_count = 0;
  s.stop.grace_s = -1;
  try {
    validate(s);
    FAIL("expected an error");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()) ==
          "dtrain run: nodes.count: must be at least 1, got 0.\n"
          "dtrain run: workers_per_node: must be at least 1, got 0. Use an integer >= 1, gpu (one per GPU) or cpu "
          "(one per CPU).\n"
          "dtrain run: stop.grace_s: must be >= 0, got -1. Use 0 to turn it off.");
  }
}

TEST_CASE("provider join needs a rendezvous address; rendezvous belongs to join only; static may be elastic") {
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: join, count: 2}\n") ==
        "job.yaml:3:1: nodes.rendezvous: provider join needs the host:port the launcher listens on for agents. "
        "Example: rendezvous: 10.0.0.1:29500 (agents run `dtrain agent --join 10.0.0.1:29500`)");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: join, count: 2, rendezvous: h}\n") ==
        "job.yaml:3:47: nodes.rendezvous: 'h' has no port. Write host:port, e.g. 10.0.0.1:29500.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {count: 2, rendezvous: 'h:1'}\n") ==
        "job.yaml:3:31: nodes.rendezvous: is only for providers join, ssh and slurm (provider is local). Remove "
        "rendezvous, or set provider: join.");
  auto spec = dtrain::spec::load_spec_string(
      "name: x\ncommand: [a]\nnodes: {provider: join, count: '2:4', rendezvous: '10.0.0.1:29500'}\n", "job.yaml", {});
  CHECK(spec.nodes.provider == dtrain::spec::Provider::join);
  CHECK(spec.nodes.min_count == 2);
  CHECK(spec.nodes.max_count == 4);
  CHECK(spec.nodes.rendezvous == "10.0.0.1:29500");
  auto elastic = dtrain::spec::load_spec_string(
      "name: x\ncommand: [a]\nnodes: {provider: static, count: '1:2', agents: ['a:1', 'b:2']}\n", "job.yaml", {});
  CHECK(elastic.nodes.min_count == 1);
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: static, count: '1:3', agents: ['a:1', 'b:2']}\n") ==
        "job.yaml:3:49: nodes.agents: 2 agents are listed but nodes.count is at most 3. List one agent per node, or "
        "leave out count (it defaults to the number of agents).");
}

TEST_CASE("provider ssh: hosts in node-rank order, count from them, ssh command and remote binary") {
  auto spec = dtrain::spec::load_spec_string(
      "name: x\ncommand: [a]\nnodes:\n  provider: ssh\n  hosts: [node1, alice@node2, '10.0.0.3:2222']\n"
      "  ssh_command: [ssh, -i, /k]\n  remote_dtrain: /opt/dtrain/bin/dtrain\n",
      "job.yaml", {});
  CHECK(spec.nodes.min_count == 3);
  CHECK(spec.nodes.max_count == 3);
  CHECK(spec.nodes.hosts == std::vector<std::string>{"node1", "alice@node2", "10.0.0.3:2222"});
  CHECK(spec.nodes.ssh_command == std::vector<std::string>{"ssh", "-i", "/k"});
  CHECK(spec.nodes.remote_dtrain == "/opt/dtrain/bin/dtrain");
  const auto alice = dtrain::spec::parse_ssh_host("alice@node2:2222");
  REQUIRE(alice);
  CHECK(alice->user == "alice");
  CHECK(alice->host == "node2");
  CHECK(alice->port == 2222);
  CHECK_FALSE(dtrain::spec::parse_ssh_host("node 2"));

  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: ssh, count: 2}\n") ==
        "job.yaml:3:1: nodes.hosts: provider ssh needs the hosts to start agents on. Example: hosts: [node1, node2] "
        "(the launcher runs `ssh node1 dtrain agent --join ...`)");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: ssh, hosts: [a, 'b:99999']}\n") ==
        "job.yaml:3:35: nodes.hosts[1]: 'b:99999' has an ssh port outside 1-65535. Write host, user@host or "
        "host:ssh_port, e.g. alice@node2:2222.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: ssh, hosts: [a, a]}\n") ==
        "job.yaml:3:35: nodes.hosts[1]: 'a' is listed twice. List each host once; run more workers with "
        "workers_per_node.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: ssh, count: 3, hosts: [a, b]}\n") ==
        "job.yaml:3:41: nodes.hosts: 2 hosts are listed but nodes.count is 3. List one host per node, or leave out "
        "count (it defaults to the number of hosts).");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {hosts: [a]}\n") ==
        "job.yaml:3:16: nodes.hosts: is only for provider ssh (provider is local). Remove hosts, or set provider: "
        "ssh.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: ssh, hosts: [a], ssh_command: []}\n") ==
        "job.yaml:3:49: nodes.ssh_command: is empty. Example: ssh_command: [ssh, -o, BatchMode=yes]");
  // Elastic: at most one node per host.
  spec = dtrain::spec::load_spec_string(
      "name: x\ncommand: [a]\nnodes: {provider: ssh, count: '1:2', hosts: [a, b], rendezvous: '10.0.0.1:0'}\n",
      "job.yaml", {});
  CHECK(spec.nodes.min_count == 1);
  CHECK(spec.nodes.rendezvous == "10.0.0.1:0");
}

TEST_CASE("provider slurm: no count means the whole allocation; srun command") {
  auto spec = dtrain::spec::load_spec_string("name: x\ncommand: [a]\nnodes: {provider: slurm}\n", "job.yaml", {});
  CHECK(spec.nodes.provider == dtrain::spec::Provider::slurm);
  CHECK(spec.nodes.max_count == 0);
  CHECK(spec.nodes.srun_command == std::vector<std::string>{"srun"});
  spec = dtrain::spec::load_spec_string(
      "name: x\ncommand: [a]\nnodes: {provider: slurm, count: '2:4', srun_command: [srun, -p, gpu]}\n", "job.yaml",
      {});
  CHECK(spec.nodes.max_count == 4);
  CHECK(spec.nodes.srun_command == std::vector<std::string>{"srun", "-p", "gpu"});
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {remote_dtrain: /x}\n") ==
        "job.yaml:3:24: nodes.remote_dtrain: is only for providers ssh and slurm (provider is local). Remove "
        "remote_dtrain.");
}

TEST_CASE("limits: counts, world size and name length are bounded, naming the key") {
  CHECK(errors_of("name: x\ncommand: [a]\nnodes:\n  count: 65536\nworkers_per_node: 65536\n") ==
        std::vector<std::string>{"job.yaml:4:10: nodes.count: must be at most 4096 nodes, got 65536.",
                                 "job.yaml:5:19: workers_per_node: must be at most 1024, got 65536."});
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {count: 100000}\n") ==
        "job.yaml:3:16: nodes.count: must be at most 4096 nodes, got 100000.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {provider: join, count: '1:5000', rendezvous: 'h:1'}\n") ==
        "job.yaml:3:32: nodes.count: must be at most 4096 nodes, got 5000.");
  CHECK(sole_error("name: x\ncommand: [a]\nworkers_per_node: 2147483647\n") ==
        "job.yaml:3:19: workers_per_node: must be at most 1024, got 2147483647.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {count: 4096}\nworkers_per_node: 17\n") ==
        "job.yaml:4:19: workers_per_node: 17 workers on each of 4096 nodes make 69632 ranks; a job has at most "
        "65536. Lower workers_per_node or nodes.count.");
  CHECK(sole_error("name: x\ncommand: [a]\nrestart: {max_restarts: 10001}\n") ==
        "job.yaml:3:25: restart.max_restarts: must be at most 10000, got 10001.");
  const std::string long_name(300, 'a');
  CHECK(sole_error("name: " + long_name + "\ncommand: [a]\n") ==
        "job.yaml:1:7: name: is 300 characters long; a job name has at most 128 (it names the job's log directory). "
        "Shorten it, e.g. '" + std::string(32, 'a') + "'.");
  // The largest allowed sizes load.
  const Spec big = load_spec_string("name: " + std::string(128, 'a') +
                                        "\ncommand: [a]\nnodes: {count: 4096}\nworkers_per_node: 16\n"
                                        "restart: {max_restarts: 10000}\n",
                                    "job.yaml", {});
  CHECK(big.nodes.max_count == 4096);
  CHECK(big.workers_per_node.count == 16);
}

TEST_CASE("limits: every duration is at most 7 days, so its milliseconds cannot wrap") {
  CHECK(sole_error("name: x\ncommand: [a]\nstop: {grace_s: 1e300}\n") ==
        "job.yaml:3:17: stop.grace_s: must be at most 604800 seconds (7 days), got 1e+300. Use 0 to turn it off.");
  CHECK(sole_error("name: x\ncommand: [a]\nstop: {grace_s: 4294967.3}\n") ==
        "job.yaml:3:17: stop.grace_s: must be at most 604800 seconds (7 days), got 4294967.3. Use 0 to turn it off.");
  CHECK(sole_error("name: x\ncommand: [a]\nhealth: {node_timeout_s: 1e20}\n") ==
        "job.yaml:3:26: health.node_timeout_s: must be at most 604800 seconds (7 days), got 1e+20.");
  for (const std::string key : {"restart.backoff_s", "health.heartbeat_timeout_s", "health.hang_timeout_s",
                                 "health.exit_timeout_s"}) {
    const auto dot = key.find('.');
    const std::string yaml = "name: x\ncommand: [a]\n" + key.substr(0, dot) + ": {" + key.substr(dot + 1) +
                             ": 604801}\n";
    CAPTURE(key);
    CHECK(sole_error(yaml).find(key + ": must be at most 604800 seconds (7 days), got 604801.") != std::string::npos);
  }
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {join_timeout_s: 1e9}\n") ==
        "job.yaml:3:25: nodes.join_timeout_s: must be at most 604800 seconds (7 days), got 1e+09.");
  CHECK(sole_error("name: x\ncommand: [a]\nnodes: {join_timeout_s: 0}\n") ==
        "job.yaml:3:25: nodes.join_timeout_s: must be at least 2 seconds, got 0: an agent's connection attempt takes up "
        "to a second and a turned-away agent redials a second later, so a shorter wait fails every job that has agents "
        "join. Give 2 or more.");
  const Spec week = load_spec_string("name: x\ncommand: [a]\nstop: {grace_s: 604800}\n", "job.yaml", {});
  CHECK(week.stop.grace_s == 604800);
}

TEST_CASE("duration_ms: checked conversion, rounded so a positive duration never becomes 0") {
  CHECK(duration_ms(0).count() == 0);
  CHECK(duration_ms(0.0001).count() == 1);
  CHECK(duration_ms(2.5).count() == 2500);
  CHECK(duration_ms(0.3).count() == 300);
  CHECK(duration_ms(kMaxDurationS).count() == 604800000);
  CHECK_THROWS_AS(duration_ms(kMaxDurationS + 1), std::out_of_range);
  CHECK_THROWS_AS(duration_ms(-1), std::out_of_range);
  CHECK_THROWS_AS(duration_ms(1e300), std::out_of_range);
  CHECK_THROWS_AS(duration_ms(std::nan("")), std::out_of_range);
}

TEST_CASE("a NUL byte in an argument, a variable or a path is refused, not cut short") {
  CHECK(sole_error("name: x\ncommand: [a, \"b\\0c\"]\n") ==
        "job.yaml:2:14: command[1]: contains a NUL byte (\\0), which no argument, variable or path can hold. Remove "
        "the \\0 from the value.");
  CHECK(sole_error("name: x\ncommand: [a]\nenv: {FOO: \"x\\0y\"}\n") ==
        "job.yaml:3:7: env.FOO: contains a NUL byte (\\0), which no argument, variable or path can hold. Remove the "
        "\\0 from the value.");
  CHECK(sole_error("name: x\ncommand: [a]\nnccl: {env: {NCCL_DEBUG: \"\\0\"}}\n").starts_with(
      "job.yaml:3:14: nccl.env.NCCL_DEBUG: contains a NUL byte"));
  CHECK(sole_error("name: x\ncommand: [a]\nworking_dir: \"/tmp\\0/x\"\n").starts_with(
      "job.yaml:3:14: working_dir: contains a NUL byte"));
  CHECK(sole_error("name: x\ncommand: [a]\nlogs: {dir: \"runs\\0\"}\n").starts_with(
      "job.yaml:3:13: logs.dir: contains a NUL byte"));
  CHECK(sole_error("name: x\ncommand: \"echo \\0\"\nshell: true\n").starts_with("job.yaml:2:10: command"));
  Spec s;
  s.source = "dtrain run";
  s.name = "run";
  s.command = {"python3", std::string("a\0b", 3)};
  try {
    validate(s);
    FAIL("expected an error");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()).starts_with("dtrain run: command[1]: contains a NUL byte"));
  }
}

TEST_CASE("text on which yaml-cpp's LoadAll never returns is a syntax error") {
  // Found by fuzzing (tests/fuzz/spec_reader.cpp): a ',' where a document starts made YAML::LoadAll add empty
  // documents forever, until the launcher ran out of memory.
  CHECK(sole_error(",") ==
        "job.yaml:1:1: invalid YAML: ',' cannot start a document. Check the indentation and quoting here and on the "
        "line before.");
  CHECK(sole_error("name: x\ncommand: [a]\n---\n,\n").starts_with("job.yaml:4:1: invalid YAML: ',' cannot start"));
}
