#include <doctest/doctest.h>

#include <algorithm>

#include "cli/controller/diagnose/diagnosis.h"

using namespace dtrain::controller;
using dtrain::report::RankSample;

namespace {

// A step of `own` ms of own work split as data/compute/optimizer, in a step of `step_ms` with `comm` exposed.
RankSample step(std::uint64_t n, double data, double compute, double optimizer, double comm, double step_ms) {
  RankSample s;
  s.step = n;
  s.data_wait_ms = data;
  s.compute_ms = compute;
  s.optimizer_ms = optimizer;
  s.comm_exposed_ms = comm;
  s.step_ms = step_ms;
  return s;
}

// Feeds `windows` evaluations of kMinWindowSteps steps each: every rank gets sample(rank, step), then evaluate().
template <class Sample>
void run_windows(Diagnoser& d, unsigned ranks, int windows, Sample sample, std::uint64_t& next_step) {
  for (int w = 0; w < windows; ++w) {
    for (std::size_t i = 0; i < Diagnoser::kMinWindowSteps; ++i, ++next_step) {
      for (unsigned r = 0; r < ranks; ++r) d.add(r, sample(r, next_step));
    }
    d.evaluate();
  }
}

std::vector<Diagnosis> of_kind(const Diagnoser& d, DiagnosisKind kind) {
  std::vector<Diagnosis> out;
  for (const auto& x : d.diagnoses()) {
    if (x.kind == kind) out.push_back(x);
  }
  return out;
}

Diagnoser placed(double ratio, unsigned ranks) {
  Diagnoser d(ratio);
  for (unsigned r = 0; r < ranks; ++r) d.place(r, RankPlace{r / 2, "host" + std::to_string(r / 2), 8});
  return d;
}

}  // namespace

TEST_CASE("a rank whose data wait makes its own work 40% above the median is named after 3 windows, with its node") {
  Diagnoser d = placed(1.2, 4);
  std::uint64_t n = 1;
  // Synchronous DDP: every rank's step is 100 ms; rank 2 spends 38 ms waiting for data, its peers 3 ms. Its peers
  // wait for it in the gradient reduction (their exposed comm is higher), so the step time cannot tell it apart.
  const auto sample = [](unsigned r, std::uint64_t s) {
    return r == 2 ? step(s, 38, 55, 7, 0, 100) : step(s, 3, 55, 7, 35, 100);
  };
  run_windows(d, 4, 2, sample, n);
  CHECK(of_kind(d, DiagnosisKind::straggler).empty());   // two windows: not yet
  run_windows(d, 4, 1, sample, n);
  const auto found = of_kind(d, DiagnosisKind::straggler);
  REQUIRE(found.size() == 1);
  CHECK(found[0].ranks == std::vector<unsigned>{2});
  // (38 + 55 + 7) / (3 + 55 + 7) = 1.54: 54% slower.
  CHECK(found[0].message ==
        "rank 2 on node 1 (host1) was 54% slower than the median: 38% of its step was data wait (the median rank's: 3%)");
  CHECK(found[0].fix.find("data loader") != std::string::npos);
  CHECK(found[0].fix.find("node 1") != std::string::npos);
}

TEST_CASE("an even window in between resets the count; stragglers stay named once found") {
  Diagnoser d = placed(1.2, 3);
  std::uint64_t n = 1;
  const auto slow = [](unsigned r, std::uint64_t s) { return r == 0 ? step(s, 1, 80, 5, 0, 90) : step(s, 1, 50, 5, 30, 90); };
  const auto even = [](unsigned, std::uint64_t s) { return step(s, 1, 50, 5, 30, 90); };
  run_windows(d, 3, 2, slow, n);
  run_windows(d, 3, 1, even, n);
  run_windows(d, 3, 2, slow, n);
  CHECK(of_kind(d, DiagnosisKind::straggler).empty());
  run_windows(d, 3, 1, slow, n);
  const auto found = of_kind(d, DiagnosisKind::straggler);
  REQUIRE(found.size() == 1);
  CHECK(found[0].ranks == std::vector<unsigned>{0});
  CHECK(found[0].message.find("of its step was compute") != std::string::npos);
  CHECK(found[0].fix.find("throttled device, or CPU contention on node 0") != std::string::npos);
  run_windows(d, 3, 4, even, n);
  CHECK(of_kind(d, DiagnosisKind::straggler).size() == 1);
}

