// The DDP bucket rule (trainer/parallel/ddp/buckets.h): min(25 MiB, max(1 MiB, gradient bytes / 8)) after a first
// bucket of 1 MiB, on the bench model (BENCHMARKS.md, "trainer vs PyTorch") and on GPT-2 124M, and DdpReducer cutting
// its buckets by it when no size is given.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "trainer/comm/local/communicator.h"
#include "trainer/parallel/ddp/buckets.h"
#include "trainer/parallel/ddp/reducer.h"

using dtrain::trainer::cut_buckets;
using dtrain::trainer::DdpOptions;
using dtrain::trainer::DdpReducer;
using dtrain::trainer::default_bucket_bytes;
using dtrain::trainer::kFirstBucketBytes;
using dtrain::trainer::last_bucket_bytes;
using dtrain::trainer::LocalCommunicator;
using Buckets = std::vector<std::pair<std::size_t, std::size_t>>;

namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

}  // namespace

TEST_CASE("the bench model's 13 MB of gradients: 1 MiB, then seven buckets of an eighth, then the rest") {
  // L=4 C=256 V=256 T=256: 3,290,624 parameters, 13,162,496 gradient bytes; an eighth is 1,645,312 bytes.
  const std::size_t count = 3'290'624;
  const std::uint64_t bytes = count * sizeof(float);
  REQUIRE(default_bucket_bytes(bytes) == 1'645'312);
  const std::size_t first = kFirstBucketBytes / sizeof(float), rest = 1'645'312 / sizeof(float);
  Buckets expected = {{count - first, first}};
  for (int i = 1; i <= 7; ++i) expected.emplace_back(count - first - i * rest, rest);
  expected.emplace_back(0, count - first - 7 * rest);
  CHECK(cut_buckets(count, kFirstBucketBytes, default_bucket_bytes(bytes)) == expected);
  // The last bucket, which starts only when backward has ended, is 149,184 floats: 4.5% of the gradient, where the
  // old 25 MiB default made it 12,113,920 bytes (92%).
  CHECK(expected.back().second == 149'184);
  CHECK(last_bucket_bytes(static_cast<double>(bytes), static_cast<double>(default_bucket_bytes(bytes))) ==
        149'184 * sizeof(float));
  CHECK(last_bucket_bytes(static_cast<double>(bytes), 25.0 * kMiB) == 12'113'920);

  LocalCommunicator comm;
  std::vector<float> grads(count);
  CHECK(DdpReducer(comm, grads.data(), count).buckets() == expected);
  DdpOptions pytorch;
  pytorch.bucket_bytes = 25 * kMiB;
  CHECK(DdpReducer(comm, grads.data(), count, pytorch).buckets() ==
        Buckets{{count - first, first}, {0, count - first}});
}

TEST_CASE("GPT-2 124M (498 MB of gradients) keeps PyTorch's 25 MiB buckets") {
  const std::size_t count = 124'475'904;  // Vp = 50,304
  const std::uint64_t bytes = count * sizeof(float);
  CHECK(default_bucket_bytes(bytes) == 25 * kMiB);
  const Buckets buckets = cut_buckets(count, kFirstBucketBytes, default_bucket_bytes(bytes));
  const std::size_t first = kFirstBucketBytes / sizeof(float), rest = 25 * kMiB / sizeof(float);
  REQUIRE(buckets.size() == 1 + (count - first + rest - 1) / rest);
  CHECK(buckets.front() == std::make_pair(count - first, first));
  for (std::size_t i = 1; i + 1 < buckets.size(); ++i) CHECK(buckets[i].second == rest);
  CHECK(buckets.back().first == 0);
}

TEST_CASE("the rule's floor and ceiling, and the last bucket never above an eighth once the floor is passed") {
  CHECK(default_bucket_bytes(0) == kMiB);
  CHECK(default_bucket_bytes(4 * kMiB) == kMiB);
  CHECK(default_bucket_bytes(8 * kMiB) == kMiB);
  CHECK(default_bucket_bytes(80 * kMiB) == 10 * kMiB);
  CHECK(default_bucket_bytes(200 * kMiB) == 25 * kMiB);
  CHECK(default_bucket_bytes(std::uint64_t{4} << 40) == 25 * kMiB);
  for (std::uint64_t bytes = 8 * kMiB; bytes <= 200 * kMiB; bytes += 3 * kMiB + 4092) {
    const double last = last_bucket_bytes(static_cast<double>(bytes), static_cast<double>(default_bucket_bytes(bytes)));
    CHECK(last <= static_cast<double>(bytes) / 8);
  }
}
