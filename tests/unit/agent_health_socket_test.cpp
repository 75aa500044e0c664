#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/job/evidence.h"
#include "agent/service/health_socket.h"
#include "agent/health/report_values.h"

using namespace dtrain;
using namespace dtrain::agent;

namespace {

// Sends `bytes` as one datagram to the socket at `path`.
void send_to(const std::string& path, const std::string& bytes) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  REQUIRE(::sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&address), sizeof address) ==
          static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

template <class Done>
bool eventually_true(Done done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

const char* kGood = R"({"rank":3,"token":"job","report_token":"r3","step":41,"steps_done":7,"loss":2.5,)"
                    R"("tokens_per_s":100.0,"rss_bytes":4096,"step_ms":90.5,"data_wait_ms":3.0,"compute_ms":70.0,)"
                    R"("comm_exposed_ms":17.5,"samples_per_s":12.5,"device_mem_used_bytes":6442450944,)"
                    R"("device_mem_peak_bytes":5368709120,"device_mem_total_bytes":85899345920,)"
                    R"("phase":"forward","dump_signal":12,"unknown_field":[1,2]})";

}  // namespace

TEST_CASE("a datagram's JSON becomes the report it describes") {
  const Result<HealthDatagram> parsed = parse_health_datagram(kGood);
  REQUIRE(parsed.ok());
  const v1::WorkerReport& r = parsed.value.report;
  CHECK(parsed.value.token == "job");
  CHECK(parsed.value.report_token == "r3");
  CHECK(r.rank() == 3);
  CHECK(r.step() == 41);
  CHECK(r.steps_done() == 7);
  CHECK(r.loss() == 2.5);
  CHECK(r.tokens_per_s() == 100.0);
  CHECK(r.rss_bytes() == 4096);
  CHECK(r.step_ms() == 90.5);
  CHECK(r.data_wait_ms() == 3.0);
  CHECK(r.compute_ms() == 70.0);
  CHECK(r.comm_exposed_ms() == 17.5);
  CHECK(r.samples_per_s() == 12.5);
  CHECK(r.device_mem_used_bytes() == 6442450944);
  CHECK(r.device_mem_peak_bytes() == 5368709120);
  CHECK(r.device_mem_total_bytes() == 85899345920);
  CHECK(r.phase() == "forward");
  CHECK(r.dump_signal() == 12);
  CHECK_FALSE(r.exiting());   // absent: not the last report
  CHECK(check_report_values(r).ok());
}

TEST_CASE("the model's fields, as the Python instrumentation sends them, parse into the report") {
  const Result<HealthDatagram> parsed = parse_health_datagram(
      R"({"rank":3,"model_params":124475904,"model_flops_per_token":746855424.0,"device_name":"NVIDIA H200"})");
  REQUIRE(parsed.ok());
  CHECK(parsed.value.report.model_params() == 124475904);
  CHECK(parsed.value.report.model_flops_per_token() == 746855424.0);
  CHECK(parsed.value.report.device_name() == "NVIDIA H200");
  CHECK(check_report_values(parsed.value.report).ok());
}

TEST_CASE("\"exiting\": true marks a process's last report; false or absent does not") {
  const Result<HealthDatagram> last = parse_health_datagram(R"({"rank":2,"step":100,"steps_done":100,"exiting":true})");
  REQUIRE(last.ok());
  CHECK(last.value.report.exiting());
  CHECK(last.value.report.step() == 100);
  CHECK(check_report_values(last.value.report).ok());
  const Result<HealthDatagram> not_last = parse_health_datagram(R"({"rank":2,"exiting":false})");
  REQUIRE(not_last.ok());
  CHECK_FALSE(not_last.value.report.exiting());
}

TEST_CASE("\"quiet\": true marks a report sent as the process enters a call that stops its reporter") {
  const Result<HealthDatagram> quiet = parse_health_datagram(R"({"rank":2,"phase":"init","quiet":true})");
  REQUIRE(quiet.ok());
  CHECK(quiet.value.report.quiet());
  CHECK_FALSE(quiet.value.report.exiting());
  const Result<HealthDatagram> loud = parse_health_datagram(R"({"rank":2,"quiet":false})");
  REQUIRE(loud.ok());
  CHECK_FALSE(loud.value.report.quiet());
  const Result<HealthDatagram> absent = parse_health_datagram(R"({"rank":2})");
  REQUIRE(absent.ok());
  CHECK_FALSE(absent.value.report.quiet());
}

