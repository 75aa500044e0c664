#include "trainer/parallel/ddp/buckets.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dtrain::trainer {
namespace {

std::size_t floats_in(std::uint64_t bytes, const char* what) {
  if (bytes < sizeof(float)) {
    throw std::invalid_argument(std::string("DDP ") + what + " of " + std::to_string(bytes) +
                                " bytes holds no float; use at least " + std::to_string(sizeof(float)));
  }
  return static_cast<std::size_t>(bytes / sizeof(float));
}

}  // namespace

std::uint64_t default_bucket_bytes(std::uint64_t grad_bytes) {
  return std::clamp(grad_bytes / kBucketsPerGradient, kMinBucketBytes, kMaxBucketBytes);
}

std::vector<std::pair<std::size_t, std::size_t>> cut_buckets(std::size_t count, std::uint64_t first_bucket_bytes,
                                                             std::uint64_t bucket_bytes) {
  const std::size_t first = floats_in(first_bucket_bytes, "first bucket");
  const std::size_t rest = floats_in(bucket_bytes, "bucket size");
  std::vector<std::pair<std::size_t, std::size_t>> buckets;
  std::size_t end = count;
  while (end > 0) {
    const std::size_t size = std::min(buckets.empty() ? first : rest, end);
    buckets.emplace_back(end - size, size);
    end -= size;
  }
  return buckets;
}

double last_bucket_bytes(double grad_bytes, double bucket_bytes) {
  const double first = static_cast<double>(kFirstBucketBytes);
  if (grad_bytes <= first) return grad_bytes;
  const double rest = std::fmod(grad_bytes - first, bucket_bytes);
  return rest > 0 ? rest : bucket_bytes;
}

}  // namespace dtrain::trainer
