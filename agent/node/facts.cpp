#include "agent/node/facts.h"

#include "common/os/cpu_list.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dtrain::node {
namespace {

std::string read_first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::vector<std::pair<std::string, std::string>> interface_addresses() {
  std::vector<std::pair<std::string, std::string>> up, loopback;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if ((it->ifa_flags & IFF_UP) == 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    auto* sin = reinterpret_cast<sockaddr_in*>(it->ifa_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text) == nullptr) continue;
    ((it->ifa_flags & IFF_LOOPBACK) ? loopback : up).emplace_back(it->ifa_name, text);
  }
  freeifaddrs(list);
  up.insert(up.end(), loopback.begin(), loopback.end());
  return up;
}

std::vector<unsigned> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<unsigned> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < std::max(1L, n); ++i) cpus.push_back(static_cast<unsigned>(i));
    return cpus;
  }
  for (unsigned i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  return cpus;
}

}  // namespace

std::string source_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return {};
  std::string address;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) != nullptr) {
      address = text;
    }
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(found);
  return address;
}

Result<std::uint64_t> parse_mem_total(const std::string& meminfo) {
  std::stringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::stringstream fields(line.substr(9));
    std::string number, unit, rest;
    fields >> number >> unit;
    // The kernel writes kB (KiB) for every size in this file; another unit or a trailing word is not this format.
    const bool digits = !number.empty() && number.size() <= 15 &&
                        std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || unit != "kB" || (fields >> rest)) {
      return {Status(StatusCode::invalid_argument,
                     "meminfo: MemTotal line \"" + line + "\" is not \"MemTotal: <number> kB\"; the node's RAM is "
                     "not known, so the launcher cannot judge its ranks' memory")};
    }
    return {{}, std::stoull(number) * 1024};
  }
  return {Status(StatusCode::not_found, "meminfo: no MemTotal line; the node's RAM is not known, so the launcher "
                                        "cannot judge its ranks' memory")};
}

std::vector<int> numa_of_cpus(const std::vector<unsigned>& cpus, const std::string& sysfs_root) {
  std::vector<int> numa(cpus.size(), 0);
  std::error_code ec;
  std::filesystem::directory_iterator dir(std::filesystem::path(sysfs_root) / "devices/system/node", ec);
  if (ec) return numa;
  for (const auto& entry : dir) {
    std::string name = entry.path().filename();
    if (name.rfind("node", 0) != 0 || name.size() == 4) continue;
    if (!std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    int node = std::stoi(name.substr(4));
    for (unsigned cpu : parse_cpu_list(read_first_line(entry.path() / "cpulist"))) {
      auto at = std::find(cpus.begin(), cpus.end(), cpu);
      if (at != cpus.end()) numa[at - cpus.begin()] = node;
    }
  }
  return numa;
}

Facts gather_facts(const std::string& sysfs_root, const std::string& procfs_root) {
  Facts facts;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  facts.hostname = host;
  facts.host_id = read_first_line("/etc/machine-id");
  if (facts.host_id.empty()) facts.host_id = facts.hostname;
  facts.interfaces = interface_addresses();
  for (const auto& [name, address] : facts.interfaces) facts.addresses.push_back(address);
  facts.cpus = affinity_cpus();
  facts.cpu_numa = numa_of_cpus(facts.cpus, sysfs_root);
  std::error_code ec;
  std::filesystem::directory_iterator gpus(std::filesystem::path(procfs_root) / "driver/nvidia/gpus", ec);
  if (!ec) facts.gpu_count = static_cast<unsigned>(std::distance(gpus, std::filesystem::directory_iterator{}));
  utsname uts{};
  if (uname(&uts) == 0) facts.kernel = uts.release;
  // Unreadable or unparsable stays 0: the launcher then leaves this node's RAM out of its diagnoses.
  std::ifstream meminfo(std::filesystem::path(procfs_root) / "meminfo");
  std::stringstream text;
  text << meminfo.rdbuf();
  if (auto total = parse_mem_total(text.str()); total.ok()) facts.mem_total_bytes = total.value;
  return facts;
}

}  // namespace dtrain::node
