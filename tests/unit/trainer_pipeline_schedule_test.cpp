// The pipeline schedules (trainer/parallel/pipeline/schedule.h): exact op lists for small cases, worked out by hand
// from GPipe's, 1F1B's and Megatron-LM's interleaved rules (forward_backward_pipelining_with_interleaving: groups of
// P micro-batches per chunk, (P - s - 1) * 2 + (V - 1) * P warm-up forwards); every op once and backwards in
// increasing micro-batch order on every small shape; the activation sets; the simulated bubble against
// (P - 1) / (V * m); a deadlocking schedule found; and bad arguments refused with their numbers.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/parallel/pipeline/schedule.h"

using namespace dtrain::trainer;

namespace trainer_pipeline_test {

template <typename Error>
std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string ops_of(PipeSchedule s, int stages, int stage, int m, int v = 1) {
  return describe_schedule(pipeline_schedule(s, stages, stage, m, v));
}

// Every (schedule, P, m, V) shape of the sweeps: P 1..4, m 1..8 (multiples of P for interleaved), V 2..3 with
// interleaved only.
struct Shape {
  PipeSchedule schedule;
  int stages, micro, virt;
};

std::vector<Shape> small_shapes() {
  std::vector<Shape> shapes;
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 8; ++m) {
      shapes.push_back({PipeSchedule::gpipe, p, m, 1});
      shapes.push_back({PipeSchedule::one_f_one_b, p, m, 1});
      for (int v = 2; v <= 3 && m % p == 0; ++v) shapes.push_back({PipeSchedule::interleaved, p, m, v});
    }
  }
  return shapes;
}

std::string shape_name(const Shape& s) {
  return std::string(pipe_schedule_name(s.schedule)) + " P=" + std::to_string(s.stages) +
         " m=" + std::to_string(s.micro) + " V=" + std::to_string(s.virt);
}

TEST_CASE("schedule names parse and print; an unknown one is refused naming the allowed values") {
  for (PipeSchedule s : {PipeSchedule::gpipe, PipeSchedule::one_f_one_b, PipeSchedule::interleaved}) {
    CHECK(parse_pipe_schedule(pipe_schedule_name(s)) == s);
  }
  CHECK(std::string(pipe_schedule_name(PipeSchedule::one_f_one_b)) == "1f1b");
  const std::string why = refusal<std::invalid_argument>([] { parse_pipe_schedule("zb-h1"); });
  CHECK(has(why, "'zb-h1'"));
  CHECK(has(why, "gpipe, 1f1b, interleaved"));
}

TEST_CASE("GPipe and 1F1B op lists for small pipelines, by hand") {
  // GPipe: all forwards, then all backwards in increasing micro-batch order, on every stage.
  CHECK(ops_of(PipeSchedule::gpipe, 2, 0, 3) == "F0 F1 F2 B0 B1 B2");
  CHECK(ops_of(PipeSchedule::gpipe, 2, 1, 3) == "F0 F1 F2 B0 B1 B2");
  // 1F1B, P=2 m=3: stage 0 warms up with P - 0 - 1 = 1 forward, the last stage with none.
  CHECK(ops_of(PipeSchedule::one_f_one_b, 2, 0, 3) == "F0 F1 B0 F2 B1 B2");
  CHECK(ops_of(PipeSchedule::one_f_one_b, 2, 1, 3) == "F0 B0 F1 B1 F2 B2");
  // P=4 m=4: stage 0's warm-up is 3 forwards, then F3 B0, then the cool-down; stage 3 alternates from the start.
  CHECK(ops_of(PipeSchedule::one_f_one_b, 4, 0, 4) == "F0 F1 F2 F3 B0 B1 B2 B3");
  CHECK(ops_of(PipeSchedule::one_f_one_b, 4, 1, 4) == "F0 F1 F2 B0 F3 B1 B2 B3");
  CHECK(ops_of(PipeSchedule::one_f_one_b, 4, 3, 4) == "F0 B0 F1 B1 F2 B2 F3 B3");
  // Fewer micro-batches than the warm-up: all forwards, then all backwards.
  CHECK(ops_of(PipeSchedule::one_f_one_b, 4, 0, 2) == "F0 F1 B0 B1");
  const std::vector<PipeOp> ops = pipeline_schedule(PipeSchedule::one_f_one_b, 2, 0, 3);
  CHECK(ops[2] == PipeOp{PipeOp::backward, 0, 0});
  CHECK(ops[3] == PipeOp{PipeOp::forward, 2, 0});
}

