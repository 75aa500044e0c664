#include "trainer/comm/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "trainer/comm/communicator.h"
#include "trainer/comm/describe.h"
#include "common/os/syscalls.h"

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMagic = 0x64747261696e5348;  // "dtrainSH"
constexpr std::size_t kPage = 4096;
// How long an opening rank sleeps between looks for rank 0's segment: short, because rendezvous waits on it, and
// long enough that a rank 0 that starts seconds late costs no measurable CPU.
constexpr auto kOpenPoll = std::chrono::milliseconds(2);

struct Header {
  std::uint64_t magic;
  std::uint64_t ranks;
  std::uint64_t chunk_bytes;
  std::uint64_t arena_bytes;
  std::uint64_t ring_bytes;
  std::atomic<std::uint32_t> ready;   // 1 once rank 0 has laid the segment out
  std::atomic<std::uint32_t> joined;  // ranks that have joined (shm/sync.h)
};

std::size_t round_up_to(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::size_t slots_offset() { return kPage; }
std::size_t staging_offset(const SegmentGeometry& g) {
  return slots_offset() + round_up_to(sizeof(RankSlot) * static_cast<std::size_t>(g.ranks), kPage);
}
std::size_t channels(const SegmentGeometry& g) {
  return static_cast<std::size_t>(g.ranks) * static_cast<std::size_t>(g.ranks) * Communicator::kP2pStreams;
}
// The bells and the rings' counters come before the arenas: they are reserved with the header.
std::size_t bells_offset(const SegmentGeometry& g) {
  return staging_offset(g) + round_up_to(2 * g.chunk_bytes * static_cast<std::size_t>(g.ranks), kPage);
}
std::size_t channels_offset(const SegmentGeometry& g) {
  return bells_offset(g) + round_up_to(sizeof(P2pBell) * static_cast<std::size_t>(g.ranks), kPage);
}
std::size_t arenas_offset(const SegmentGeometry& g) {
  return channels_offset(g) + round_up_to(sizeof(P2pChannel) * channels(g), kPage);
}
std::size_t rings_offset(const SegmentGeometry& g) {
  return arenas_offset(g) + round_up_to(g.arena_bytes, kPage) * static_cast<std::size_t>(g.ranks);
}
std::size_t total_bytes(const SegmentGeometry& g) {
  return rings_offset(g) + round_up_to(g.ring_bytes, kPage) * channels(g);
}
// Index of the (from, to, stream) ring among channels(g).
std::size_t channel_index(const SegmentGeometry& g, int from, int to, int stream) {
  return (static_cast<std::size_t>(from) * static_cast<std::size_t>(g.ranks) + static_cast<std::size_t>(to)) *
             Communicator::kP2pStreams + static_cast<std::size_t>(stream);
}

std::string where(const std::string& name) { return shm_segment_dir() + "/" + name; }

// shm_open and shm_unlink on the segment directory: glibc's shm_open is this open() on /dev/shm.
int open_segment(const std::string& name, int flags, mode_t mode) {
  return ::open(where(name).c_str(), flags | O_RDWR | O_NOFOLLOW | O_CLOEXEC, mode);
}

void unlink_segment(const std::string& name) { ::unlink(where(name).c_str()); }

// Sizes a new segment: `bytes` of address space, of which the first `reserved` are taken from the directory now,
// so that a full /dev/shm is an error here and not a SIGBUS later. Returns "" or what failed.
std::string size_segment(int fd, std::size_t bytes, std::size_t reserved) {
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return std::string("ftruncate: ") + errno_text();
  // posix_fallocate returns its error instead of setting errno.
  const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(reserved));
  return error == 0 ? "" : std::string("posix_fallocate: ") + std::strerror(error);
}

