// The facts of this host that `dtrain run` resolves torchrun's options against (HostFacts, torchrun_options.h): CPUs,
// GPUs, the Slurm step's variables and first host, whether a host is this machine, whether a port is free. Apart from
// the options themselves, so that tests give their own.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cli/run/torchrun_options.h"
#include "common/io/text_out.h"

namespace dtrain::cli::run {
namespace {

// The first line `command` prints (at most 4 KiB), without its newline; "" when it fails.
std::string first_line_of(const std::string& command) {
  std::FILE* p = ::popen((command + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return "";
  std::string line(4096, '\0');
  const bool got = std::fgets(line.data(), static_cast<int>(line.size()), p) != nullptr;
  ::pclose(p);
  if (!got) return "";
  line.resize(std::strlen(line.c_str()));
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// The allocation's first node (`scontrol show hostnames LIST`), as the address Slurm reaches it at: its NodeAddr
// (`scontrol -o show node NAME`), which is its name unless slurm.conf says otherwise. "" when it cannot be had.
std::string first_slurm_host(const std::string& list) {
  if (list.empty()) return "";
  const std::string name = first_line_of("scontrol show hostnames " + shell_quote(list));
  if (name.empty()) return "";
  const std::string node = first_line_of("scontrol -o show node " + shell_quote(name));
  const auto at = node.find("NodeAddr=");
  if (at == std::string::npos) return name;
  const auto end = node.find(' ', at);
  const std::string addr = node.substr(at + 9, end == std::string::npos ? std::string::npos : end - at - 9);
  return addr.empty() ? name : addr;
}

}  // namespace

HostFacts HostFacts::current() {
  HostFacts h;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  h.cpu_count = cpus > 0 ? static_cast<int>(cpus) : 1;
  std::error_code ec;
  h.gpu_count = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)e;
    ++h.gpu_count;
  }
  if (const char* py = std::getenv("DTRAIN_PYTHON"); py && *py) h.python = py;
  if (const char* id = std::getenv("SLURM_NODEID")) h.slurm_node_id = id;
  if (const char* n = std::getenv("SLURM_STEP_NUM_NODES")) h.slurm_step_nodes = n;
  h.slurm_first_host = [] {
    const char* list = std::getenv("SLURM_STEP_NODELIST");
    if (list == nullptr) list = std::getenv("SLURM_JOB_NODELIST");
    if (list == nullptr) list = std::getenv("SLURM_NODELIST");
    return first_slurm_host(list ? list : "");
  };
  // A host is this machine's when one of its addresses is loopback or can be bound here.
  h.local_host = [](const std::string& host) -> std::string {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0) return std::string("cannot be resolved: ") + gai_strerror(rc);
    bool local = false;
    for (addrinfo* ai = res; ai && !local; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, SOCK_STREAM, 0);
      if (fd < 0) continue;
      local = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;  // port 0: any; fails for another machine's address
      close(fd);
    }
    freeaddrinfo(res);
    return local ? "" : "is not an address of this machine";
  };
  h.port_free = [](const std::string& host, int port) -> std::string {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return "cannot be resolved";
    std::string why;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, SOCK_STREAM, 0);
      if (fd < 0) continue;
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as a listener would: TIME_WAIT is no conflict
      if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        why = errno == EADDRINUSE ? "is in use" : std::string("cannot be bound: ") + std::strerror(errno);
      }
      close(fd);
      if (!why.empty()) break;
    }
    freeaddrinfo(res);
    return why;
  };
  return h;
}

}  // namespace dtrain::cli::run
