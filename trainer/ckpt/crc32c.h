#pragma once

// CRC-32C (Castagnoli, the checksum of iSCSI, ext4 metadata and Google's crc32c library), used for model
// checkpoints: the state file records the CRC-32C of its model file, so a bit that flips in the model file after it
// was written is found before training resumes from it. With SSE4.2 (every x86-64 CPU since 2008) it runs on the
// CPU's crc32 instruction at several GB/s; elsewhere a table does it a byte at a time.

#include <cstddef>
#include <cstdint>

namespace dtrain::trainer {

// Extends `crc` (0 for a new checksum) over bytes: crc32c(crc32c(0, a), b) == crc32c(0, a + b).
// crc32c(0, "123456789", 9) == 0xe3069283 (the standard check value).
std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t bytes);

}  // namespace dtrain::trainer