TEST_CASE("datagrams that are not reports are refused with what is wrong") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not JSON"},
      {"[1,2,3]", "not a JSON object"},
      {R"({"token":"job"})", "\"rank\""},
      {R"({"rank":-1})", "\"rank\""},
      {R"({"rank":4294967296})", "\"rank\""},
      {R"({"rank":1,"token":5})", "\"token\""},
      {R"({"rank":1,"step":-3})", "\"step\""},
      {R"({"rank":1,"step":1.5})", "\"step\""},
      {R"({"rank":1,"loss":"2"})", "\"loss\""},
      {R"({"rank":1,"samples_per_s":"8"})", "\"samples_per_s\""},
      {R"({"rank":1,"device_mem_peak_bytes":-1})", "\"device_mem_peak_bytes\""},
      {R"({"rank":1,"device_mem_peak_bytes":1.5e9})", "\"device_mem_peak_bytes\""},
      {R"({"rank":1,"phase":7})", "\"phase\""},
      {R"({"rank":1,"model_params":-124})", "\"model_params\""},
      {R"({"rank":1,"model_params":1.5e8})", "\"model_params\""},
      {R"({"rank":1,"model_flops_per_token":"7e8"})", "\"model_flops_per_token\""},
      {R"({"rank":1,"device_name":["NVIDIA H200"]})", "\"device_name\""},
      {R"({"rank":1,"exiting":1})", "field \"exiting\" is not a boolean"},
      {R"({"rank":1,"exiting":"true"})", "field \"exiting\" is not a boolean"},
      {R"({"rank":1,"exiting":null})", "field \"exiting\" is not a boolean"},
      {R"({"rank":1,"quiet":1})", "field \"quiet\" is not a boolean"},
      {R"({"rank":1,"quiet":"true"})", "field \"quiet\" is not a boolean"},
      {R"({"rank":1,"loss":NaN})", "not JSON"},
  };
  for (const auto& [bytes, named] : cases) {
    const Result<HealthDatagram> parsed = parse_health_datagram(bytes);
    CHECK_MESSAGE(!parsed.ok(), bytes);
    CHECK_MESSAGE(parsed.status.message().find(named) != std::string::npos, bytes, ": ", parsed.status.message());
  }
}

TEST_CASE("numbers JSON cannot hold are refused; values out of bounds parse, and the value check refuses them") {
  CHECK(!parse_health_datagram(R"({"rank":1,"loss":1e999})").ok());   // no infinite loss through JSON
  CHECK(!parse_health_datagram(R"({"rank":1,"samples_per_s":1e999})").ok());
  const std::pair<const char*, const char*> out_of_bounds[] = {
      {R"({"rank":1,"step_ms":1e300})", "step_ms"},
      {R"({"rank":1,"tokens_per_s":-1})", "tokens_per_s"},
      {R"({"rank":1,"samples_per_s":-1})", "samples_per_s"},
      {R"({"rank":1,"device_mem_peak_bytes":1125899906842625})", "device_mem_peak_bytes"},
      {R"({"rank":1,"dump_signal":65})", "dump_signal"},
      {R"({"rank":1,"step":18446744073709551615})", "step"},
      {R"({"rank":1,"model_params":18446744073709551615})", "model_params"},
      {R"({"rank":1,"model_flops_per_token":-6})", "model_flops_per_token"},
      {R"({"rank":1,"model_flops_per_token":1e30})", "model_flops_per_token"},
  };
  for (const auto& [bytes, named] : out_of_bounds) {
    const Result<HealthDatagram> parsed = parse_health_datagram(bytes);
    REQUIRE_MESSAGE(parsed.ok(), bytes);
    const Status refused = check_report_values(parsed.value.report);
    CHECK_MESSAGE(!refused.ok(), bytes);
    CHECK_MESSAGE(refused.message().find(named) != std::string::npos, bytes, ": ", refused.message());
  }
}

