#include "agent/job/node_resources.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "worker/shm_segment_name.h"

namespace dtrain::agent {

std::string shm_prefix_of(const GroupSpec& group) {
  if (group.workers.empty()) return {};
  const auto& env = group.workers.front().env;
  const auto job = env.find("DTRAIN_JOB_ID");
  const auto node = env.find("DTRAIN_NODE_RANK");
  if (job == env.end() || job->second.empty() || node == env.end()) return {};
  char* end = nullptr;
  const unsigned long node_rank = std::strtoul(node->second.c_str(), &end, 10);
  if (end == node->second.c_str() || *end != '\0') return {};
  return worker::shm_job_prefix(job->second, static_cast<std::uint32_t>(node_rank));
}

unsigned remove_shm_segments(const std::string& dir, const std::string& prefix) {
  if (prefix.empty()) return 0;
  DIR* entries = ::opendir(dir.c_str());
  if (entries == nullptr) return 0;
  unsigned removed = 0;
  while (const dirent* entry = ::readdir(entries)) {
    if (std::string_view(entry->d_name).rfind(prefix, 0) != 0) continue;
    removed += ::unlinkat(::dirfd(entries), entry->d_name, 0) == 0;
  }
  ::closedir(entries);
  return removed;
}

unsigned reserve_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  unsigned port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace dtrain::agent
