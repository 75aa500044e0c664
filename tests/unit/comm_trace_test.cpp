// The collective trace (trainer/comm/trace.h): sequence numbers, what is pending, the dump a signal handler writes
// (every line, oldest first, the last 2,000 only), and the Gloo communicator recording its collectives.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/unit/gloo_ranks.h"
#include "trainer/comm/trace.h"

using dtrain::trainer::CollectiveTrace;

namespace {

// What write_to / write_all_traces put into a memory file.
template <typename Write>
std::string dumped(Write write) {
  const int fd = memfd_create("trace", 0);
  REQUIRE(fd >= 0);
  write(fd);
  std::string out(static_cast<std::size_t>(lseek(fd, 0, SEEK_END)), '\0');
  pread(fd, out.data(), out.size(), 0);
  close(fd);
  return out;
}

int count_lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("a trace numbers collectives, says which is pending and dumps one line each") {
  CollectiveTrace trace("test communicator");
  CHECK(trace.summary().issued == 0);
  const auto a = trace.issue("allreduce of 4 floats");
  const auto b = trace.issue("broadcast of 8 floats from rank 0");
  CHECK(a == 1);
  CHECK(b == 2);
  trace.started(a);
  trace.finished(a);
  trace.started(b);
  const auto summary = trace.summary();
  CHECK(summary.issued == 2);
  CHECK(summary.started == 2);
  CHECK(summary.finished == 1);
  CHECK(summary.pending == "broadcast of 8 floats from rank 0");

  const std::string dump = dumped([&](int fd) { trace.write_to(fd); });
  CHECK(dump.find("collectives of test communicator: issued 2, started 2, finished 1\n") == 0);
  CHECK(dump.find("#1 allreduce of 4 floats: issued at ") != std::string::npos);
  CHECK(dump.find(", finished at ") != std::string::npos);
  CHECK(dump.find("#2 broadcast of 8 floats from rank 0: issued at ") != std::string::npos);
  CHECK(dump.find(", not finished\n") != std::string::npos);
  CHECK(count_lines(dump) == 3);

  const auto c = trace.issue(std::string(500, 'x'));   // cut to the slot's size
  CHECK(trace.summary().pending == "broadcast of 8 floats from rank 0");
  trace.finished(b);
  CHECK(trace.summary().pending == std::string(CollectiveTrace::kWhatBytes - 1, 'x'));
  CHECK(dumped([&](int fd) { trace.write_to(fd); }).find(", not started\n") != std::string::npos);
  trace.started(c);
  trace.finished(c);
  CHECK(trace.summary().pending.empty());
}

TEST_CASE("a trace keeps the last 2,000 collectives") {
  CollectiveTrace trace("ring");
  for (int i = 0; i < 2500; ++i) {
    const auto seq = trace.issue("allreduce " + std::to_string(i + 1));
    trace.started(seq);
    trace.finished(seq);
  }
  const std::string dump = dumped([&](int fd) { trace.write_to(fd); });
  CHECK(count_lines(dump) == 1 + 2000);
  CHECK(dump.find("#500 ") == std::string::npos);
  CHECK(dump.find("#501 allreduce 501: ") != std::string::npos);
  CHECK(dump.find("#2500 allreduce 2500: ") != std::string::npos);
}

TEST_CASE("every live trace is dumped; a destroyed one is not") {
  std::string dump;
  {
    CollectiveTrace one("first"), two("second");
    dump = dumped([](int fd) { dtrain::trainer::write_all_traces(fd); });
    CHECK(dump.find("collectives of first:") != std::string::npos);
    CHECK(dump.find("collectives of second:") != std::string::npos);
  }
  dump = dumped([](int fd) { dtrain::trainer::write_all_traces(fd); });
  CHECK(dump.find("collectives of first:") == std::string::npos);
}

TEST_CASE("the Gloo communicator records its collectives in the process's traces") {
  GlooRanks ranks("comm-trace-test-token");
  std::vector<std::string> dumps(2);
  on_ranks(ranks, 2, "trace/", [&](int rank, dtrain::trainer::GlooCommunicator& comm) {
    std::vector<float> data(16, 1.0f);
    for (int i = 0; i < 3; ++i) comm.allreduce(data.data(), data.size())->wait();
    comm.broadcast(data.data(), data.size(), 0)->wait();
    dumps[rank] = dumped([](int fd) { dtrain::trainer::write_all_traces(fd); });
  });
  // Both ranks' communicators are alive in this process while either dumps: at least its own is there.
  for (const std::string& dump : dumps) {
    CHECK(dump.find("collectives of gloo communicator: issued 4, started 4, finished 4") != std::string::npos);
    CHECK(dump.find("#3 allreduce of 16 floats") != std::string::npos);
    CHECK(dump.find("#4 broadcast of 16 floats") != std::string::npos);
  }
}
