// The shm backend's sums: rank order, the same bits from the AVX2 loop and the portable one, with dst one of the
// sources, on sizes around the vector and block widths.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "tests/unit/comm_shm_ranks.h"
#include "trainer/comm/shm/sum.h"

using namespace shm_test;

TEST_CASE("sum_floats and sum_floats_portable: the rank-order sum bit for bit, dst aliasing a source") {
  for (int sources = 1; sources <= 5; ++sources) {
    for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17}, std::size_t{1023},
                          std::size_t{1025}, std::size_t{5000}}) {
      CAPTURE(sources);
      CAPTURE(n);
      const std::vector<float> want = rank_order_sum(sources, n);
      for (auto sum : {&dtrain::trainer::sum_floats, &dtrain::trainer::sum_floats_portable}) {
        std::vector<std::vector<float>> data;
        std::vector<const float*> src;
        for (int r = 0; r < sources; ++r) data.push_back(data_of(r, n));
        for (auto& d : data) src.push_back(d.data());
        std::vector<float> out(n);
        sum(out.data(), src.data(), sources, n);
        CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
        float* last = data.back().data();  // in place into the last source, as allreduce sums into its own slice
        sum(last, src.data(), sources, n);
        CHECK(std::memcmp(last, want.data(), n * sizeof(float)) == 0);
      }
    }
  }
}
