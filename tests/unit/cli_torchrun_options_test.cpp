// torchrun's options on `dtrain run` (cli/run/torchrun_options.h): both spellings and both value forms parse to the
// same thing, the program after the options is the program's (its own options included), and each refusal names
// its option. resolve() is given this machine's facts (HostFacts) as values, so that every branch runs here; the
// HostFacts::current() case checks it against real sockets, and the last one lays out --log-dir from real files.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <doctest/doctest.h>

#include <CLI/CLI.hpp>

#include "cli/run/node_console.h"
#include "cli/run/torchrun_options.h"

namespace {

using dtrain::cli::run::HostFacts;
using dtrain::cli::run::Resolved;
using dtrain::cli::run::TorchrunArgs;

struct Parsed {
  TorchrunArgs args;
  std::vector<std::string> program;
  bool dashdash = false;
  bool console_given = false;
};

// Parses `dtrain run ARGV...` as cmd_run.cpp does.
Parsed parse(std::vector<std::string> argv) {
  Parsed p;
  CLI::App app;
  auto* cmd = app.add_subcommand("run");
  std::string console;
  cmd->add_option("--console", console);
  dtrain::cli::run::add_torchrun_options(*cmd, p.args);
  cmd->add_option("command", p.program);
  cmd->positionals_at_end();
  argv.insert(argv.begin(), "run");
  std::reverse(argv.begin(), argv.end());  // CLI11 takes a vector in reverse order
  app.parse(argv);
  const auto rem = cmd->remaining();
  p.dashdash = std::find(rem.begin(), rem.end(), "--") != rem.end();
  p.console_given = cmd->count("--console") > 0;
  return p;
}

HostFacts facts(int cpus = 4, int gpus = 0) {
  HostFacts h;
  h.cpu_count = cpus;
  h.gpu_count = gpus;
  h.python = "/usr/bin/python3";
  h.local_host = [](const std::string& host) -> std::string {
    if (host == "localhost" || host == "127.0.0.1" || host == "this-host") return "";
    if (host == "other-host") return "is not an address of this machine";
    return "cannot be resolved: Name or service not known";
  };
  h.port_free = [](const std::string&, int port) -> std::string { return port == 4242 ? "is in use" : ""; };
  return h;
}

Resolved resolve(const std::vector<std::string>& argv, int nodes = 1, const HostFacts& h = facts()) {
  Parsed p = parse(argv);
  return dtrain::cli::run::resolve(p.args, p.program, p.dashdash, nodes, p.console_given, h);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("spellings: dashes, underscores, --opt=value and --opt value are one option") {
  for (const auto& argv : std::vector<std::vector<std::string>>{{"--nproc-per-node", "3", "t.py"},
                                                                {"--nproc_per_node", "3", "t.py"},
                                                                {"--nproc-per-node=3", "t.py"},
                                                                {"--nproc_per_node=3", "t.py"},
                                                                {"-n", "3", "t.py"}}) {
    const Resolved r = resolve(argv);
    CHECK(r.error.empty());
    CHECK(r.nproc == 3);
  }
  CHECK(resolve({"--max_restarts=2", "t.py"}).max_restarts == 2);
  CHECK(has(resolve({"--max-restarts", "-1", "t.py"}).error, "--max-restarts must be a whole number >= 0"));
  CHECK(resolve({"--max-restarts", "2", "t.py"}).max_restarts == 2);
  CHECK(*resolve({"--rdzv_conf=join_timeout=7,read_timeout=3", "t.py"}).join_timeout_s == 7);
  CHECK(*resolve({"--rdzv-conf", "join_timeout=7,read_timeout=3", "t.py"}).node_timeout_s == 3);
}

TEST_CASE("the program: a script or -m module under Python, --no-python as it is, -- as it is") {
  using V = std::vector<std::string>;
  CHECK(resolve({"--standalone", "t.py", "--lr", "1", "-n", "5"}).command ==
        V{"/usr/bin/python3", "-u", "t.py", "--lr", "1", "-n", "5"});
  CHECK(resolve({"--standalone", "t.py", "--lr", "1", "-n", "5"}).nproc == 1);  // -n 5 is the script's
  CHECK(resolve({"-m", "pkg.mod", "--x", "1"}).command == V{"/usr/bin/python3", "-u", "-m", "pkg.mod", "--x", "1"});
  CHECK(resolve({"--no_python", "./prog", "--x"}).command == V{"./prog", "--x"});
  CHECK(resolve({"-n", "2", "--", "python3", "t.py", "--", "x"}).command == V{"python3", "t.py", "--", "x"});
  CHECK(resolve({"--run-path", "t.py"}).command == V{"/usr/bin/python3", "-u", "t.py"});
  CHECK(has(resolve({"-m", "--no-python", "x"}).error, "-m/--module and --no-python"));
  CHECK(has(resolve({"-m", "--", "python3", "x"}).error, "-m/--module with `-- CMD ARGS`"));
  CHECK(has(resolve({"--standalone"}).error, "no program"));
}

TEST_CASE("--nproc-per-node cpu, auto, gpu") {
  CHECK(resolve({"--nproc-per-node", "cpu", "t.py"}, 1, facts(6, 2)).nproc == 6);
  CHECK(resolve({"--nproc-per-node", "auto", "t.py"}, 1, facts(6, 2)).nproc == 2);
  CHECK(resolve({"--nproc-per-node", "auto", "t.py"}, 1, facts(6, 0)).nproc == 6);
  CHECK(resolve({"--nproc-per-node", "gpu", "t.py"}, 1, facts(6, 2)).nproc == 2);
  CHECK(has(resolve({"--nproc-per-node", "gpu", "t.py"}, 1, facts(6, 0)).error, "--nproc-per-node gpu"));
  CHECK(has(resolve({"--nproc-per-node", "0", "t.py"}).error, "--nproc-per-node must be"));
  CHECK(has(resolve({"--nproc-per-node", "two", "t.py"}).error, "--nproc-per-node must be"));
}

TEST_CASE("one node: --node-rank above 0 and endpoints on other machines need --nnodes above 1") {
  CHECK(resolve({"--nnodes", "1", "t.py"}).error.empty());
  CHECK(!resolve({"--nnodes", "1", "t.py"}).multi);
  CHECK(resolve({"--nnodes=1:1", "--node_rank=0", "t.py"}).error.empty());
  CHECK(has(resolve({"--nnodes", "3:1", "t.py"}).error, "MIN <= MAX"));
  CHECK(has(resolve({"--node-rank", "1", "t.py"}).error, "--node-rank 1 needs --nnodes above 1"));
  CHECK(has(resolve({"--standalone", "--nnodes", "2", "t.py"}).error, "--standalone runs one node, and --nnodes 2"));
  CHECK(has(resolve({"--rdzv-endpoint", "other-host:29400", "t.py"}).error, "another machine"));
  CHECK(has(resolve({"--master-addr", "other-host", "t.py"}).error, "--master-addr other-host"));
  CHECK(has(resolve({"--master-addr", "nowhere", "t.py"}).error, "cannot be resolved"));
  CHECK(resolve({"--master-addr", "this-host", "t.py"}).error.empty());
}

TEST_CASE("multi-node: the endpoint, which node runs the launcher, node ranks, Slurm's defaults, refusals") {
  // The endpoint's owner runs the launcher; every other node joins it.
  Resolved here = resolve({"--nnodes", "2", "--rdzv-endpoint", "this-host", "t.py"});
  REQUIRE(here.multi);
  CHECK(here.error.empty());
  CHECK(here.multi->launcher);
  CHECK(here.multi->endpoint == "this-host:29400");
  CHECK(here.multi->min_nodes == 2);
  CHECK(here.multi->max_nodes == 2);
  CHECK(!here.multi->node_rank);
  Resolved there = resolve({"--nnodes=2:4", "--rdzv_endpoint=other-host:1234", "t.py"});
  REQUIRE(there.multi);
  CHECK(!there.multi->launcher);
  CHECK(there.multi->endpoint == "other-host:1234");
  CHECK(there.multi->min_nodes == 2);
  CHECK(there.multi->max_nodes == 4);
  // Node ranks given: rank 0 runs the launcher, and must own the endpoint.
  CHECK(resolve({"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "this-host", "t.py"}).multi->launcher == false);
  CHECK(*resolve({"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "this-host", "t.py"}).multi->node_rank == 1);
  CHECK(has(resolve({"--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "other-host", "t.py"}).error,
            "--node-rank 0 runs the launcher"));
  // --master-addr/--master-port (torchrun's static rendezvous) when there is no --rdzv-endpoint.
  Resolved master = resolve({"--nnodes", "2", "--master-addr", "other-host", "--master-port", "2222", "t.py"});
  REQUIRE(master.multi);
  CHECK(master.multi->endpoint == "other-host:2222");
  CHECK(resolve({"--nnodes", "2", "--master-addr", "this-host", "t.py"}).multi->endpoint == "this-host:29500");
  // Refusals name the option.
  CHECK(has(resolve({"--nnodes", "2", "t.py"}).error, "--nnodes 2 needs --rdzv-endpoint"));
  CHECK(has(resolve({"--nnodes", "2", "--rdzv-endpoint", "nowhere:1", "t.py"}).error, "host 'nowhere' cannot be resolved"));
  CHECK(has(resolve({"--nnodes", "2", "--rdzv-endpoint", "this-host:4242", "t.py"}).error, "port 4242 is in use"));
  CHECK(resolve({"--nnodes", "2", "--rdzv-endpoint", "other-host:4242", "t.py"}).error.empty());  // not bound here
  CHECK(has(resolve({"--nnodes", "2", "--rdzv-endpoint", "this-host", "t.py"}, 2).error, "--nodes 2 simulates"));
  CHECK(resolve({"--nnodes", "2", "--rdzv-endpoint", "this-host", "--log-dir", "L", "t.py"}).log_dir == "L");
  // --local-ranks-filter gives each node's local ranks.
  CHECK(resolve({"--nnodes", "2", "--rdzv-endpoint", "this-host", "--local-ranks-filter", "0,2", "--nproc-per-node", "3",
                 "t.py"}).console_local_ranks == std::vector<int>{0, 2});
  // Under srun: the allocation's first host and SLURM_NODEID, unless the options say otherwise.
  HostFacts slurm = facts();
  slurm.slurm_node_id = "1";
  slurm.slurm_first_host = [] { return std::string("other-host"); };
  slurm.slurm_step_nodes = "2";
  Resolved in_slurm = resolve({"t.py"}, 1, slurm);  // --nnodes from the step's node count
  REQUIRE(in_slurm.multi);
  CHECK(in_slurm.error.empty());
  CHECK(in_slurm.multi->endpoint == "other-host:29400");
  CHECK(*in_slurm.multi->node_rank == 1);
  CHECK(!in_slurm.multi->launcher);
  CHECK(in_slurm.multi->min_nodes == 2);
  CHECK(in_slurm.multi->max_nodes == 2);
  CHECK(!resolve({"--standalone", "t.py"}, 1, slurm).multi);
  slurm.slurm_step_nodes = "1";
  CHECK(!resolve({"t.py"}, 1, slurm).multi);  // a one-node step is one node
  slurm.slurm_node_id = "0";
  slurm.slurm_first_host = [] { return std::string("this-host"); };
  CHECK(resolve({"--nnodes", "2", "t.py"}, 1, slurm).multi->launcher);
  CHECK(*resolve({"--nnodes", "2", "--node-rank", "1", "t.py"}, 1, slurm).multi->node_rank == 1);
  slurm.slurm_first_host = [] { return std::string(); };
  CHECK(has(resolve({"--nnodes", "2", "t.py"}, 1, slurm).error, "under Slurm"));
  slurm.slurm_node_id = "x";
  CHECK(has(resolve({"--nnodes", "2", "t.py"}, 1, slurm).error, "SLURM_NODEID"));
}

TEST_CASE("a node's console filter: none, all, rank0, local ranks; bad text refused") {
  using dtrain::cli::run::node_console;
  using dtrain::cli::run::node_console_text;
  CHECK(node_console(node_console_text("none", {})) == nullptr);
  CHECK(node_console("all")(7, 3));
  CHECK(node_console("rank0")(0, 0));
  CHECK(!node_console("rank0")(2, 0));
  const auto locals = node_console(node_console_text("", {0, 2}));
  CHECK(node_console_text("", {0, 2}) == "local:0,2");
  CHECK(locals(5, 0));
  CHECK(locals(7, 2));
  CHECK(!locals(6, 1));
  for (const char* bad : {"local:", "local:1,,2", "local:a", "some", "local:1234567"}) {
    CHECK_THROWS_AS(node_console(bad), std::invalid_argument);
  }
}

TEST_CASE("rendezvous: backends, endpoints, ports, --rdzv-conf keys") {
  CHECK(resolve({"--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:29400", "t.py"}).error.empty());
  CHECK(resolve({"--rdzv_backend=static", "t.py"}).error.empty());
  CHECK(has(resolve({"--rdzv-backend", "etcd", "t.py"}).error, "--rdzv-backend etcd"));
  CHECK(has(resolve({"--rdzv-backend", "zookeeper", "t.py"}).error, "--rdzv-backend must be c10d or static"));
  CHECK(has(resolve({"--rdzv-endpoint", "nowhere:1", "t.py"}).error, "--rdzv-endpoint nowhere:1: host 'nowhere'"));
  CHECK(has(resolve({"--rdzv-endpoint", "localhost:99999", "t.py"}).error, "port '99999'"));
  CHECK(has(resolve({"--rdzv-endpoint", ":29400", "t.py"}).error, "no host"));
  CHECK(has(resolve({"--rdzv-endpoint", "[::1", "t.py"}).error, "not closed"));
  CHECK(has(resolve({"--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:4242", "t.py"}).error,
            "port 4242 is in use"));
  CHECK(has(resolve({"--rdzv-endpoint", "localhost", "t.py"}, 1, [] {
              HostFacts h = facts();
              h.port_free = [](const std::string&, int port) { return port == 29400 ? "is in use" : ""; };
              return h;
            }())
                .error,
            "port 29400 is in use"));  // torchrun's default c10d port
  // --standalone ignores the endpoint, as torchrun does.
  const Resolved standalone = resolve({"--standalone", "--rdzv-endpoint", "localhost:4242", "t.py"});
  CHECK(standalone.error.empty());
  CHECK(standalone.notes.size() == 1);
  CHECK(has(resolve({"--master-port", "4242", "t.py"}).error, "--master-port 4242 is in use"));
  CHECK(resolve({"--standalone", "--master-port", "4242", "t.py"}).error.empty());  // c10d: torchrun binds nothing
  CHECK(has(resolve({"--rdzv-conf", "join_timeout=5,frobnicate=1", "t.py"}).error, "key 'frobnicate'"));
  CHECK(has(resolve({"--rdzv-conf", "join_timeout=-1", "t.py"}).error, "join_timeout must be seconds > 0"));
  CHECK(has(resolve({"--rdzv-conf", "join_timeout", "t.py"}).error, "expected KEY=VALUE"));
  CHECK(resolve({"--rdzv-conf", "last_call_timeout=5,is_host=1", "t.py"}).notes.size() == 2);
}

TEST_CASE("output: --redirects, --tee, --local-ranks-filter choose the console; --console conflicts with them") {
  using C = Resolved::Console;
  CHECK(resolve({"t.py"}).console == C::unchanged);  // dtrain's default: rank 0
  CHECK(resolve({"--redirects", "3", "t.py"}).console == C::none);
  CHECK(resolve({"--redirects", "3", "--tee", "3", "t.py"}).console == C::all);
  CHECK(resolve({"-r", "1", "-t", "1", "t.py"}).console == C::all);
  const Resolved one_stream = resolve({"--redirects", "1", "t.py"});
  CHECK(one_stream.console == C::all);  // stderr still shown: dtrain shows both streams
  CHECK(one_stream.notes.size() == 1);
  const Resolved filtered = resolve({"-n", "4", "--local-ranks-filter", "1,3", "t.py"}, 2);
  CHECK(filtered.console == C::ranks);
  CHECK(filtered.console_ranks == std::vector<int>{1, 3, 5, 7});  // those local ranks on both simulated nodes
  CHECK(has(resolve({"-n", "2", "--local-ranks-filter", "2", "t.py"}).error, "--local-ranks-filter '2'"));
  CHECK(has(resolve({"--redirects", "0:1,1:2", "t.py"}).error, "per-rank map"));
  CHECK(has(resolve({"--tee", "5", "t.py"}).error, "--tee must be"));
  CHECK(has(resolve({"--console", "all", "--tee", "3", "t.py"}).error, "--console and --tee"));
  CHECK(resolve({"--log-dir", "/tmp/x", "--redirects", "3", "t.py"}).redirects == 3);
  CHECK(has(resolve({"--log-dir", "/tmp/x", "t.py"}, 2).error, "--log-dir"));
}

TEST_CASE("taken with a note, or refused: --monitor-interval, --start-method, --role") {
  const Resolved monitor = resolve({"--monitor_interval=5", "t.py"});
  CHECK(monitor.error.empty());
  REQUIRE(monitor.notes.size() == 1);
  CHECK(has(monitor.notes[0], "does not poll"));
  CHECK(resolve({"--start_method", "spawn", "t.py"}).notes.empty());
  CHECK(resolve({"--start-method", "fork", "t.py"}).notes.size() == 1);
  CHECK(has(resolve({"--start-method", "thread", "t.py"}).error, "--start-method"));
  CHECK(resolve({"--role", "default", "t.py"}).error.empty());
  CHECK(has(resolve({"--role", "trainer", "t.py"}).error, "--role trainer"));
}

TEST_CASE("unknown options before the program are refused by the parser") {
  CHECK_THROWS_AS(parse({"--bogus", "1", "t.py"}), CLI::ExtrasError);
}

TEST_CASE("HostFacts::current(): loopback is this machine, a listening port is in use") {
  const HostFacts h = HostFacts::current();
  CHECK(h.cpu_count >= 1);
  CHECK(h.local_host("127.0.0.1").empty());
  CHECK(h.local_host("localhost").empty());
  CHECK(has(h.local_host("192.0.2.1"), "not an address of this machine"));  // TEST-NET-1
  CHECK(has(h.local_host("no-such-host.invalid"), "cannot be resolved"));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(fd, 1) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  CHECK(h.port_free("127.0.0.1", port) == "is in use");
  close(fd);
  CHECK(h.port_free("127.0.0.1", port).empty());
}

TEST_CASE("--log-dir: torchrun 1.13's layout from dtrain's job directory") {
  namespace fs = std::filesystem;
  const fs::path base = fs::temp_directory_path() / ("cli-torchrun-logs-" + std::to_string(getpid()));
  fs::remove_all(base);
  const fs::path job = base / "runs" / "train-20261201-000000";
  for (const char* attempt : {"attempt_0", "attempt_1"}) {
    fs::create_directories(job / attempt);
    std::ofstream(job / attempt / "rank_0.log") << attempt << " rank 0\n";
    std::ofstream(job / attempt / "rank_1.log") << attempt << " rank 1\n";
  }
  std::ofstream(job / "attempt_0" / "rank_1_error.json") << "{}";
  const auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto run_dir = [&](const fs::path& logs) {
    std::vector<fs::path> runs;
    for (const auto& e : fs::directory_iterator(logs)) runs.push_back(e.path());
    REQUIRE(runs.size() == 1);
    const std::string name = runs[0].filename().string();
    CHECK(name.rfind("train-20261201-000000_", 0) == 0);
    CHECK(name.size() == std::string("train-20261201-000000_").size() + 8);
    return runs[0];
  };

  CHECK(dtrain::cli::run::write_torchrun_logs(job.string(), "train-20261201-000000", (base / "l1").string(), 1, 2)
            .empty());
  fs::path run = run_dir(base / "l1");
  CHECK(read(run / "attempt_0" / "0" / "stdout.log") == "attempt_0 rank 0\n");
  CHECK(read(run / "attempt_1" / "1" / "stdout.log") == "attempt_1 rank 1\n");
  CHECK(fs::exists(run / "attempt_0" / "1" / "error.json"));
  CHECK(!fs::exists(run / "attempt_0" / "0" / "error.json"));
  CHECK(!fs::exists(run / "attempt_0" / "0" / "stderr.log"));

  CHECK(dtrain::cli::run::write_torchrun_logs(job.string(), "train-20261201-000000", (base / "l2").string(), 2, 2)
            .empty());
  run = run_dir(base / "l2");
  CHECK(read(run / "attempt_0" / "0" / "stderr.log") == "attempt_0 rank 0\n");
  CHECK(!fs::exists(run / "attempt_0" / "0" / "stdout.log"));

  CHECK(dtrain::cli::run::write_torchrun_logs(job.string(), "train-20261201-000000", (base / "l3").string(), 3, 2)
            .empty());
  run = run_dir(base / "l3");
  CHECK(read(run / "attempt_1" / "0" / "stdout.log") == "attempt_1 rank 0\n");
  CHECK(read(run / "attempt_1" / "0" / "stderr.log").empty());

  CHECK(dtrain::cli::run::write_torchrun_logs(job.string(), "train-20261201-000000", (base / "l0").string(), 0, 2)
            .empty());
  run = run_dir(base / "l0");
  CHECK(fs::is_directory(run / "attempt_1" / "1"));
  CHECK(fs::is_empty(run / "attempt_1" / "1"));

  CHECK(dtrain::cli::run::write_torchrun_logs((base / "none").string(), "x", (base / "l4").string(), 1, 2) ==
        "no attempt_<n> directory under " + (base / "none").string());
  fs::remove_all(base);
}
