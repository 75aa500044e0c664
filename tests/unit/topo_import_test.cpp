// `dtrain topo --import`: real nvidia-smi outputs parse, render back byte for byte, and give the expected analysis.

#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/node/topology/import.h"
#include "agent/node/topology/report.h"

using namespace dtrain::node::topo;

namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(DTRAIN_TOPO_FIXTURES) + "/" + name);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string expand_tabs(const std::string& text) {
  std::string out;
  std::size_t column = 0;
  for (char c : text) {
    if (c == '\t') {
      do {
        out += ' ';
        ++column;
      } while (column % 8 != 0);
    } else {
      out += c;
      column = c == '\n' ? 0 : column + 1;
    }
  }
  return out;
}

std::string full_render(const Matrix& m) {
  std::string out = render_matrix(m) + "\n\n" + render_legend();
  std::string nic = render_nic_legend(m);
  if (!nic.empty()) out += "\n" + nic;
  return out;
}

std::vector<std::vector<std::string>> split_fields(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line) && !line.empty()) {
    std::istringstream words(line);
    std::vector<std::string> row;
    std::string w;
    while (words >> w) row.push_back(w);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST_CASE("a real H200 VM output with the driver's terminal escapes around the header") {
  const std::string text = fixture("h200_1gpu_vm_ansi.txt");
  REQUIRE(text.find("\x1b[4m") != std::string::npos);
  Matrix m = parse_nvidia_smi_topo(text);
  CHECK(m.gpus == std::vector<std::string>{"GPU0"});
  CHECK(m.cell(0, 0) == "X");
  CHECK(m.cpu_affinity == std::vector<std::string>{"0-15"});
  CHECK(m.numa_affinity == std::vector<std::string>{"0"});
  CHECK(m.gpu_numa_id == std::vector<std::string>{"N/A"});
  // The matrix comes back as the driver wrote it, less the escapes.
  std::string plain = text;
  for (const std::string escape : {"\x1b[4m", "\x1b[0m"}) plain.erase(plain.find(escape), escape.size());
  CHECK(render_matrix(m) + "\n" == plain.substr(0, plain.find("\n\n") + 1));
}

TEST_CASE("the 2-GPU tab fixture renders back byte for byte") {
  std::string text = fixture("pcie_2x5090_tabs.txt");
  Matrix m = parse_nvidia_smi_topo(text);
  CHECK(m.gpus == std::vector<std::string>{"GPU0", "GPU1"});
  CHECK(m.nic_labels.empty());
  CHECK(m.cell(0, 1) == "PHB");
  CHECK(m.cell(1, 0) == "PHB");
  CHECK(m.cpu_affinity == std::vector<std::string>{"0-63", "0-63"});
  CHECK(m.numa_affinity == std::vector<std::string>{"0", "0"});
  CHECK(m.gpu_numa_id == std::vector<std::string>{"N/A", "N/A"});
  CHECK(render_matrix(m) + "\n" == text.substr(0, text.find("\n\n") + 1));
  CHECK(full_render(m) == text);
}

TEST_CASE("the HGX fixture (tabs expanded to spaces) renders back cell by cell and byte for byte") {
  std::string text = fixture("hgx_h100_8gpu_8nic.txt");
  Matrix m = parse_nvidia_smi_topo(text);
  REQUIRE(m.gpus.size() == 8);
  REQUIRE(m.nic_labels.size() == 8);
  CHECK(m.nic_names.front() == "mlx5_0");
  CHECK(m.nic_names.back() == "mlx5_7");
  CHECK(m.cell(0, 1) == "NV18");
  CHECK(m.cell(0, 8) == "PIX");
  CHECK(m.cell(0, 12) == "SYS");
  CHECK(m.cell(9, 8) == "NODE");
  CHECK(m.cpu_affinity[4] == "48-95,144-191");
  CHECK(m.numa_affinity[7] == "1");

  // Cell by cell: the whitespace-separated fields of the original and of the re-rendered matrix are equal.
  std::string rendered = render_matrix(m);
  auto original = split_fields(text);
  auto again = split_fields(rendered);
  REQUIRE(original.size() == again.size());
  for (std::size_t r = 0; r < original.size(); ++r) CHECK(original[r] == again[r]);
  // Byte for byte once the tabs are expanded the way the fixture's were.
  CHECK(expand_tabs(full_render(m)) == text);
  // And parsing the rendered form gives the same matrix.
  Matrix reparsed = parse_nvidia_smi_topo(full_render(m));
  CHECK(reparsed.cells == m.cells);
  CHECK(reparsed.nic_names == m.nic_names);
}

TEST_CASE("HGX import: one PIX NIC per GPU, rail env, CPU shares within each socket, no warning") {
  Report r = analyze_import(fixture("hgx_h100_8gpu_8nic.txt"));
  REQUIRE(r.gpus.size() == 8);
  REQUIRE(r.local_ranks.size() == 8);
  for (unsigned i = 0; i < 8; ++i) {
    INFO("GPU" << i);
    REQUIRE(r.gpus[i].nics.size() == 1);
    CHECK(r.gpus[i].nics[0].name == "mlx5_" + std::to_string(i));
    CHECK(r.gpus[i].nics[0].path == "PIX");
    CHECK(r.local_ranks[i].gpu == i);
    CHECK(r.local_ranks[i].nic == "mlx5_" + std::to_string(i));
    CHECK(r.local_ranks[i].numa == (i < 4 ? "0" : "1"));
    CHECK(!r.gpus[i].name);
    CHECK(!r.gpus[i].pci);
  }
  CHECK(r.local_ranks[0].cpus == "0-11,96-107");
  CHECK(r.local_ranks[1].cpus == "12-23,108-119");
  CHECK(r.local_ranks[3].cpus == "36-47,132-143");
  CHECK(r.local_ranks[4].cpus == "48-59,144-155");
  CHECK(r.local_ranks[7].cpus == "84-95,180-191");
  using Env = std::vector<std::pair<std::string, std::string>>;
  CHECK(r.local_ranks[5].env ==
        Env{{"NCCL_IB_HCA", "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"}, {"NCCL_CROSS_NIC", "0"}});
  CHECK(r.warnings.empty());

  auto json = nlohmann::json::parse(render_json(r));
  CHECK(json["gpus"][4]["index"] == 4);
  CHECK(json["gpus"][4]["cpu_affinity"] == "48-95,144-191");
  CHECK(json["gpus"][4]["numa"] == "1");
  CHECK(json["gpus"][4]["name"].is_null());
  CHECK(json["gpus"][4]["nics"][0] == nlohmann::json({{"name", "mlx5_4"}, {"path", "PIX"}}));
  CHECK(json["nics"][2]["name"] == "mlx5_2");
  CHECK(json["nics"][2]["pci"].is_null());
  CHECK(json["nics"][2]["ports"].is_null());
  CHECK(json["matrix"]["GPU0"]["GPU1"] == "NV18");
  CHECK(json["matrix"]["GPU0"]["NIC0"] == "PIX");
  CHECK(json["matrix"]["NIC3"]["GPU4"] == "SYS");
  CHECK(!json["matrix"]["GPU0"].contains("GPU0"));
  CHECK(json["local_ranks"][6]["gpu"] == 6);
  CHECK(json["local_ranks"][6]["nic"] == "mlx5_6");
  CHECK(json["local_ranks"][6]["env"]["NCCL_CROSS_NIC"] == "0");
  CHECK(json["warnings"].empty());
  CHECK(json.size() == 5);
}

TEST_CASE("2-GPU import: no NIC, each rank gets half the CPUs, nothing to set") {
  Report r = analyze_import(fixture("pcie_2x5090_tabs.txt"));
  REQUIRE(r.local_ranks.size() == 2);
  CHECK(r.local_ranks[0].cpus == "0-31");
  CHECK(r.local_ranks[1].cpus == "32-63");
  CHECK(!r.local_ranks[0].nic);
  CHECK(r.local_ranks[0].env.empty());
  CHECK(r.warnings.empty());
  auto json = nlohmann::json::parse(render_json(r));
  CHECK(json["local_ranks"][1]["nic"].is_null());
  CHECK(json["gpus"][1]["nics"].empty());
}

TEST_CASE("older driver layout: SOC, NIC columns named by device, no NUMA columns, spaces") {
  std::string text =
      "        GPU0    GPU1    GPU2    GPU3    mlx5_0  mlx5_1  CPU Affinity\n"
      "GPU0     X      PIX     SOC     SOC     PIX     SOC     0-11,24-35\n"
      "GPU1    PIX      X      SOC     SOC     PIX     SOC     0-11,24-35\n"
      "GPU2    SOC     SOC      X      PHB     SOC     PXB     12-23,36-47\n"
      "GPU3    SOC     SOC     PHB      X      SOC     PXB     12-23,36-47\n"
      "mlx5_0  PIX     PIX     SOC     SOC      X      SOC     \n"
      "mlx5_1  SOC     SOC     PXB     PXB     SOC      X      \n"
      "\n"
      "Legend:\n"
      "\n"
      "  X   = Self\n"
      "  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)\n";
  Matrix m = parse_nvidia_smi_topo(text);
  CHECK(!m.nic_legend);
  CHECK(!m.has_numa_affinity);
  CHECK(!m.has_gpu_numa_id);
  CHECK(m.nic_names == std::vector<std::string>{"mlx5_0", "mlx5_1"});
  CHECK(m.cell(2, 5) == "PXB");
  Matrix again = parse_nvidia_smi_topo(render_matrix(m));
  CHECK(again.cells == m.cells);
  CHECK(again.nic_labels == m.nic_labels);
  CHECK(render_nic_legend(m).empty());

  Report r = analyze_import(text);
  CHECK(r.gpus[0].nics.size() == 1);
  CHECK(r.local_ranks[0].nic == "mlx5_0");
  CHECK(r.local_ranks[1].nic == "mlx5_0");
  CHECK(r.local_ranks[2].nic == "mlx5_1");
  CHECK(r.local_ranks[0].cpus == "0-5,24-29");
  CHECK(!r.local_ranks[0].numa);
  CHECK(r.local_ranks[0].env == std::vector<std::pair<std::string, std::string>>{{"NCCL_IB_HCA", "=mlx5_0,mlx5_1"}});
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].find("GPU0-GPU2, GPU0-GPU3, GPU1-GPU2, GPU1-GPU3") != std::string::npos);
}

