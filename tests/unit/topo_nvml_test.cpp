// read_nvml through dlopen: against a stand-in library with NVML's ABI (there is no GPU here), and without any.

#include <doctest/doctest.h>

#include "agent/node/topology/matrix.h"
#include "agent/node/topology/nvml.h"

using namespace dtrain::node::topo;

TEST_CASE("read_nvml fills every fact from the library's answers") {
  NvmlFacts f = read_nvml(DTRAIN_FAKE_NVML);
  REQUIRE(f.loaded);
  CHECK(f.error.empty());
  CHECK(f.driver_version == "570.133.20");
  CHECK(f.cuda_driver_version == 12080);
  REQUIRE(f.gpus.size() == 2);
  const NvmlGpu& g0 = f.gpus[0];
  const NvmlGpu& g1 = f.gpus[1];
  CHECK(g0.name == "NVIDIA H200");
  CHECK(g0.pci == "0000:1a:00.0");
  CHECK(g1.pci == "0000:9b:00.0");
  CHECK(!g0.numa_id);
  REQUIRE(g0.nvlinks.size() == 4);
  CHECK(g0.nvlinks[2].active == false);
  CHECK(g0.nvlinks[2].remote_pci.empty());
  CHECK(g0.nvlinks[3].remote_pci == "0000:9b:00.0");
  CHECK(g0.nvlinks[3].remote_type == 0);
  CHECK(g0.ancestor == std::vector<int>{-1, 40});
  CHECK(g1.p2p_read == std::vector<int>{0, -1});
  CHECK(nvlink_count(f, 0, 1) == 3);
  CHECK(g0.persistence_mode == true);
  CHECK(g1.persistence_mode == false);
  CHECK(g1.ecc_uncorrected_volatile == 0u);
  CHECK(g1.ecc_uncorrected_aggregate == 2u);
  CHECK(g1.remap_pending == true);
  CHECK(g1.remapped_rows_uncorrectable == 1u);
  CHECK(!g0.retired_pages);  // the library has no nvmlDeviceGetRetiredPages
  CHECK(g0.clock_event_reasons == kClockHwThermal);
  REQUIRE(g0.compute_processes);
  REQUIRE(g0.compute_processes->size() == 10);
  CHECK(g0.compute_processes->at(9).pid == 1009u);
  CHECK(g0.compute_processes->at(9).used_bytes == 10ull * 1024 * 1024);
  CHECK(g1.compute_processes->empty());
  CHECK(g1.pcie_width == 8u);
  CHECK(g1.pcie_max_width == 16u);
  CHECK(g0.pcie_max_gen == 5u);
  CHECK(!g0.fabric_state);
}

TEST_CASE("no library: not loaded, and the reason says there is no driver") {
  NvmlFacts f = read_nvml("libnvidia-ml-absent.so.1");
  CHECK(!f.loaded);
  CHECK(f.gpus.empty());
  CHECK(f.error == "libnvidia-ml-absent.so.1 not found (no NVIDIA driver on this node)");
}

TEST_CASE("bus ids normalise to the sysfs form") {
  CHECK(normalize_bdf("00000000:1A:00.0") == "0000:1a:00.0");
  CHECK(normalize_bdf("0000:1a:00.0") == "0000:1a:00.0");
  CHECK(normalize_bdf("00010000:01:00.0") == "10000:01:00.0");
}