TEST_CASE("interleaved op lists follow Megatron-LM's order, by hand") {
  // P=2 V=2 m=4: rank 0 holds global chunks 0 and 2, rank 1 chunks 1 and 3. Forward order on both ranks: micro-batches
  // 0,1 through chunk 0, then 0,1 through chunk 1, then 2,3 through chunk 0, then 2,3 through chunk 1; backward the
  // same with the chunks reversed. Warm-up: rank 0 (2-0-1)*2 + (2-1)*2 = 4, rank 1 (2-1-1)*2 + 2 = 2.
  CHECK(ops_of(PipeSchedule::interleaved, 2, 0, 4, 2) ==
        "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  CHECK(ops_of(PipeSchedule::interleaved, 2, 1, 4, 2) ==
        "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // m = P: rank 0's warm-up (4) covers all m*V = 4 forwards; rank 1 still starts 1F1B after its 2.
  CHECK(ops_of(PipeSchedule::interleaved, 2, 0, 2, 2) == "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
  CHECK(ops_of(PipeSchedule::interleaved, 2, 1, 2, 2) == "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0");
  // The paper's figure 4 (P=4, V=2, m=8): the first device runs (4-1)*2 + 4 = 10 warm-up forwards, then the 11th
  // forward (micro-batch 6 through chunk 0) and its first backward (micro-batch 0 through its last chunk).
  const std::vector<PipeOp> first = pipeline_schedule(PipeSchedule::interleaved, 4, 0, 8, 2);
  for (int k = 0; k < 11; ++k) CHECK(first[k].kind == PipeOp::forward);
  CHECK(first[10] == PipeOp{PipeOp::forward, 6, 0});
  CHECK(first[11] == PipeOp{PipeOp::backward, 0, 1});
  // The last device: V-1 groups of P = 4 forwards of warm-up.
  const std::vector<PipeOp> last = pipeline_schedule(PipeSchedule::interleaved, 4, 3, 8, 2);
  CHECK(last[4] == PipeOp{PipeOp::forward, 0, 1});
  CHECK(last[5] == PipeOp{PipeOp::backward, 0, 1});
}

TEST_CASE("every small shape: each op once a rank, backwards in increasing micro-batch order, no deadlock") {
  for (const Shape& s : small_shapes()) {
    CAPTURE(shape_name(s));
    std::vector<std::vector<PipeOp>> per_rank;
    for (int stage = 0; stage < s.stages; ++stage) {
      const std::vector<PipeOp> ops = pipeline_schedule(s.schedule, s.stages, stage, s.micro, s.virt);
      CHECK(ops.size() == static_cast<size_t>(2 * s.micro * s.virt));
      std::vector<int> forwards(static_cast<size_t>(s.micro) * s.virt, 0), backwards(forwards.size(), 0);
      std::vector<int> next_forward(s.virt, 0), next_backward(s.virt, 0);
      for (const PipeOp& op : ops) {
        REQUIRE(op.micro >= 0);
        REQUIRE(op.micro < s.micro);
        REQUIRE(op.chunk >= 0);
        REQUIRE(op.chunk < s.virt);
        const size_t slot = static_cast<size_t>(op.micro) * s.virt + op.chunk;
        if (op.kind == PipeOp::forward) {
          ++forwards[slot];
          CHECK(op.micro == next_forward[op.chunk]++);
        } else {
          CHECK(forwards[slot] == 1);  // the rank's own forward came first
          ++backwards[slot];
          CHECK(op.micro == next_backward[op.chunk]++);
        }
      }
      CHECK(std::all_of(forwards.begin(), forwards.end(), [](int c) { return c == 1; }));
      CHECK(std::all_of(backwards.begin(), backwards.end(), [](int c) { return c == 1; }));
      per_rank.push_back(ops);
    }
    CHECK_NOTHROW(simulate_pipeline_ops(per_rank, s.micro, s.virt, PipeCosts{}));
    CHECK_NOTHROW(simulate_pipeline(s.schedule, s.stages, s.micro, s.virt, PipeCosts{1.0, 2.0, 0.25}));
  }
}

TEST_CASE("activation sets: GPipe keeps m, 1F1B min(m, P - stage), interleaved its warm-up plus one") {
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 8; ++m) {
      for (int stage = 0; stage < p; ++stage) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(stage);
        CHECK(activation_sets(PipeSchedule::gpipe, p, stage, m) == m);
        CHECK(activation_sets(PipeSchedule::one_f_one_b, p, stage, m) == std::min(m, p - stage));
        CHECK(activation_sets(PipeSchedule::one_f_one_b, p, 0, m) >=
              activation_sets(PipeSchedule::one_f_one_b, p, stage, m));
        for (int v = 2; v <= 3 && m % p == 0; ++v) {
          const int warmup = (p - stage - 1) * 2 + (v - 1) * p;
          CHECK(activation_sets(PipeSchedule::interleaved, p, stage, m, v) == std::min(warmup + 1, m * v));
        }
      }
    }
  }
  // By hand from the P=2 V=2 m=4 lists above: rank 0 peaks at 5 (4 warm-up forwards, then F2.0), rank 1 at 3.
  CHECK(activation_sets(PipeSchedule::interleaved, 2, 0, 4, 2) == 5);
  CHECK(activation_sets(PipeSchedule::interleaved, 2, 1, 4, 2) == 3);
}

