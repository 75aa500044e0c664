// The stand-in's memory (backend.h): one reserved PROT_NONE range, page-rounded buffers cut from it and reused by
// size, opened as a whole while anyone holds a StandinOpen.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "trainer/common/host_wait.h"
#include "trainer/kernels/standin/arena.h"
#include "trainer/kernels/standin/backend.h"

namespace dtrain::trainer::kernels {
namespace {

constexpr std::size_t kReserved = std::size_t{64} << 30;  // address space only (MAP_NORESERVE)

struct Arena {
  std::mutex mutex;
  char* base = nullptr;
  std::size_t used = 0;
  int open = 0;
  std::map<std::size_t, std::vector<char*>> free;  // page-rounded bytes -> released buffers
  std::map<const char*, std::size_t> sizes;        // buffer -> its bytes

  Arena() {
    void* range = mmap(nullptr, kReserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) throw std::bad_alloc();
    base = static_cast<char*>(range);
  }
  // Called with the mutex held.
  void protect(int prot) const {
    if (used > 0 && mprotect(base, used, prot) != 0) std::abort();
  }
};

Arena& arena() {
  static Arena* a = new Arena();  // never destroyed: buffers may be released during exit
  return *a;
}

std::size_t page_rounded(std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

StandinOpen::StandinOpen() {
  Arena& a = arena();
  const std::lock_guard lock(a.mutex);
  if (a.open++ == 0) a.protect(PROT_READ | PROT_WRITE);
}

StandinOpen::~StandinOpen() {
  Arena& a = arena();
  const std::lock_guard lock(a.mutex);
  if (--a.open == 0) a.protect(PROT_NONE);
}

void* standin_allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  Arena& a = arena();
  const std::size_t size = page_rounded(bytes);
  char* data = nullptr;
  {
    const std::lock_guard lock(a.mutex);
    auto reuse = a.free.find(size);
    if (reuse != a.free.end() && !reuse->second.empty()) {
      data = reuse->second.back();
      reuse->second.pop_back();
    } else {
      if (a.used + size > kReserved) throw std::bad_alloc();
      data = a.base + a.used;
      a.used += size;
      if (a.open > 0) a.protect(PROT_READ | PROT_WRITE);
    }
    a.sizes[data] = size;
  }
  const StandinOpen open;
  std::memset(data, 0, size);  // zero-filled, as Backend::allocate promises
  return data;
}

void standin_release(void* data) {
  if (data == nullptr) return;
  Arena& a = arena();
  const std::lock_guard lock(a.mutex);
  auto found = a.sizes.find(static_cast<const char*>(data));
  if (found == a.sizes.end()) std::abort();  // not the stand-in's: a programming error
  a.free[found->second].push_back(static_cast<char*>(data));
  a.sizes.erase(found);
  note_host_wait("cudaFree");  // as a GPU's free waits for the device (kernels/cuda/backend.cpp); once freed
}

bool standin_owns(const void* data, std::size_t bytes) {
  Arena& a = arena();
  const std::lock_guard lock(a.mutex);
  const char* p = static_cast<const char*>(data);
  return p >= a.base && p + bytes <= a.base + a.used;
}

}  // namespace dtrain::trainer::kernels
