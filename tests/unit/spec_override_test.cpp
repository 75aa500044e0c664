// `--set key.path=value` overrides: applied to the document before it is checked.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli/spec/spec.h"

using namespace dtrain::spec;

namespace {

constexpr std::string_view kOverrideBase = R"(name: base
nodes:
  count: 2
command: [python3, train.py]
env: {A: "1"}
)";

Spec with(const std::vector<std::string>& overrides, std::string_view yaml = kOverrideBase) {
  return load_spec_string(yaml, "job.yaml", overrides);
}

std::vector<std::string> errors_with(const std::vector<std::string>& overrides, std::string_view yaml = kOverrideBase) {
  try {
    with(overrides, yaml);
  } catch (const SpecError& e) {
    std::vector<std::string> out;
    for (const auto& d : e.diagnostics) out.push_back(d.format());
    return out;
  }
  FAIL("the overrides were accepted, but an error was expected");
  return {};
}

}  // namespace

TEST_CASE("a scalar override replaces the file's value") {
  const Spec s = with({"nodes.count=4", "name=other", "stop.grace_s=2.5", "shell=false"});
  CHECK(s.nodes.min_count == 4);
  CHECK(s.nodes.max_count == 4);
  CHECK(s.name == "other");
  CHECK(s.stop.grace_s == 2.5);
}

TEST_CASE("a list override is YAML flow syntax") {
  CHECK(with({"command=[python3,other.py,--lr,0.1]"}).command ==
        std::vector<std::string>{"python3", "other.py", "--lr", "0.1"});
  const Spec s = with({"logs.console=[0,3]", "workers_per_node=4"});
  CHECK(s.logs.console == Spec::Logs::Console::ranks);
  CHECK(s.logs.console_ranks == std::vector<int>{0, 3});
}

TEST_CASE("map keys: env entries are added or replaced, missing sections are created") {
  const Spec s = with({"env.FOO=bar", "env.A=2", "nccl.env.NCCL_DEBUG=INFO", "restart.max_restarts=3", "env.EMPTY="});
  CHECK(s.env == std::map<std::string, std::string>{{"A", "2"}, {"EMPTY", ""}, {"FOO", "bar"}});
  CHECK(s.nccl.env == std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"}});
  CHECK(s.restart.max_restarts == 3);
}

TEST_CASE("overrides complete a spec that lacks required keys, even an empty one") {
  const Spec s = with({"name=from-flags", "command=[echo,hi]", "env.X=1"}, "");
  CHECK(s.name == "from-flags");
  CHECK(s.command == std::vector<std::string>{"echo", "hi"});
  CHECK(s.env.at("X") == "1");
}

TEST_CASE("a bad path is reported against --set with did-you-mean") {
  CHECK(errors_with({"nodes.cuont=3"}) ==
        std::vector<std::string>{"--set: nodes.cuont: unknown key. Did you mean 'nodes.count'? Allowed keys under "
                                 "nodes: provider, count, agents, hosts, rendezvous, interface, join_timeout_s, ssh_command, srun_command, "
                                 "remote_dtrain, topology"});
  CHECK(errors_with({"comand=[a]"}) ==
        std::vector<std::string>{"--set: comand: unknown key. Did you mean 'command'? Allowed top-level keys: name, "
                                 "nodes, workers_per_node, command, shell, env, working_dir, restart, stop, health, "
                                 "logs, nccl, binding, gpu_isolation, observe"});
  CHECK(errors_with({"nodes.count.max=3"}) ==
        std::vector<std::string>{"--set: nodes.count.max: nodes.count takes a value, not keys. Write --set "
                                 "nodes.count=value."});
  CHECK(errors_with({"env.A.B=3"}) ==
        std::vector<std::string>{"--set: env.A: is an environment variable; it has no keys under it. Write --set "
                                 "env.A=value."});
  CHECK(errors_with({"nodes..count=3"}) ==
        std::vector<std::string>{"--set: nodes..count: is not a key path. Examples: --set nodes.count=4, --set "
                                 "command=[python3,train.py], --set env.NCCL_DEBUG=INFO"});
  CHECK(errors_with({"verbose"}) ==
        std::vector<std::string>{"--set: expected key.path=value, got 'verbose'. Examples: --set nodes.count=4, "
                                 "--set command=[python3,train.py], --set env.NCCL_DEBUG=INFO"});
}

TEST_CASE("an overridden value is checked like the file's, and blamed on --set") {
  CHECK(errors_with({"nodes.count=abc"}) ==
        std::vector<std::string>{"--set: nodes.count: expected an integer or MIN:MAX, got 'abc'. Examples: count: 2, "
                                 "count: 2:4"});
  CHECK(errors_with({"nodes={cuont: 2}"}) ==
        std::vector<std::string>{"--set: nodes.cuont: unknown key. Did you mean 'nodes.count'? Allowed keys under "
                                 "nodes: provider, count, agents, hosts, rendezvous, interface, join_timeout_s, ssh_command, srun_command, "
                                 "remote_dtrain, topology"});
  CHECK(errors_with({"command=[a,"}).front().starts_with(
      "--set: command: cannot read '[a,' as a YAML value: "));
}

TEST_CASE("file errors and override errors are reported together") {
  CHECK(errors_with({"stop.grace=1"}, "name: x\ncommand: [a]\nrestart: {max_restarts: -1}\n") ==
        std::vector<std::string>{
            "job.yaml:3:25: restart.max_restarts: must be >= 0, got -1.",
            "--set: stop.grace: unknown key. Did you mean 'stop.grace_s'? Allowed keys under stop: grace_s"});
}

TEST_CASE("setting below a key that is not a mapping says so") {
  CHECK(errors_with({"nodes.count=2"}, "name: x\ncommand: [a]\nnodes: 3\n") ==
        std::vector<std::string>{
            "job.yaml:3:8: nodes: expected a mapping, got '3'. Keys under nodes: provider, count, agents, hosts, rendezvous, "
            "interface, join_timeout_s, ssh_command, srun_command, remote_dtrain, topology.",
            "--set: nodes.count: cannot be set: nodes in job.yaml is not a mapping. Fix nodes in the file first."});
}