TEST_CASE("the simulated bubble with equal costs and free transfers is (P - 1) / (V * m)") {
  for (const Shape& s : small_shapes()) {
    CAPTURE(shape_name(s));
    const PipeTimeline t = simulate_pipeline(s.schedule, s.stages, s.micro, s.virt, PipeCosts{1.0, 2.0, 0.0});
    CHECK(t.bubble_fraction == doctest::Approx(ideal_bubble_fraction(s.stages, s.micro, s.virt)).epsilon(1e-9));
    REQUIRE(t.busy_ms.size() == static_cast<size_t>(s.stages));
    for (double busy : t.busy_ms) CHECK(busy == doctest::Approx(3.0 * s.micro * s.virt));
  }
  // GPipe's step, (m + P - 1) * (f + b): P=4 m=8 is 11 slots of 3 ms.
  CHECK(simulate_pipeline(PipeSchedule::gpipe, 4, 8, 1, PipeCosts{}).step_ms == doctest::Approx(33.0));
  CHECK(ideal_bubble_fraction(4, 8, 2) == doctest::Approx(3.0 / 16.0));
  CHECK(ideal_bubble_fraction(1, 5) == 0.0);
}

TEST_CASE("transfers delay the step: 1F1B P=2 m=3 with 0.5 ms sends, by hand") {
  // Rank 0: F0 0-1, F1 1-2, B0 5-7 (rank 1's B0 ends 4.5, +0.5), F2 7-8, B1 8-10, B2 12-14.
  // Rank 1: F0 1.5-2.5, B0 2.5-4.5, F1 4.5-5.5, B1 5.5-7.5, F2 8.5-9.5, B2 9.5-11.5.
  const PipeTimeline t = simulate_pipeline(PipeSchedule::one_f_one_b, 2, 3, 1, PipeCosts{1.0, 2.0, 0.5});
  CHECK(t.step_ms == doctest::Approx(14.0));
  CHECK(t.busy_ms == std::vector<double>{9.0, 9.0});
  CHECK(t.bubble_fraction == doctest::Approx((14.0 * 2 - 18.0) / 18.0));
  // Transfers within a rank (P=1, chunks on the same rank) cost nothing.
  CHECK(simulate_pipeline(PipeSchedule::interleaved, 1, 2, 2, PipeCosts{1.0, 2.0, 5.0}).step_ms ==
        doctest::Approx(12.0));
}

TEST_CASE("a broken schedule is found as a deadlock naming the stuck ranks and ops") {
  const PipeOp f0{PipeOp::forward, 0, 0}, f1{PipeOp::forward, 1, 0};
  const PipeOp b0{PipeOp::backward, 0, 0}, b1{PipeOp::backward, 1, 0};
  // Stage 1 (the last) runs micro-batch 0's backward before its forward.
  std::string why = refusal<std::logic_error>(
      [&] { simulate_pipeline_ops({{f0, f1, b0, b1}, {b0, f0, b1, f1}}, 2, 1, PipeCosts{}); });
  CHECK(has(why, "deadlock"));
  CHECK(has(why, "rank 1 at op 0 (B0) waits for F0 on rank 1"));
  CHECK(has(why, "rank 0 at op 2 (B0) waits for B0 on rank 1"));
  // Interleaved, rank 0 runs micro-batch 0 through its chunk 1 (global chunk 2) before chunk 0: it waits for rank 1's
  // chunk 0 (global 1), which waits for rank 0's chunk 0.
  std::vector<std::vector<PipeOp>> ranks = {pipeline_schedule(PipeSchedule::interleaved, 2, 0, 2, 2),
                                            pipeline_schedule(PipeSchedule::interleaved, 2, 1, 2, 2)};
  std::swap(ranks[0][0], ranks[0][2]);  // F0.1 F1.0 F0.0 ...
  why = refusal<std::logic_error>([&] { simulate_pipeline_ops(ranks, 2, 2, PipeCosts{}); });
  CHECK(has(why, "rank 0 at op 0 (F0.1) waits for F0.0 on rank 1"));
  CHECK(has(why, "rank 1 at op 0 (F0.0) waits for F0.0 on rank 0"));
}