TEST_CASE("the socket hands good datagrams to its sink and drops and counts the rest") {
  const std::string dir = std::filesystem::temp_directory_path() / ("dtrain-hs-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::mutex mutex;
  std::vector<HealthDatagram> got;
  auto socket = std::make_unique<HealthSocket>(dir + "/socket", [&](const HealthDatagram& d) -> Status {
    if (d.token != "job") return {StatusCode::permission_denied, "not this round's token"};
    if (d.report.rank() == 4) return {StatusCode::failed_precondition, "sent by another process"};
    std::lock_guard lock(mutex);
    got.push_back(d);
    return {};
  });
  send_to(socket->path(), "garbage");
  send_to(socket->path(), std::string(kMaxHealthDatagram + 1, '{'));
  send_to(socket->path(), R"({"rank":3,"token":"forged","report_token":"r3"})");
  send_to(socket->path(), R"({"rank":4,"token":"job","report_token":"r4"})");
  send_to(socket->path(), R"({"rank":4,"token":"job","report_token":"r4"})");
  for (int i = 0; i < 3; ++i) send_to(socket->path(), kGood);
  CHECK(eventually_true([&] { return socket->accepted() == 3; }));
  CHECK(socket->dropped(HealthSocket::Drop::malformed) == 1);
  CHECK(socket->dropped(HealthSocket::Drop::oversized) == 1);
  CHECK(socket->dropped(HealthSocket::Drop::refused) == 1);
  CHECK(socket->dropped(HealthSocket::Drop::other_process) == 2);   // counted apart from forged tokens
  {
    std::lock_guard lock(mutex);
    REQUIRE(got.size() == 3);
    CHECK(got[0].sender == ::getpid());   // the kernel's word, not the datagram's
    CHECK(got[0].report.step() == 41);
    CHECK(got[0].report.samples_per_s() == 12.5);
    CHECK(got[0].report.device_mem_peak_bytes() == 5368709120);
  }
  const std::string path = socket->path();
  socket.reset();
  CHECK(!std::filesystem::exists(path));
  std::filesystem::remove_all(dir);
}

TEST_CASE("drain() returns once what was queued, and what the receiver was handing over, reached the sink") {
  const std::string dir = std::filesystem::temp_directory_path() / ("dtrain-hs-drain-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::uint64_t> steps;
  bool in_first = false;
  bool release = false;
  auto socket = std::make_unique<HealthSocket>(dir + "/socket", [&](const HealthDatagram& d) -> Status {
    std::unique_lock lock(mutex);
    if (d.report.step() == 1) {   // the receiver's thread holds the first one until the test lets it go
      in_first = true;
      changed.notify_all();
      changed.wait(lock, [&] { return release; });
    }
    steps.push_back(d.report.step());
    return {};
  });
  const auto report = [](int step) {
    return R"({"rank":3,"token":"job","report_token":"r3","step":)" + std::to_string(step) + "}";
  };
  send_to(socket->path(), report(1));
  {
    std::unique_lock lock(mutex);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return in_first; }));
  }
  send_to(socket->path(), report(2));
  send_to(socket->path(), report(3));
  std::atomic<bool> drained{false};
  std::vector<std::uint64_t> at_return;
  std::thread drainer([&] {
    socket->drain();
    std::lock_guard lock(mutex);
    at_return = steps;
    drained = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(drained.load());   // it waits for the datagram the receiver is handing over
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  changed.notify_all();
  drainer.join();
  CHECK(at_return == std::vector<std::uint64_t>{1, 2, 3});
  socket.reset();
  std::filesystem::remove_all(dir);
}

TEST_CASE("a path too long for a socket address is refused with the fix") {
  try {
    HealthSocket socket("/tmp/" + std::string(200, 'x'), [](const HealthDatagram&) { return Status{}; });
    FAIL("a 200-byte socket path was bound");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("XDG_RUNTIME_DIR or TMPDIR") != std::string::npos);
  }
}

TEST_CASE("a faulthandler dump's top frames are its main thread's, innermost first") {
  const std::string dump =
      "Thread 0x00007f0c7a1ff640 (most recent call first):\n"
      "  File \"/usr/lib/python3/threading.py\", line 324 in wait\n"
      "  File \"/x/dtrain_health.py\", line 140 in _run\n"
      "\n"
      "Current thread 0x00007f0c8b2a4740 (most recent call first):\n"
      "  File \"/tmp/train.py\", line 10 in stuck_in_data_loader\n"
      "  File \"/tmp/train.py\", line 20 in <module>\n";
  const std::vector<std::string> frames = python_top_frames(dump);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0] == "File \"/tmp/train.py\", line 10 in stuck_in_data_loader");
  CHECK(frames[1] == "File \"/tmp/train.py\", line 20 in <module>");
  CHECK(python_top_frames("").empty());
  CHECK(python_top_frames("Thread 0x1 (most recent call first):\n").empty());
}