std::byte* map(int fd, std::size_t bytes, const std::string& name) {
  // MAP_NORESERVE: the arenas are address space; their pages are reserved with fallocate as buffers are made.
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    const std::string error = errno_text();
    ::close(fd);
    throw CommError("shm communicator: cannot map " + where(name) + " (" + std::to_string(bytes >> 20) +
                    " MiB of address space): " + error);
  }
  return static_cast<std::byte*>(base);
}

}  // namespace

Segment::Segment(std::string name, SegmentGeometry geometry, int fd, std::byte* base, std::size_t bytes)
    : name_(std::move(name)), geometry_(geometry), fd_(fd), base_(base), bytes_(bytes) {}

Segment::~Segment() {
  ::munmap(base_, bytes_);
  ::close(fd_);
}

std::string shm_segment_dir() {
  const char* dir = std::getenv("DTRAIN_SHM_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/dev/shm";
}

std::size_t Segment::reserved_bytes(const SegmentGeometry& geometry) { return arenas_offset(geometry); }

std::string Segment::room_shortfall(const SegmentGeometry& geometry) {
  const std::string dir = shm_segment_dir();
  const std::size_t needed = reserved_bytes(geometry);
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return dir + " cannot be used (" + errno_text() + ")";
  const std::size_t free = static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize;
  if (free >= needed) return "";
  return dir + " has " + describe_bytes(free) + " free (of " + describe_bytes(fs.f_blocks * fs.f_frsize) +
         "); a segment of " + std::to_string(geometry.ranks) + " ranks reserves " + describe_bytes(needed);
}

std::unique_ptr<Segment> Segment::create(const std::string& name, const SegmentGeometry& geometry) {
  const int fd = open_segment(name, O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    throw CommError("shm communicator: cannot create " + where(name) + ": " + errno_text() +
                    ". Check that " + shm_segment_dir() + " is mounted and writable; a file of that name is left "
                    "from an earlier process (remove it)");
  }
  ::fchmod(fd, 0600);  // whatever the umask
  const std::size_t bytes = total_bytes(geometry);
  const std::size_t fixed = reserved_bytes(geometry);
  if (const std::string error = size_segment(fd, bytes, fixed); !error.empty()) {
    ::close(fd);
    unlink_segment(name);
    const std::string room = room_shortfall(geometry);
    throw CommError("shm communicator: cannot reserve " + describe_bytes(fixed) + " for " +
                    std::to_string(geometry.ranks) + " ranks' staging slots in " + where(name) + ": " + error +
                    (room.empty() ? "" : " (" + room + ")") + ". Give " + shm_segment_dir() +
                    " more room (df -h " + shm_segment_dir() + "; in a container: docker run --shm-size=1g, or on "
                    "Kubernetes an emptyDir with medium Memory mounted at /dev/shm), or use "
                    "DTRAIN_COMM_BACKEND=gloo (auto, the default, falls back to gloo by itself)");
  }
  std::unique_ptr<Segment> segment(new Segment(name, geometry, fd, map(fd, bytes, name), bytes));
  auto* header = new (segment->base_) Header{kMagic, static_cast<std::uint64_t>(geometry.ranks), geometry.chunk_bytes,
                                             geometry.arena_bytes, geometry.ring_bytes, {0}, {0}};
  for (int r = 0; r < geometry.ranks; ++r) {
    RankSlot& slot = *new (segment->base_ + slots_offset() + sizeof(RankSlot) * static_cast<std::size_t>(r)) RankSlot;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&slot.alive, &attr);
    pthread_mutexattr_destroy(&attr);
    slot.pid.store(0);
    slot.progress.store(0);
    slot.waiters.store(0);
    slot.published.store(0);
  }
  for (int r = 0; r < geometry.ranks; ++r) {
    P2pBell& bell = segment->bell(r);
    bell.rings.store(0);
    bell.sleepers.store(0);
  }
  for (std::size_t c = 0; c < channels(geometry); ++c) {
    auto* channel = new (segment->base_ + channels_offset(geometry) + sizeof(P2pChannel) * c) P2pChannel;
    channel->written.store(0);
    channel->taken.store(0);
  }
  header->ready.store(1, std::memory_order_release);
  return segment;
}