TEST_CASE("just under the ratio is not a straggler; a higher straggler_ratio names fewer ranks") {
  std::uint64_t n = 1;
  // Rank 1's own work is 1.15x the median.
  const auto sample = [](unsigned r, std::uint64_t s) { return r == 1 ? step(s, 0, 115, 0, 0, 120) : step(s, 0, 100, 0, 5, 120); };
  Diagnoser strict = placed(1.1, 4);
  run_windows(strict, 4, 3, sample, n);
  CHECK(of_kind(strict, DiagnosisKind::straggler).size() == 1);
  Diagnoser lenient = placed(1.2, 4);
  run_windows(lenient, 4, 3, sample, n);
  CHECK(of_kind(lenient, DiagnosisKind::straggler).empty());
}

TEST_CASE("with two ranks the slower is compared with its peer, not with a median that includes itself") {
  Diagnoser d = placed(1.2, 2);
  std::uint64_t n = 1;
  run_windows(d, 2, 3, [](unsigned r, std::uint64_t s) { return step(s, 0, r == 1 ? 150 : 100, 0, 0, 150); }, n);
  const auto found = of_kind(d, DiagnosisKind::straggler);
  REQUIRE(found.size() == 1);
  CHECK(found[0].ranks == std::vector<unsigned>{1});
  CHECK(found[0].message.find("50% slower") != std::string::npos);
}

TEST_CASE("ranks waiting for a straggler: their jitter of a few ms is no straggler; the slow rank is, by data wait") {
  // As measured with 4 gloo DDP ranks whose rank 2's DataLoader sleeps 100 ms a batch: every step is ~106 ms; ranks
  // 0, 1 and 3 spend ~105 ms of it waiting in the gradient reduction and ~1 ms on their own work, with hiccups of up
  // to 3 ms (2-3x their median, though the job never waits for them); rank 2 waits ~100 ms for data.
  Diagnoser d = placed(1.2, 4);
  std::uint64_t n = 1;
  bool first_half = true;
  const auto sample = [&](unsigned r, std::uint64_t s) {
    if (r == 2) return step(s, 100, 0.8, 0.3, 4.5, 106);
    // For 3 windows rank 1's data wait hiccups (3.3 ms of own work: 230% above the median of 1 ms), then for 3
    // more rank 0's compute does (1.35 ms: 35% above); the other waiting ranks stay at 1 ms.
    const double data = first_half && r == 1 ? 2.4 : 0.1;
    const double compute = !first_half && r == 0 ? 0.95 : 0.6;
    return step(s, data, compute, 0.3, 106 - data - compute - 0.3, 106);
  };
  run_windows(d, 4, Diagnoser::kStragglerWindows, sample, n);
  first_half = false;
  run_windows(d, 4, Diagnoser::kStragglerWindows, sample, n);
  const auto found = of_kind(d, DiagnosisKind::straggler);
  REQUIRE(found.size() == 1);
  CHECK(found[0].ranks == std::vector<unsigned>{2});
  CHECK(found[0].message.find("94% of its step was data wait") != std::string::npos);
  CHECK(found[0].fix.find("data loader") != std::string::npos);
}

TEST_CASE("an excess of own work above the ratio but small against the step names nobody") {
  // Rank 3's own work is 1.5x the median's, but the 5 ms it adds is 5% of the 100 ms step: under the 10% floor.
  Diagnoser d = placed(1.2, 4);
  std::uint64_t n = 1;
  run_windows(d, 4, 6, [](unsigned r, std::uint64_t s) {
    return r == 3 ? step(s, 1, 12, 2, 85, 100) : step(s, 1, 7, 2, 90, 100);
  }, n);
  CHECK(of_kind(d, DiagnosisKind::straggler).empty());
  // The same ranks with 11 ms more (11% of the step) are named.
  Diagnoser wide = placed(1.2, 4);
  run_windows(wide, 4, 3, [](unsigned r, std::uint64_t s) {
    return r == 3 ? step(s, 1, 18, 2, 79, 100) : step(s, 1, 7, 2, 90, 100);
  }, n);
  const auto found = of_kind(wide, DiagnosisKind::straggler);
  REQUIRE(found.size() == 1);
  CHECK(found[0].ranks == std::vector<unsigned>{3});
  CHECK(found[0].message.find("of its step was compute") != std::string::npos);
}

