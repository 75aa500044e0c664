// The CUDA kernels' launch arithmetic (trainer/kernels/cuda/shapes.h), checked on the CPU: the grids cover every
// element, attention's key tiles cover exactly the keys each block's rows see, and shapes the kernels cannot take
// are refused with the shape named.

#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>

#include "trainer/kernels/cuda/shapes.h"

namespace cuda = dtrain::trainer::kernels::cuda;

TEST_CASE("elementwise grids cover n with at least one and at most kMaxBlocks blocks") {
  CHECK(cuda::blocks_for(0, 256) == 0);
  CHECK(cuda::blocks_for(1, 256) == 1);
  CHECK(cuda::blocks_for(256, 256) == 1);
  CHECK(cuda::blocks_for(257, 256) == 2);
  CHECK(cuda::elementwise_blocks(0) == 1);
  CHECK(cuda::elementwise_blocks(1000003) == 3907);
  // 124M parameters: capped, the kernels stride over the rest.
  CHECK(cuda::elementwise_blocks(124475904) == cuda::kMaxBlocks);
}

TEST_CASE("column sums cut rows into chunks of kRowsPerChunk, the last one partial") {
  CHECK(cuda::row_chunks(1) == 1);
  CHECK(cuda::row_chunks(32) == 1);
  CHECK(cuda::row_chunks(33) == 2);
  CHECK(cuda::row_chunks(8192) == 256);
}

TEST_CASE("attention key tiles cover exactly the keys a block's rows see, for every block and T") {
  for (int T = 1; T <= 300; ++T) {
    CHECK(cuda::attention_row_blocks(T) * cuda::kAttentionRows >= T);
    CHECK((cuda::attention_row_blocks(T) - 1) * cuda::kAttentionRows < T);
    for (int block = 0; block < cuda::attention_row_blocks(T); ++block) {
      const int t0 = block * cuda::kAttentionRows;
      const int last_row = std::min(T, t0 + cuda::kAttentionRows) - 1;
      const int tiles = cuda::attention_key_tiles(t0, T);
      INFO("T=" << T << " t0=" << t0);
      CHECK(tiles * cuda::kAttentionKeys > last_row);        // the last row's own key is read
      CHECK((tiles - 1) * cuda::kAttentionKeys <= last_row);  // no tile wholly past it
    }
  }
  CHECK(cuda::attention_key_tiles(1016, 1024) == 32);
  CHECK(cuda::attention_scratch_floats(8, 1024, 12) == 8u * 12 * 1024);
}

TEST_CASE("attention refuses head sizes it cannot hold, naming the shape") {
  CHECK(cuda::attention_head_size(768, 12) == 64);
  CHECK(cuda::attention_head_size(96, 2) == 48);
  CHECK(cuda::attention_head_size(256, 2) == cuda::kMaxHeadSize);
  CHECK_THROWS_WITH_AS(cuda::attention_head_size(100, 3), doctest::Contains("C = 100 is not a multiple of NH = 3"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda::attention_head_size(1024, 4), doctest::Contains("head size 256"),
                       std::invalid_argument);
  CHECK_THROWS_AS(cuda::attention_head_size(768, 0), std::invalid_argument);
}
