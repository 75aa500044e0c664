#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/controller/observe/control_socket.h"
#include "cli/controller/observe/events.h"
#include "cli/controller/observe/job_status.h"
#include "temp_dir.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {

std::vector<nlohmann::ordered_json> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::ordered_json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::ordered_json::parse(line));
  return out;
}

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  return a;
}

// A client of the Unix socket at `path` that has read nothing yet; -1 when it could not connect.
int connect_to(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  const sockaddr_un a = unix_address(path);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return fd;
  ::close(fd);
  return -1;
}

}  // namespace

TEST_CASE("event log: one JSON object per line with ts and event first, appended, bytes that are not UTF-8 replaced") {
  TempDir dir("events");
  {
    EventLog log;
    REQUIRE(log.open(dir.file("events.jsonl")).ok());
    CHECK(log.write("job_start", {{"job", "j-1"}}, 1000).ok());
    CHECK(log.write("worker_exited", {{"rank", 3}, {"exit", std::string("bad \xff byte")}}, 1001).ok());
  }
  EventLog again;
  REQUIRE(again.open(dir.file("events.jsonl")).ok());
  CHECK(again.write("job_end", {{"outcome", "succeeded"}}, 1002).ok());
  const auto lines = lines_of(dir.file("events.jsonl"));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].begin().key() == "ts");
  CHECK(lines[0]["event"] == "job_start");
  CHECK(lines[0]["job"] == "j-1");
  CHECK(lines[1]["rank"] == 3);
  CHECK(lines[1]["exit"] == "bad \xEF\xBF\xBD byte");
  CHECK(lines[2]["ts"] == 1002);
  CHECK(lines[2]["outcome"] == "succeeded");
}

TEST_CASE("event log: an unwritable path is an error that names it; without a log writes do nothing") {
  EventLog log;
  const auto s = log.open("/nonexistent-dir/events.jsonl");
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("/nonexistent-dir/events.jsonl") != std::string::npos);
  CHECK(log.write("x", {}, 1).ok());
}

TEST_CASE("control socket: 0600, serves a snapshot made on demand, removed when closed") {
  TempDir dir("control");
  auto socket = ControlSocket::listen(dir.path);
  REQUIRE(socket.ok());
  struct stat st {};
  REQUIRE(::stat(dir.file(kControlSocketName).c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  // Nobody asked: nothing to make. Then each client is answered with a snapshot made after it connected, as the
  // launcher's loop does it (JobMonitor::answer_status_clients).
  CHECK_FALSE(socket.value->wanted());
  socket.value->publish(R"({"job":"old"})");
  std::atomic<bool> done{false};
  std::atomic<int> made{0};
  std::thread loop([&] {
    while (!done) {
      if (socket.value->wanted()) socket.value->publish(R"({"job":")" + std::to_string(++made) + "\"}");
      std::this_thread::sleep_for(10ms);
    }
  });
  auto first = read_control_socket(dir.path, 5s);
  REQUIRE(first.ok());
  CHECK(first.value == R"({"job":"1"})");
  CHECK(read_control_socket(dir.path, 5s).value == R"({"job":"2"})");
  done = true;
  loop.join();
  CHECK(made == 2);
  CHECK_FALSE(socket.value->wanted());
  // A loop that does not answer: the client gets the last snapshot after kFreshWait.
  const auto began = std::chrono::steady_clock::now();
  CHECK(read_control_socket(dir.path, 5s).value == R"({"job":"2"})");
  CHECK(std::chrono::steady_clock::now() - began >= ControlSocket::kFreshWait);
  socket.value.reset();
  CHECK(::access(dir.file(kControlSocketName).c_str(), F_OK) != 0);
  CHECK(read_control_socket(dir.path, 2s).status.code() == dtrain::StatusCode::not_found);
}

TEST_CASE("control socket: a client that connects and never reads does not hold up the next one for long") {
  TempDir dir("control-stuck");
  auto socket = ControlSocket::listen(dir.path);
  REQUIRE(socket.ok());
  // A snapshot far larger than the socket's buffers: the stuck client's write blocks until its budget runs out.
  socket.value->publish(std::string(64 << 20, 'x'));
  const int stuck = connect_to(dir.file(kControlSocketName));
  REQUIRE(stuck >= 0);
  const auto began = std::chrono::steady_clock::now();
  auto answer = read_control_socket(dir.path, 5s);
  const auto took = std::chrono::steady_clock::now() - began;
  ::close(stuck);
  REQUIRE(answer.ok());
  CHECK(answer.value.size() == (64u << 20));
  CHECK(took < 2 * ControlSocket::kFreshWait + ControlSocket::kClientBudget + 2s);
}

TEST_CASE("control socket: a client that reads slowly but steadily gets the whole snapshot") {
  TempDir dir("control-slow");
  auto socket = ControlSocket::listen(dir.path);
  REQUIRE(socket.ok());
  const std::size_t size = 4 << 20;
  socket.value->publish(std::string(size, 'x'));
  const int fd = connect_to(dir.file(kControlSocketName));
  REQUIRE(fd >= 0);
  // 256 KiB every 100 ms: 1.6 s in all, longer than kClientBudget, but never that long without reading.
  std::vector<char> chunk(256 << 10);
  std::size_t got = 0;
  while (true) {
    const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), MSG_WAITALL);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
    std::this_thread::sleep_for(100ms);
  }
  ::close(fd);
  CHECK(got == size);
}