TEST_CASE("the cause is a part of own work, never exposed communication") {
  // Rank 1 has more compute than its peers and far more exposed communication (its network is slow too): the
  // cause named is compute, the part of its own work furthest above its peers'.
  Diagnoser d = placed(1.2, 3);
  std::uint64_t n = 1;
  run_windows(d, 3, 3, [](unsigned r, std::uint64_t s) {
    return r == 1 ? step(s, 1, 70, 5, 60, 140) : step(s, 1, 50, 5, 10, 140);
  }, n);
  const auto found = of_kind(d, DiagnosisKind::straggler);
  REQUIRE(found.size() == 1);
  CHECK(found[0].ranks == std::vector<unsigned>{1});
  CHECK(found[0].message.find("of its step was compute") != std::string::npos);
  CHECK(found[0].message.find("communication") == std::string::npos);
}

TEST_CASE("heartbeats repeat a step and are no new window; ranks without a breakdown are not compared") {
  Diagnoser d = placed(1.2, 2);
  for (int beat = 0; beat < 10; ++beat) {
    d.add(0, step(7, 0, 100, 0, 0, 100));
    d.add(1, step(7, 0, 300, 0, 0, 300));
    d.evaluate();
  }
  CHECK(d.diagnoses().empty());
  Diagnoser bare = placed(1.2, 2);
  std::uint64_t n = 1;
  run_windows(bare, 2, 4, [](unsigned r, std::uint64_t s) { return step(s, 0, 0, 0, 0, r == 0 ? 100 : 300); }, n);
  CHECK(bare.diagnoses().empty());
}

TEST_CASE("job diagnoses: data loading above 10%, communication above 20%, sync, device memory above 90%") {
  Diagnoser d = placed(1.2, 2);
  std::uint64_t n = 1;
  run_windows(d, 2, 1, [](unsigned r, std::uint64_t s) {
    RankSample x = r == 0 ? step(s, 15, 50, 5, 10, 100)     // data 15%
                          : step(s, 5, 40, 5, 25, 100);     // comm 25%, 25 ms unaccounted
    x.device_mem_total_bytes = 80ull << 30;
    x.device_mem_used_bytes = r == 1 ? 76ull << 30 : 40ull << 30;
    return x;
  }, n);
  const auto data = of_kind(d, DiagnosisKind::data_loading);
  REQUIRE(data.size() == 1);
  CHECK(data[0].ranks == std::vector<unsigned>{0});
  CHECK(data[0].message == "data wait is 15% of rank 0 on node 0 (host0)'s step");
  // 8 CPUs per rank: 7 loader workers, one CPU for the training loop.
  CHECK(data[0].fix.find("num_workers=7") != std::string::npos);
  CHECK(data[0].fix.find("pin_memory=True") != std::string::npos);
  CHECK(data[0].fix.find("persistent_workers=True") != std::string::npos);
  const auto comm = of_kind(d, DiagnosisKind::communication);
  REQUIRE(comm.size() == 1);
  CHECK(comm[0].ranks == std::vector<unsigned>{1});
  CHECK(comm[0].fix.find("dtrain bench allreduce") != std::string::npos);
  CHECK(comm[0].fix.find("NCCL_IB_HCA") != std::string::npos);
  CHECK(comm[0].fix.find("bucket_cap_mb") != std::string::npos);
  const auto sync = of_kind(d, DiagnosisKind::sync);
  REQUIRE(sync.size() == 1);
  CHECK(sync[0].ranks == std::vector<unsigned>{1});
  CHECK(sync[0].message.find("25% of rank 1") != std::string::npos);
  const auto memory = of_kind(d, DiagnosisKind::memory);
  REQUIRE(memory.size() == 1);
  CHECK(memory[0].ranks == std::vector<unsigned>{1});
  CHECK(memory[0].message.find("(76.0 GiB of 80.0 GiB)") != std::string::npos);
  CHECK(memory[0].fix.find("ZeRO") != std::string::npos);
}

