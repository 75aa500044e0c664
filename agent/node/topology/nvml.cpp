#include "agent/node/topology/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "agent/node/topology/host_scan.h"

namespace dtrain::node::topo {
namespace {

// The C ABI of the few NVML calls used (nvml.h, NVML API version 12). Layouts and enum values are NVML's.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kInsufficientSize = 7;

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

struct nvmlProcessInfo_v2_t {  // what the _v2 and _v3 process queries fill
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct nvmlGpuFabricInfo_t {
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
};

constexpr unsigned kMaxLinks = 32;  // NVML_NVLINK_MAX_LINKS is 18 today; queries past the last link fail and are skipped
constexpr int kP2pCapsRead = 0;     // NVML_P2P_CAPS_INDEX_READ
constexpr int kEccUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0, kAggregateEcc = 1;

// An NVML entry point, looked up by the names it has had (newest first). A missing one (older driver) stays null and
// the facts it would give stay empty.
template <typename Signature>
class Entry;

template <typename R, typename... Args>
class Entry<R(Args...)> {
 public:
  Entry(void* lib, std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (void* sym = dlsym(lib, n)) {
        fn_ = reinterpret_cast<R (*)(Args...)>(sym);
        return;
      }
    }
  }
  explicit operator bool() const { return fn_ != nullptr; }
  R operator()(Args... args) const { return fn_(args...); }

 private:
  R (*fn_)(Args...) = nullptr;
};

// The entry points used, each beside the names it is looked up by.
struct Api {
  explicit Api(void* library) : lib(library) {}

