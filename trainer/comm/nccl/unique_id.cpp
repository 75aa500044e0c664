#include "trainer/comm/nccl/unique_id.h"

#include <nccl.h>

#include "trainer/comm/communicator.h"
#include "trainer/comm/describe.h"
#include "trainer/comm/nccl/runtime.h"

namespace dtrain::trainer {
namespace {

using nccl_runtime::nccl_text;
using nccl_runtime::rt;

std::string to_hex(const char* bytes, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    hex += digits[byte >> 4];
    hex += digits[byte & 15];
  }
  return hex;
}

// Bytes from hex; false when `hex` is not 2 * n hex digits.
bool from_hex(const std::string& hex, std::string& bytes) {
  const auto value = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return false;
  bytes.clear();
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = value(hex[i]), lo = value(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace

std::string exchange_nccl_unique_id(store::StoreClient* store, const std::string& key, int rank, int size,
                                    std::chrono::milliseconds timeout) {
  const std::string who = "NCCL unique-id exchange (rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          ", store key '" + key + "'";
  if (size > 1 && store == nullptr) throw CommError(who + "): no store to exchange the id through");
  if (rank == 0) {
    ncclUniqueId id;
    const ncclResult_t result = rt().ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      throw CommError(who + "): ncclGetUniqueId failed: " + nccl_text(result) +
                      ". NCCL needs a usable network interface for its bootstrap; see NCCL_SOCKET_IFNAME");
    }
    std::string bytes(id.internal, sizeof(id.internal));
    if (size > 1) {
      try {
        store->set(key, to_hex(id.internal, sizeof(id.internal)));
      } catch (const store::StoreError& error) {
        throw CommError(who + "): cannot publish the id: " + error.what());
      }
    }
    return bytes;
  }
  std::string hex;
  try {
    hex = store->get(key, timeout);
  } catch (const store::StoreError& error) {
    throw CommError(who + "): rank 0 did not publish the id within " + describe_seconds(timeout) + ": " +
                    error.what() +
                    ". Check rank 0's log: it may have failed before (e.g. no GPU) or not be using NCCL");
  }
  std::string bytes;
  if (!from_hex(hex, bytes) || bytes.size() != NCCL_UNIQUE_ID_BYTES) {
    throw CommError(who + "): the value is not " + std::to_string(NCCL_UNIQUE_ID_BYTES) +
                    " hex-encoded bytes (" + std::to_string(hex.size()) +
                    " characters); another program uses this key");
  }
  return bytes;
}

}  // namespace dtrain::trainer
