// Live inputs of the doctor: this machine's sysfs/procfs, NVML, NCCL, limits, /dev/shm, disks, environment.

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "agent/node/doctor/checks.h"
#include "agent/node/doctor/cpu_gemm_check.h"

extern char** environ;

namespace dtrain::node::doctor {
namespace {

namespace fs = std::filesystem;

std::optional<Rlimit> read_limit(int resource) {
  rlimit lim{};
  if (getrlimit(resource, &lim) != 0) return std::nullopt;
  Rlimit out;
  if (lim.rlim_cur != RLIM_INFINITY) out.soft = lim.rlim_cur;
  if (lim.rlim_max != RLIM_INFINITY) out.hard = lim.rlim_max;
  return out;
}

NcclLibrary find_nccl(const std::vector<std::string>& candidates) {
  NcclLibrary lib;
  for (const auto& name : candidates) {
    // Kept loaded: unloading NCCL from a running process is not safe, and a second dlopen is only a refcount.
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      if (!lib.error.empty()) lib.error += "; ";
      lib.error += why ? why : name + ": not loadable";
      continue;
    }
    auto get_version = reinterpret_cast<int (*)(int*)>(dlsym(handle, "ncclGetVersion"));
    if (get_version == nullptr) {
      lib.error += (lib.error.empty() ? "" : "; ") + name + " has no ncclGetVersion";
      continue;
    }
    int code = 0;
    if (get_version(&code) != 0) {
      lib.error += (lib.error.empty() ? "" : "; ") + name + ": ncclGetVersion failed";
      continue;
    }
    lib.found = true;
    lib.version_code = code;
    Dl_info info{};
    lib.path = dladdr(reinterpret_cast<void*>(get_version), &info) != 0 && info.dli_fname ? info.dli_fname : name;
    lib.error.clear();
    return lib;
  }
  return lib;
}

DiskSpace probe_disk(const std::string& purpose, const std::string& path) {
  DiskSpace d;
  d.purpose = purpose;
  d.path = path;
  if (path.empty()) return d;
  std::error_code ec;
  fs::path probe = fs::absolute(path, ec);
  while (!probe.empty() && !fs::exists(probe, ec) && probe != probe.parent_path()) probe = probe.parent_path();
  d.probed = fs::exists(fs::path(path), ec) ? path : probe.string();
  struct statvfs st {};
  if (statvfs(probe.c_str(), &st) != 0) {
    d.error = "statvfs(" + probe.string() + "): " + std::strerror(errno);
    return d;
  }
  d.free_bytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  d.total_bytes = static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize;
  return d;
}

}  // namespace

DoctorInputs gather_inputs(const GatherOptions& options) {
  DoctorInputs in;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  in.node = host;
  in.nvml = topo::read_nvml(options.nvml_library);
  in.host = topo::scan_host(options.roots);
  for (const auto& d : in.host.pci) {
    if (topo::is_nvidia_gpu(d)) in.nvidia_pci_gpus.push_back(d.bdf);
  }
  fs::path sysfs(options.roots.sysfs), procfs(options.roots.procfs);
  std::error_code ec;
  for (const char* module : {"nvidia_peermem", "nv_peer_mem"}) {
    if (fs::exists(sysfs / "module" / module, ec)) in.gdr_modules.push_back(module);
  }
  for (fs::directory_iterator it(procfs, ec), end; !ec && it != end; it.increment(ec)) {
    std::string pid = it->path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(it->path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name == "nv-fabricmanager") {
      in.fabric_manager_running = true;
      break;
    }
  }
  in.nccl = find_nccl(options.nccl_libraries);
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq != std::string::npos) in.env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  in.memlock = read_limit(RLIMIT_MEMLOCK);
  in.nofile = read_limit(RLIMIT_NOFILE);
  struct statvfs st {};
  if (statvfs(options.shm_path.c_str(), &st) == 0) {
    in.shm_total_bytes = static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize;
  } else {
    in.shm_error = options.shm_path + ": " + std::strerror(errno);
  }
  in.disks.push_back(probe_disk("logs", options.log_dir));
  in.disks.push_back(probe_disk("checkpoints", options.checkpoint_dir));
  in.cpu_gemm = gather_cpu_gemm(options.gemm_trainer);
  return in;
}

}  // namespace dtrain::node::doctor
