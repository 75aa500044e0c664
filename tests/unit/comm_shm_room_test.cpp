// A segment directory without room for a segment's staging slots: a 1 MiB tmpfs of the test's own (DTRAIN_SHM_DIR,
// trainer/comm/shm/segment.h), since /dev/shm itself cannot be filled safely. Mounting needs root; without it the
// tests say SKIPPED and why.
#include <doctest/doctest.h>

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/unit/scoped_env.h"
#include "tests/unit/temp_dir.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/shm/segment.h"
#include "tests/unit/contains.h"

using dtrain::trainer::CommError;
using dtrain::trainer::Segment;
using dtrain::trainer::SegmentGeometry;

namespace {

// A 1 MiB tmpfs on a fresh directory, unmounted afterwards; mounted() is false (with why()) where that is not allowed.
class SmallTmpfs {
 public:
  SmallTmpfs() : dir_("comm-shm-room") {
    if (::geteuid() != 0) {
      why_ = "not root: mounting a 1 MiB tmpfs needs root";
    } else if (::mount("tmpfs", dir_.path.c_str(), "tmpfs", 0, "size=1m") != 0) {
      why_ = std::string("mount -t tmpfs -o size=1m failed: ") + std::strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.path.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_.path; }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

SegmentGeometry ranks(int n) {
  SegmentGeometry geometry;
  geometry.ranks = n;
  return geometry;
}

}  // namespace

TEST_CASE("a full segment directory: create names posix_fallocate's error, where, and the fix; nothing is left") {
  SmallTmpfs tmpfs;
  if (!tmpfs.mounted()) {
    MESSAGE("SKIPPED: " << tmpfs.why());
    return;
  }
  ScopedEnv env({{"DTRAIN_SHM_DIR", tmpfs.path().c_str()}});
  // 2 ranks x 2 staging slots of 1 MiB each cannot fit in 1 MiB.
  const std::string shortfall = Segment::room_shortfall(ranks(2));
  CHECK(contains(shortfall, tmpfs.path() + " has 1.0 MiB free (of 1.0 MiB); a segment of 2 ranks reserves 4.0 MiB"));

  std::string message;
  try {
    Segment::create("room-test", ranks(2));
  } catch (const CommError& error) {
    message = error.what();
  }
  CAPTURE(message);
  // posix_fallocate returns the error; errno is left as it was (a stale "Operation now in progress" once).
  CHECK(contains(message, "posix_fallocate: No space left on device"));
  CHECK(contains(message, tmpfs.path() + "/room-test"));
  CHECK(contains(message, "4.0 MiB for 2 ranks' staging slots"));
  CHECK(contains(message, "docker run --shm-size"));
  CHECK(contains(message, "DTRAIN_COMM_BACKEND=gloo"));
  CHECK(std::filesystem::is_empty(tmpfs.path()));
}

TEST_CASE("a segment that fits the directory is created there, and its name goes with unlink_name") {
  SmallTmpfs tmpfs;
  if (!tmpfs.mounted()) {
    MESSAGE("SKIPPED: " << tmpfs.why());
    return;
  }
  ScopedEnv env({{"DTRAIN_SHM_DIR", tmpfs.path().c_str()}});
  SegmentGeometry small = ranks(2);
  small.chunk_bytes = 64 << 10;
  CHECK(Segment::room_shortfall(small).empty());
  auto segment = Segment::create("room-test", small);
  CHECK(std::filesystem::exists(tmpfs.path() + "/room-test"));
  segment->unlink_name();
  CHECK(std::filesystem::is_empty(tmpfs.path()));
}