  void* lib;
  Entry<nvmlReturn_t()> init{lib, {"nvmlInit_v2", "nvmlInit"}};
  Entry<nvmlReturn_t()> shutdown{lib, {"nvmlShutdown"}};
  Entry<const char*(nvmlReturn_t)> error_string{lib, {"nvmlErrorString"}};
  Entry<nvmlReturn_t(unsigned*)> count{lib, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}};
  Entry<nvmlReturn_t(unsigned, nvmlDevice_t*)> handle{lib, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}};
  Entry<nvmlReturn_t(nvmlDevice_t, char*, unsigned)> name{lib, {"nvmlDeviceGetName"}};
  Entry<nvmlReturn_t(nvmlDevice_t, nvmlPciInfo_t*)> pci{lib, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned*)> numa{lib, {"nvmlDeviceGetNumaNodeId"}};
  Entry<nvmlReturn_t(nvmlDevice_t, nvmlDevice_t, int*)> ancestor{lib, {"nvmlDeviceGetTopologyCommonAncestor"}};
  Entry<nvmlReturn_t(nvmlDevice_t, nvmlDevice_t, int, int*)> p2p{lib, {"nvmlDeviceGetP2PStatus"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned, int*)> link_state{lib, {"nvmlDeviceGetNvLinkState"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned, nvmlPciInfo_t*)> link_remote_pci{lib, {"nvmlDeviceGetNvLinkRemotePciInfo_v2"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned, int*)> link_remote_type{lib, {"nvmlDeviceGetNvLinkRemoteDeviceType"}};
  Entry<nvmlReturn_t(char*, unsigned)> driver_version{lib, {"nvmlSystemGetDriverVersion"}};
  Entry<nvmlReturn_t(int*)> cuda_version{lib, {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"}};
  Entry<nvmlReturn_t(nvmlDevice_t, int*)> persistence{lib, {"nvmlDeviceGetPersistenceMode"}};
  Entry<nvmlReturn_t(nvmlDevice_t, int, int, unsigned long long*)> ecc{lib, {"nvmlDeviceGetTotalEccErrors"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*)> remapped_rows{
      lib, {"nvmlDeviceGetRemappedRows"}};
  Entry<nvmlReturn_t(nvmlDevice_t, int, unsigned*, unsigned long long*)> retired_pages{lib, {"nvmlDeviceGetRetiredPages"}};
  Entry<nvmlReturn_t(nvmlDevice_t, int*)> retired_pending{lib, {"nvmlDeviceGetRetiredPagesPendingStatus"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned long long*)> clock_reasons{
      lib, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned*, nvmlProcessInfo_v2_t*)> processes{
      lib, {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned*)> pcie_width{lib, {"nvmlDeviceGetCurrPcieLinkWidth"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned*)> pcie_max_width{lib, {"nvmlDeviceGetMaxPcieLinkWidth"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned*)> pcie_gen{lib, {"nvmlDeviceGetCurrPcieLinkGeneration"}};
  Entry<nvmlReturn_t(nvmlDevice_t, unsigned*)> pcie_max_gen{lib, {"nvmlDeviceGetMaxPcieLinkGeneration"}};
  Entry<nvmlReturn_t(nvmlDevice_t, nvmlGpuFabricInfo_t*)> fabric{lib, {"nvmlDeviceGetGpuFabricInfo"}};
};

std::string bus_id_of(const nvmlPciInfo_t& info) {
  char text[40];
  if (info.busId[0] != '\0') {
    std::memcpy(text, info.busId, sizeof info.busId);
    text[sizeof info.busId] = '\0';
    return normalize_bdf(text);
  }
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.0", info.domain, info.bus, info.device);
  return text;
}

std::string describe(const Api& api, nvmlReturn_t rc) {
  const char* text = api.error_string ? api.error_string(rc) : nullptr;
  return text ? std::string(text) : "NVML error " + std::to_string(rc);
}

template <typename T, typename F, typename... Args>
std::optional<T> query(const F& fn, Args... args) {
  if (!fn) return std::nullopt;
  T value{};
  if (fn(args..., &value) != kSuccess) return std::nullopt;
  return value;
}

void read_health(const Api& api, nvmlDevice_t dev, NvmlGpu& gpu) {
  if (auto mode = query<int>(api.persistence, dev)) gpu.persistence_mode = *mode == 1;
  if (api.ecc) {
    unsigned long long n = 0;
    if (api.ecc(dev, kEccUncorrected, kVolatileEcc, &n) == kSuccess) gpu.ecc_uncorrected_volatile = n;
    if (api.ecc(dev, kEccUncorrected, kAggregateEcc, &n) == kSuccess) gpu.ecc_uncorrected_aggregate = n;
  }
  if (api.remapped_rows) {
    unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
    if (api.remapped_rows(dev, &corrected, &uncorrected, &pending, &failed) == kSuccess) {
      gpu.remapped_rows_uncorrectable = uncorrected;
      gpu.remap_pending = pending != 0;
      gpu.remap_failed = failed != 0;
    }
  }
  if (api.retired_pages) {
    unsigned total = 0;
    bool known = false;
    for (int cause = 0; cause < 2; ++cause) {  // multiple single-bit errors, double-bit error
      unsigned count = 0;
      if (api.retired_pages(dev, cause, &count, nullptr) == kSuccess) {
        total += count;
        known = true;
      }
    }
    if (known) gpu.retired_pages = total;
    if (auto pending = query<int>(api.retired_pending, dev)) gpu.retired_pages_pending = *pending == 1;
  }
  if (auto reasons = query<unsigned long long>(api.clock_reasons, dev)) gpu.clock_event_reasons = *reasons;
  if (api.processes) {
    std::vector<nvmlProcessInfo_v2_t> infos(8);
    unsigned count = static_cast<unsigned>(infos.size());
    nvmlReturn_t rc = api.processes(dev, &count, infos.data());
    if (rc == kInsufficientSize) {
      infos.resize(count + 8);
      count = static_cast<unsigned>(infos.size());
      rc = api.processes(dev, &count, infos.data());
    }
    if (rc == kSuccess) {
      std::vector<GpuProcess> procs;
      for (unsigned i = 0; i < count && i < infos.size(); ++i) procs.push_back({infos[i].pid, infos[i].usedGpuMemory});
      gpu.compute_processes = std::move(procs);
    }
  }
  gpu.pcie_width = query<unsigned>(api.pcie_width, dev);
  gpu.pcie_max_width = query<unsigned>(api.pcie_max_width, dev);
  gpu.pcie_gen = query<unsigned>(api.pcie_gen, dev);
  gpu.pcie_max_gen = query<unsigned>(api.pcie_max_gen, dev);
  if (api.fabric) {
    nvmlGpuFabricInfo_t info{};
    if (api.fabric(dev, &info) == kSuccess) {
      gpu.fabric_state = info.state;
      gpu.fabric_status = info.status;
    }
  }
}

// The links NVML knows on one GPU; the far end only of active ones.
std::vector<NvLink> read_nvlinks(const Api& api, nvmlDevice_t dev) {
  std::vector<NvLink> links;
  if (!api.link_state) return links;
  for (unsigned link = 0; link < kMaxLinks; ++link) {
    int state = 0;
    if (api.link_state(dev, link, &state) != kSuccess) continue;
    NvLink l;
    l.link = link;
    l.active = state == 1;
    nvmlPciInfo_t remote{};
    if (l.active && api.link_remote_pci && api.link_remote_pci(dev, link, &remote) == kSuccess) {
      l.remote_pci = bus_id_of(remote);
    }
    if (l.active) {
      if (auto type = query<int>(api.link_remote_type, dev, link)) l.remote_type = *type;
    }
    links.push_back(std::move(l));
  }
  return links;
}

NvmlGpu read_gpu(const Api& api, nvmlDevice_t dev, unsigned index) {
  NvmlGpu gpu;
  gpu.index = index;
  char name[96] = {};
  if (api.name && api.name(dev, name, sizeof name) == kSuccess) gpu.name = name;
  nvmlPciInfo_t pci{};
  if (api.pci && api.pci(dev, &pci) == kSuccess) gpu.pci = bus_id_of(pci);
  if (auto node = query<unsigned>(api.numa, dev); node && *node < 65536) gpu.numa_id = static_cast<int>(*node);
  gpu.nvlinks = read_nvlinks(api, dev);
  read_health(api, dev, gpu);
  return gpu;
}

// Per pair of GPUs: their common ancestor level and whether one can read the other's memory.
void read_pairs(const Api& api, const std::vector<nvmlDevice_t>& handles, NvmlFacts& facts) {
  for (std::size_t a = 0; a < handles.size(); ++a) {
    facts.gpus[a].ancestor.assign(facts.gpus.size(), -1);
    facts.gpus[a].p2p_read.assign(facts.gpus.size(), -1);
    for (std::size_t b = 0; b < handles.size(); ++b) {
      if (a == b) continue;
      if (auto level = query<int>(api.ancestor, handles[a], handles[b])) facts.gpus[a].ancestor[b] = *level;
      if (auto status = query<int>(api.p2p, handles[a], handles[b], kP2pCapsRead)) facts.gpus[a].p2p_read[b] = *status;
    }
  }
}

// Everything asked of a started NVML: the driver, then each GPU it can open (a GPU it cannot is named in the error).
void read_facts(const Api& api, NvmlFacts& facts) {
  facts.loaded = true;
  char text[96] = {};
  if (api.driver_version && api.driver_version(text, sizeof text) == kSuccess) facts.driver_version = text;
  facts.cuda_driver_version = query<int>(api.cuda_version);
  unsigned count = 0;
  nvmlReturn_t rc = api.count(&count);
  if (rc != kSuccess) facts.error = "nvmlDeviceGetCount failed: " + describe(api, rc);
  std::vector<nvmlDevice_t> handles;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    rc = api.handle(i, &dev);
    if (rc != kSuccess) {
      facts.error = "GPU " + std::to_string(i) + " is not accessible: " + describe(api, rc);
      continue;
    }
    facts.gpus.push_back(read_gpu(api, dev, i));
    handles.push_back(dev);
  }
  read_pairs(api, handles, facts);
}

}  // namespace

std::string level_name(int nvml_level) {
  switch (nvml_level) {
    case 0:
    case 10: return "PIX";  // INTERNAL (same board) prints as PIX too: one bridge at most
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
    default: return "";
  }
}

NvmlFacts read_nvml(const std::string& library) {
  NvmlFacts facts;
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::string why = dlerror();
    facts.error = library + " not found (no NVIDIA driver on this node)";
    if (why.find("No such file") == std::string::npos) facts.error += ": " + why;
    return facts;
  }
  const Api api(lib);
  if (!api.init || !api.count || !api.handle) {
    facts.error = library + " lacks nvmlInit/nvmlDeviceGetCount: driver too old";
  } else if (nvmlReturn_t rc = api.init(); rc != kSuccess) {
    facts.error = "NVML could not start: " + describe(api, rc);
  } else {
    read_facts(api, facts);
    if (api.shutdown) api.shutdown();
  }
  dlclose(lib);
  return facts;
}

}  // namespace dtrain::node::topo