TEST_CASE("below every share: no diagnosis; the means a status row shows") {
  Diagnoser d = placed(1.2, 3);
  std::uint64_t n = 1;
  run_windows(d, 3, 3, [](unsigned, std::uint64_t s) { return step(s, 5, 70, 5, 15, 100); }, n);
  CHECK(d.diagnoses().empty());
  const auto m = d.means(1);
  REQUIRE(m);
  CHECK(m->data_wait_ratio == doctest::Approx(0.05));
  CHECK(m->comm_exposed_ratio == doctest::Approx(0.15));
  CHECK(m->mean.step == n - 1);
  CHECK_FALSE(d.means(9));
}

TEST_CASE("a hang is a diagnosis; the sample of a report carries its breakdown") {
  Diagnoser d = placed(1.2, 2);
  d.hang(1, "made no step progress for 3.0 s");
  REQUIRE(d.diagnoses().size() == 1);
  CHECK(d.diagnoses()[0].kind == DiagnosisKind::hang);
  CHECK(d.diagnoses()[0].message == "rank 1 on node 0 (host0) made no step progress for 3.0 s");
  CHECK(std::string(to_string(DiagnosisKind::data_loading)) == "data_loading");
  WorkerHealth h;
  h.step = 4;
  h.step_ms = 100;
  h.data_wait_ms = 10;
  h.compute_ms = 60;
  h.comm_exposed_ms = 20;
  h.optimizer_ms = 5;
  const RankSample s = sample_of(h);
  CHECK(s.step == 4);
  CHECK(s.own_work_ms() == 75);
  CHECK(s.comm_exposed_ms == 20);
}

namespace {

constexpr std::uint64_t kGiB = 1024ULL * 1024 * 1024;

// A step with a plain breakdown (no job diagnosis of its own) and `rss` bytes resident.
RankSample resident(std::uint64_t n, std::uint64_t rss) {
  RankSample s = step(n, 1, 80, 5, 4, 95);
  s.rss_bytes = rss;
  return s;
}

}  // namespace

TEST_CASE("node RAM: the ranks on one node together above 90% of its RAM are a memory diagnosis naming the node") {
  // Ranks 0, 1 on node 0 (host0), ranks 2, 3 on node 1 (host1); both nodes have 64 GiB.
  Diagnoser d = placed(1.2, 4);
  d.node_memory(0, 64 * kGiB);
  d.node_memory(1, 64 * kGiB);
  std::uint64_t n = 1;
  // Node 1: 30 + 29 = 59 GiB, 92% of 64; node 0: 28 + 29 = 57 GiB, 89%, just under.
  const std::uint64_t rss[] = {28 * kGiB, 29 * kGiB, 29 * kGiB, 30 * kGiB};
  run_windows(d, 4, 1, [&](unsigned r, std::uint64_t s) { return resident(s, rss[r]); }, n);
  const auto memory = of_kind(d, DiagnosisKind::memory);
  REQUIRE(memory.size() == 1);
  CHECK(memory[0].ranks == std::vector<unsigned>{3, 2});
  CHECK(memory[0].message ==
        "the resident memory of the ranks on node 1 (host1) is 59.0 GiB, 92% of its 64.0 GiB of RAM (ranks 3 and 2)");
  for (const char* fix : {"--zero 2|3", "FSDP", "--precision bf16", "smaller micro-batch", "fewer ranks on node 1"}) {
    CHECK(memory[0].fix.find(fix) != std::string::npos);
  }
  // The device-memory rule is not what fired: these ranks report no device.
  CHECK(memory[0].message.find("device memory") == std::string::npos);
}