TEST_CASE("a NIC only reachable across sockets is warned about") {
  std::string text =
      "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \tNV4\tNODE\t0-15\t0\t\tN/A\n"
      "GPU1\tNV4\t X \tSYS\t16-31\t1\t\tN/A\n"
      "NIC0\tNODE\tSYS\t X \n"
      "\nNIC Legend:\n\n  NIC0: mlx5_bond_0\n";
  Report r = analyze_import(text);
  CHECK(r.nics[0].name == "mlx5_bond_0");
  CHECK(r.gpus[1].nics[0].path == "SYS");
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].find("GPU1 has no NIC closer than SYS") == 0);
  CHECK(render_matrix(parse_nvidia_smi_topo(text)) + "\n" == text.substr(0, text.find("\n\n") + 1));
}

TEST_CASE("malformed input names the line and what is wrong") {
  std::string text = fixture("hgx_h100_8gpu_8nic.txt");
  std::string cut = text;
  auto row = cut.find("GPU3    NV18");
  cut.erase(cut.find("PIX", row), 4);
  CHECK_THROWS_WITH_AS(parse_nvidia_smi_topo(cut), doctest::Contains("line 5: row GPU3 has"), ImportError);
  CHECK_THROWS_AS(parse_nvidia_smi_topo(""), ImportError);
  CHECK_THROWS_WITH_AS(parse_nvidia_smi_topo("hello\nworld\n"), doctest::Contains("CPU Affinity"), ImportError);
}

