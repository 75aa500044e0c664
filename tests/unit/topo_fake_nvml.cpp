// A stand-in for libnvidia-ml.so.1 with NVML's C ABI and fixed answers, so the dlopen path of read_nvml (symbol
// lookup, struct layouts, error codes, bus id forms, retry on a short buffer) runs on machines without a GPU.
// Two GPUs joined by NVLinks 0, 1 and 3 (link 2 down); nvmlDeviceGetRetiredPages is deliberately absent.

#include <cstring>

extern "C" {

typedef int nvmlReturn_t;
struct nvmlDevice_st {
  unsigned index;
};
typedef nvmlDevice_st* nvmlDevice_t;

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};

static nvmlDevice_st devices[2] = {{0}, {1}};
static const char* bus_ids[2] = {"00000000:1A:00.0", "00000000:9B:00.0"};
static const unsigned kProcesses = 10;  // on GPU0: more than read_nvml's first buffer holds

static nvmlPciInfo_t pci_of(unsigned i) {
  nvmlPciInfo_t p{};
  std::strcpy(p.busIdLegacy, "0000:1A:00.0");
  p.domain = 0;
  p.bus = i == 0 ? 0x1a : 0x9b;
  std::strcpy(p.busId, bus_ids[i]);
  return p;
}

nvmlReturn_t nvmlInit_v2() { return 0; }
nvmlReturn_t nvmlShutdown() { return 0; }
const char* nvmlErrorString(nvmlReturn_t r) { return r == 3 ? "Not Supported" : "Unknown Error"; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n) { *n = 2; return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t* d) {
  if (i >= 2) return 2;
  *d = &devices[i];
  return 0;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t, char* name, unsigned len) {
  std::strncpy(name, "NVIDIA H200", len);
  return 0;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* p) {
  *p = pci_of(d->index);
  return 0;
}
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t, unsigned*) { return 3; }
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t, nvmlDevice_t, int* level) {
  *level = 40;
  return 0;
}
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t, nvmlDevice_t, int index, int* status) {
  *status = index == 0 ? 0 : 6;
  return 0;
}
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned link, int* active) {
  if (link >= 4) return 2;
  *active = link == 2 ? 0 : 1;
  return 0;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned, nvmlPciInfo_t* p) {
  *p = pci_of(1 - d->index);
  return 0;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t, unsigned, int* type) {
  *type = 0;
  return 0;
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned len) {
  std::strncpy(v, "570.133.20", len);
  return 0;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  *v = 12080;
  return 0;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int* mode) {
  *mode = d->index == 0 ? 1 : 0;
  return 0;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long* n) {
  *n = (type == 1 && counter == 1 && d->index == 1) ? 2 : 0;
  return 0;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned* corr, unsigned* unc, unsigned* pending, unsigned* failed) {
  *corr = 0;
  *unc = d->index;
  *pending = d->index;
  *failed = 0;
  return 0;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long* r) {
  *r = d->index == 0 ? 0x40 : 0x1;
  return 0;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned* count, nvmlProcessInfo_t* infos) {
  unsigned have = d->index == 0 ? kProcesses : 0;
  if (*count < have) {
    *count = have;
    return 7;
  }
  for (unsigned i = 0; i < have; ++i) infos[i] = {1000 + i, (i + 1) * 1024ull * 1024, 0xffffffff, 0xffffffff};
  *count = have;
  return 0;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned* w) {
  *w = d->index == 1 ? 8 : 16;
  return 0;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t, unsigned* w) {
  *w = 16;
  return 0;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t, unsigned* g) {
  *g = 1;
  return 0;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t, unsigned* g) {
  *g = 5;
  return 0;
}
nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t, void*) { return 3; }

}  // extern "C"