TEST_CASE("control socket: 30 clients that never read, with a 64 MiB snapshot, do not hold up the next one") {
  TempDir dir("control-idle");
  auto socket = ControlSocket::listen(dir.path);
  REQUIRE(socket.ok());
  socket.value->publish(std::string(64 << 20, 'x'));
  const std::string path = dir.file(kControlSocketName);
  std::vector<int> idle;
  for (int i = 0; i < 30; ++i) {
    const int fd = connect_to(path);
    REQUIRE(fd >= 0);
    idle.push_back(fd);
  }
  // Served one after another, each idle client would take its kClientBudget: 30 s before the next.
  const auto began = std::chrono::steady_clock::now();
  auto answer = read_control_socket(dir.path, 10s);
  const auto took = std::chrono::steady_clock::now() - began;
  for (int fd : idle) ::close(fd);
  REQUIRE_MESSAGE(answer.ok(), answer.status.message());
  CHECK(answer.value.size() == (64u << 20));
  CHECK(took < ControlSocket::kFreshWait + ControlSocket::kClientBudget + 2s);
}

TEST_CASE("control socket: what each failure to connect means for the launcher") {
  TempDir dir("control-errors");
  auto gone = read_control_socket(dir.path, 1s);
  CHECK(gone.status.code() == dtrain::StatusCode::not_found);
  CHECK(gone.status.message().find("the launcher has ended, or never started") != std::string::npos);
  // A socket file nobody listens on: what a SIGKILLed launcher leaves.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  const sockaddr_un a = unix_address(dir.file(kControlSocketName));
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
  ::close(fd);
  auto dead = read_control_socket(dir.path, 1s);
  CHECK(dead.status.code() == dtrain::StatusCode::unavailable);
  CHECK(dead.status.message().find("nobody listens: the launcher is gone") != std::string::npos);
}

TEST_CASE("job status: planned ranks start as starting; reports, exits and the diagnoses make the snapshot") {
  dtrain::spec::Plan plan;
  for (unsigned r = 0; r < 2; ++r) {
    dtrain::spec::WorkerPlan w;
    w.rank = r;
    w.node_rank = r;
    w.host = "h" + std::to_string(r);
    plan.workers.push_back(w);
  }
  JobStatus status("job-1");
  status.round_started(0, plan);
  status.started(WorkerStarted{0, 0, 4242});
  WorkerHealth h;
  h.rank = 0;
  h.step = 9;
  h.step_ms = 100;
  h.tokens_per_s = 512;
  h.samples_per_s = 4;
  h.rss_bytes = 1 << 20;
  h.device_mem_used_bytes = 6ull << 30;
  h.device_mem_peak_bytes = 5ull << 30;
  h.device_mem_total_bytes = 80ull << 30;
  h.mem_params_bytes = 1000;
  h.mem_grads_bytes = 2000;
  h.mem_optim_bytes = 3000;
  h.mem_activations_bytes = 4000;
  status.reported(h, 10'000);
  WorkerExit x;
  x.rank = 1;
  x.pid = 7;
  x.exit_code = 3;
  status.exited(x);
  Diagnoser d(1.2);
  d.hang(1, "stopped reporting");
  const auto s = status.snapshot("running", d, 12'500);
  CHECK(s["job"] == "job-1");
  CHECK(s["state"] == "running");
  REQUIRE(s["ranks"].size() == 2);
  CHECK(s["ranks"][0]["pid"] == 4242);
  CHECK(s["ranks"][0]["state"] == "running");
  CHECK(s["ranks"][0]["step"] == 9);
  CHECK(s["ranks"][0]["tokens_per_s"] == 512.0);
  CHECK(s["ranks"][0]["samples_per_s"] == 4.0);
  CHECK(s["ranks"][0]["device_mem_used_bytes"] == 6ull << 30);
  CHECK(s["ranks"][0]["device_mem_peak_bytes"] == 5ull << 30);
  CHECK(s["ranks"][0]["device_mem_total_bytes"] == 80ull << 30);
  CHECK(s["ranks"][0]["mem_params_bytes"] == 1000);  // what it holds, for `dtrain plan --from`
  CHECK(s["ranks"][0]["mem_grads_bytes"] == 2000);
  CHECK(s["ranks"][0]["mem_optim_bytes"] == 3000);
  CHECK(s["ranks"][0]["mem_activations_bytes"] == 4000);
  CHECK(s["ranks"][1]["samples_per_s"] == 0.0);   // never reported: 0, "not known"
  CHECK(s["ranks"][1]["device_mem_peak_bytes"] == 0);
  CHECK(s["ranks"][0]["report_age_s"] == 2.5);
  CHECK(s["ranks"][1]["state"] == "failed");
  CHECK(s["ranks"][1]["report_age_s"].is_null());
  REQUIRE(s["diagnoses"].size() == 1);
  CHECK(s["diagnoses"][0]["kind"] == "hang");
  CHECK(s["diagnoses"][0]["ranks"] == nlohmann::json::array({1}));
  CHECK(s["ranks"][0]["exiting"] == false);
  // Rank 0's last report: it is exiting from then on, even after a heartbeat its reporter sent later.
  h.exiting = true;
  status.reported(h, 13'000);
  h.exiting = false;
  status.reported(h, 13'100);
  const auto after = status.snapshot("running", d, 13'500);
  CHECK(after["ranks"][0]["exiting"] == true);
  CHECK(after["ranks"][0]["state"] == "running");   // the state names are unchanged: its exit is not known yet
  CHECK(after["ranks"][0]["step"] == 9);
  CHECK(after["ranks"][1]["exiting"] == false);
}