std::unique_ptr<Segment> Segment::open(const std::string& name, const SegmentGeometry& geometry,
                                       Clock::time_point deadline) {
  const std::size_t bytes = total_bytes(geometry);
  for (;;) {
    const int fd = open_segment(name, 0, 0);
    struct stat st {};
    if (fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == bytes) {
      std::unique_ptr<Segment> segment(new Segment(name, geometry, fd, map(fd, bytes, name), bytes));
      const auto& header = *reinterpret_cast<const Header*>(segment->base_);
      while (header.ready.load(std::memory_order_acquire) == 0 && Clock::now() < deadline) {
        std::this_thread::sleep_for(kOpenPoll);
      }
      if (header.ready.load(std::memory_order_acquire) == 1) {
        if (header.magic != kMagic || header.ranks != static_cast<std::uint64_t>(geometry.ranks) ||
            header.chunk_bytes != geometry.chunk_bytes || header.arena_bytes != geometry.arena_bytes ||
            header.ring_bytes != geometry.ring_bytes) {
          throw CommError("shm communicator: " + where(name) + " was laid out for " + std::to_string(header.ranks) +
                          " ranks, not " + std::to_string(geometry.ranks) +
                          " (or with other chunk, arena or ring sizes); every rank must use the same options");
        }
        return segment;
      }
    } else if (fd >= 0) {
      ::close(fd);  // rank 0 has created it but not sized it yet
    }
    if (Clock::now() >= deadline) {
      throw CommError("shm communicator: " + where(name) + " did not appear (created by rank 0) before the "
                      "deadline; check rank 0's log, and that every rank of the communicator runs on this node");
    }
    std::this_thread::sleep_for(kOpenPoll);
  }
}

RankSlot& Segment::slot(int rank) const {
  return *reinterpret_cast<RankSlot*>(base_ + slots_offset() + sizeof(RankSlot) * static_cast<std::size_t>(rank));
}

std::atomic<std::uint32_t>& Segment::joined() const { return reinterpret_cast<Header*>(base_)->joined; }

std::byte* Segment::staging(int rank, int which) const {
  return base_ + staging_offset(geometry_) + geometry_.chunk_bytes * static_cast<std::size_t>(2 * rank + which);
}

std::size_t Segment::arena_offset(int rank) const {
  return arenas_offset(geometry_) + round_up_to(geometry_.arena_bytes, kPage) * static_cast<std::size_t>(rank);
}

std::size_t Segment::arena_offset_of(int rank, const void* data, std::size_t bytes) const {
  const auto* p = static_cast<const std::byte*>(data);
  const std::byte* begin = base_ + arena_offset(rank);
  if (p < begin || p > begin + geometry_.arena_bytes || bytes > static_cast<std::size_t>(begin + geometry_.arena_bytes - p)) {
    return SIZE_MAX;
  }
  return static_cast<std::size_t>(p - base_);
}

P2pBell& Segment::bell(int rank) const {
  return *reinterpret_cast<P2pBell*>(base_ + bells_offset(geometry_) +
                                     sizeof(P2pBell) * static_cast<std::size_t>(rank));
}

P2pChannel& Segment::channel(int from, int to, int stream) const {
  return *reinterpret_cast<P2pChannel*>(base_ + channels_offset(geometry_) +
                                        sizeof(P2pChannel) * channel_index(geometry_, from, to, stream));
}

std::size_t Segment::ring_offset(int from, int to, int stream) const {
  return rings_offset(geometry_) +
         round_up_to(geometry_.ring_bytes, kPage) * channel_index(geometry_, from, to, stream);
}

void Segment::unlink_name() {
  if (unlinked_) return;
  unlinked_ = true;
  unlink_segment(name_);
}

}  // namespace dtrain::trainer