TEST_CASE("op lists that are not each op once are refused before simulating") {
  const PipeOp f0{PipeOp::forward, 0, 0}, b0{PipeOp::backward, 0, 0};
  CHECK(has(refusal<std::invalid_argument>([&] { simulate_pipeline_ops({{f0, b0}, {f0}}, 1, 1, PipeCosts{}); }),
            "rank 1 runs 1 ops, not the 2"));
  CHECK(has(refusal<std::invalid_argument>([&] { simulate_pipeline_ops({{f0, f0}}, 1, 1, PipeCosts{}); }),
            "rank 0's F0.0 appears twice"));
  CHECK(has(refusal<std::invalid_argument>(
                [&] { simulate_pipeline_ops({{f0, PipeOp{PipeOp::backward, 3, 0}}}, 1, 1, PipeCosts{}); }),
            "outside 1 micro-batches x 1 chunks"));
  CHECK(has(refusal<std::invalid_argument>([&] { simulate_pipeline_ops({}, 1, 1, PipeCosts{}); }), "got 0"));
  CHECK(has(refusal<std::invalid_argument>(
                [&] { simulate_pipeline_ops({{f0, b0}}, 1, 1, PipeCosts{1.0, -2.0, 0.0}); }),
            "none may be negative"));
}

TEST_CASE("bad pipeline shapes are refused with their numbers") {
  auto why = [](PipeSchedule s, int p, int stage, int m, int v) {
    return refusal<std::invalid_argument>([=] { pipeline_schedule(s, p, stage, m, v); });
  };
  CHECK(has(why(PipeSchedule::gpipe, 0, 0, 4, 1), "0 stages, 4 micro-batches, 1 virtual stages"));
  CHECK(has(why(PipeSchedule::one_f_one_b, 2, 0, 0, 1), "2 stages, 0 micro-batches"));
  CHECK(has(why(PipeSchedule::interleaved, 2, 0, 4, 0), "0 virtual stages"));
  CHECK(has(why(PipeSchedule::one_f_one_b, 2, 0, 4, 2), "1f1b with 2 virtual stages"));
  CHECK(has(why(PipeSchedule::interleaved, 2, 0, 4, 1), "interleaved schedule with 1 virtual stage"));
  const std::string multiple = why(PipeSchedule::interleaved, 4, 0, 6, 2);
  CHECK(has(multiple, "micro-batches (6)"));
  CHECK(has(multiple, "pipeline stages (4)"));
  CHECK(has(multiple, "use 8 micro-batches"));
  CHECK(has(why(PipeSchedule::one_f_one_b, 4, 4, 8, 1), "stage 4 is outside 0..3"));
  CHECK(has(refusal<std::invalid_argument>([] { activation_sets(PipeSchedule::gpipe, 2, -1, 2); }), "stage -1"));
  CHECK(has(refusal<std::invalid_argument>([] { ideal_bubble_fraction(4, 0); }), "0 micro-batches"));
  CHECK(has(refusal<std::invalid_argument>([] { simulate_pipeline(PipeSchedule::gpipe, 2, 2, 3, PipeCosts{}); }),
            "gpipe with 3 virtual stages"));
}

TEST_CASE("describe_schedule: micro-batch numbers, with the chunk when any op is on another chunk") {
  const PipeOp f0{PipeOp::forward, 0, 0}, f1{PipeOp::forward, 1, 0}, f2{PipeOp::forward, 2, 0};
  const PipeOp b0{PipeOp::backward, 0, 0}, b1{PipeOp::backward, 1, 0}, b2{PipeOp::backward, 2, 0};
  CHECK(describe_schedule({f0, f1, b0, f2, b1, b2}) == "F0 F1 B0 F2 B1 B2");
  CHECK(describe_schedule({f0, PipeOp{PipeOp::forward, 0, 1}}) == "F0.0 F0.1");
  CHECK(describe_schedule({}).empty());
}

}  // namespace trainer_pipeline_test