TEST_CASE("node RAM: both nodes above are two diagnoses; the latest report counts, heartbeats included") {
  Diagnoser d = placed(1.2, 4);
  d.node_memory(0, 16 * kGiB);
  d.node_memory(1, 16 * kGiB);
  std::uint64_t n = 1;
  run_windows(d, 4, 1, [](unsigned, std::uint64_t s) { return resident(s, 7 * kGiB + kGiB / 2); }, n);
  REQUIRE(of_kind(d, DiagnosisKind::memory).size() == 2);   // 15 GiB of 16 on each: 94%
  // A heartbeat repeats the step but carries the rank's memory now: rank 0 freed most of it.
  d.add(0, resident(n - 1, kGiB));
  d.evaluate();
  const auto memory = of_kind(d, DiagnosisKind::memory);
  REQUIRE(memory.size() == 1);
  CHECK(memory[0].ranks == std::vector<unsigned>{2, 3});
}

TEST_CASE("node RAM: below 90% is no diagnosis; a node whose RAM is not known is not judged") {
  Diagnoser d = placed(1.2, 4);
  d.node_memory(0, 64 * kGiB);
  d.node_memory(1, 0);   // its agent could not read /proc/meminfo
  std::uint64_t n = 1;
  // Node 0 at 57.6 of 64 GiB (90%: not above); node 1 at 200 GiB, but of an unknown total.
  run_windows(d, 4, 1, [](unsigned r, std::uint64_t s) {
    return resident(s, r < 2 ? 28 * kGiB + 8 * kGiB / 10 : 100 * kGiB);
  }, n);
  CHECK(of_kind(d, DiagnosisKind::memory).empty());
  // Once the node's RAM is known it is judged, and a new round's placement forgets the old processes' memory.
  d.node_memory(1, 128 * kGiB);
  d.evaluate();
  REQUIRE(of_kind(d, DiagnosisKind::memory).size() == 1);
  d.place(2, RankPlace{1, "host1", 8});
  d.place(3, RankPlace{1, "host1", 8});
  d.evaluate();
  CHECK(of_kind(d, DiagnosisKind::memory).empty());
}

TEST_CASE("node RAM and device memory are judged side by side; a report's rss reaches the sample") {
  Diagnoser d = placed(1.2, 2);
  d.node_memory(0, 8 * kGiB);
  std::uint64_t n = 1;
  run_windows(d, 2, 1, [](unsigned r, std::uint64_t s) {
    RankSample x = resident(s, 4 * kGiB);   // 8 of 8 GiB on node 0
    if (r == 1) {
      x.device_mem_used_bytes = 78 * kGiB;
      x.device_mem_total_bytes = 80 * kGiB;
    }
    return x;
  }, n);
  const auto memory = of_kind(d, DiagnosisKind::memory);
  REQUIRE(memory.size() == 2);
  CHECK(memory[0].message.find("device memory") != std::string::npos);
  CHECK(memory[1].message.find("of its 8.0 GiB of RAM (ranks 0 and 1)") != std::string::npos);
  WorkerHealth h;
  h.rss_bytes = 123;
  CHECK(sample_of(h).rss_bytes == 123);
}

TEST_CASE("a rank at half its peers' step rate is named though its windows never close with theirs") {
  // Every rank reports once an evaluation (a second); the peers step once a second, rank 5 once every two, 60% of
  // its step waiting for data. Its windows close at other evaluations than its peers' (3 steps take it 6 s, them 3):
  // it is judged against every rank's latest window, not only those closed with it.
  Diagnoser d = placed(1.2, 64);
  int named = -1;
  for (int t = 0; t < 30 && named < 0; ++t) {
    for (unsigned r = 0; r < 64; ++r) {
      d.add(r, r == 5 ? step(static_cast<std::uint64_t>(t / 2), 1200, 700, 0, 100, 2000)
                      : step(static_cast<std::uint64_t>(t), 50, 700, 150, 100, 1000));
    }
    d.evaluate();
    if (!of_kind(d, DiagnosisKind::straggler).empty()) named = t;
  }
  // Windows of 3 steps would name it at t=16; a window also closes with 2 steps after kMaxWindowEvaluations.
  CHECK(named == 11);
  const auto found = of_kind(d, DiagnosisKind::straggler);
  REQUIRE(found.size() == 1);
  CHECK(found[0].ranks == std::vector<unsigned>{5});
  CHECK(found[0].message.find("of its step was data wait") != std::string::npos);
}