TEST_CASE("a row of only vertical tab or form feed ends the matrix like a blank line") {
  // Found by fuzzing: such a row counted as not blank but had no fields, and the parser read fields[0] of an empty
  // vector. It now ends the matrix, so the missing rows are named.
  for (const char* space : {"\v", "\f", "\v \f\t"}) {
    const std::string text = std::string("\tGPU0\tGPU1\tCPU Affinity\nGPU0\tX\tNV4\t0-7\n") + space + "\n";
    CHECK_THROWS_WITH_AS(parse_nvidia_smi_topo(text), doctest::Contains("ends after 1 rows"), ImportError);
  }
}

TEST_CASE("bytes that are not UTF-8 still render as JSON (U+FFFD), not as an exception") {
  // Found by fuzzing (tests/fuzz/topology_import.cpp): `dtrain topo --import FILE --json` aborted on a file whose
  // NIC legend held a byte that is not UTF-8.
  std::string text = fixture("hgx_h100_8gpu_8nic.txt");
  text.replace(text.find("NIC0: mlx5_0"), 12, "NIC0: mlx5_\xff");
  const Report r = analyze_import(text);
  std::string json;
  REQUIRE_NOTHROW(json = render_json(r));
  CHECK(json.find("mlx5_\xef\xbf\xbd") != std::string::npos);
  CHECK(nlohmann::json::accept(json));
}

TEST_CASE("cpu shares keep hyperthread siblings together and cover every CPU once") {
  CHECK(cpu_share("0-47,96-143", 0, 4) == "0-11,96-107");
  CHECK(cpu_share("0-63", 1, 2) == "32-63");
  CHECK(cpu_share("0-7", 0, 1) == "0-7");
  CHECK(cpu_share("0,2,4,6,8,10", 1, 3) == "4,6");
  CHECK(cpu_share("0-9", 2, 3) == "6-9");
}
