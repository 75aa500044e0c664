#include "agent/node/topology/host_scan.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dtrain::node::topo {
namespace {

namespace fs = std::filesystem;

std::string read_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

std::optional<unsigned long> read_number(const fs::path& path, int base) {
  std::string text = read_line(path);
  if (text.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    unsigned long value = std::stoul(text, &used, base);
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool is_bdf(const std::string& s) {
  // DDDD:BB:DD.F with a domain of four or more hex digits.
  auto colon = s.find(':');
  if (colon == std::string::npos || colon < 4) return false;
  if (s.size() != colon + 8 || s[colon + 3] != ':' || s[colon + 6] != '.') return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i == colon || i == colon + 3 || i == colon + 6) continue;
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

std::vector<std::string> components(const fs::path& path) {
  std::vector<std::string> out;
  for (const auto& part : path) out.push_back(part.string());
  return out;
}

// Nearest PCI function at or above a sysfs device path ("" when none).
std::string nearest_bdf(const fs::path& path) {
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  if (ec) return {};
  std::string found;
  for (const auto& part : real) {
    if (is_bdf(part.string())) found = part.string();
  }
  return found;
}

// "4: ACTIVE" -> "ACTIVE"
std::string after_colon(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) return text;
  std::size_t start = colon + 1;
  while (start < text.size() && text[start] == ' ') ++start;
  return text.substr(start);
}

std::vector<std::string> default_route_interfaces(const fs::path& procfs) {
  std::ifstream in(procfs / "net/route");
  std::string line;
  std::getline(in, line);  // header
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string iface, destination, gateway, flags, refcnt, use, metric, mask;
    if (!(fields >> iface >> destination >> gateway >> flags >> refcnt >> use >> metric >> mask)) continue;
    if (destination == "00000000" && mask == "00000000") out.push_back(iface);
  }
  return out;
}

PciDevice read_pci_device(const fs::path& sysfs, const std::string& bdf) {
  PciDevice d;
  d.bdf = bdf;
  fs::path dir = sysfs / "bus/pci/devices" / bdf;
  d.pci_class = static_cast<unsigned>(read_number(dir / "class", 16).value_or(0));
  d.vendor = static_cast<unsigned>(read_number(dir / "vendor", 16).value_or(0));
  std::string numa = read_line(dir / "numa_node");
  try {
    d.numa_node = numa.empty() ? -1 : std::stoi(numa);
  } catch (const std::exception&) {
    d.numa_node = -1;
  }
  d.local_cpulist = read_line(dir / "local_cpulist");
  if (auto w = read_number(dir / "current_link_width", 10)) d.link_width = static_cast<unsigned>(*w);
  if (auto w = read_number(dir / "max_link_width", 10)) d.max_link_width = static_cast<unsigned>(*w);
  d.link_speed = read_line(dir / "current_link_speed");
  d.max_link_speed = read_line(dir / "max_link_speed");

  std::error_code ec;
  fs::path real = fs::canonical(dir, ec);
  if (!ec) {
    std::vector<std::string> parts = components(real);
    std::size_t end = parts.size();
    std::size_t begin = end;
    while (begin > 0 && is_bdf(parts[begin - 1])) --begin;
    d.chain.assign(parts.begin() + static_cast<long>(begin), parts.end());
    if (begin > 0) d.host_bridge = parts[begin - 1];
  }
  if (d.chain.empty()) d.chain.push_back(bdf);
  return d;
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      na.erase(0, std::min(na.find_first_not_of('0'), na.size()));
      nb.erase(0, std::min(nb.find_first_not_of('0'), nb.size()));
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::string normalize_bdf(const std::string& bus_id) {
  // NVML: "00000000:18:00.0" (eight-digit domain, upper case); sysfs: "0000:18:00.0".
  std::string lower;
  for (char c : bus_id) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  auto colon = lower.find(':');
  if (colon == std::string::npos) return lower;
  std::string domain = lower.substr(0, colon);
  while (domain.size() > 4 && domain[0] == '0') domain.erase(0, 1);
  while (domain.size() < 4) domain.insert(0, "0");
  return domain + lower.substr(colon);
}

bool is_nvidia_gpu(const PciDevice& d) {
  unsigned base = d.pci_class >> 8;
  return d.vendor == 0x10de && (base == 0x0300 || base == 0x0302);
}

bool is_nvswitch(const PciDevice& d) { return d.vendor == 0x10de && (d.pci_class >> 8) == 0x0680; }

const PciDevice* find_pci(const HostScan& scan, const std::string& bdf) {
  for (const auto& d : scan.pci) {
    if (d.bdf == bdf) return &d;
  }
  return nullptr;
}

HostScan scan_host(const ScanRoots& roots) {
  HostScan scan;
  fs::path sysfs(roots.sysfs);
  std::error_code ec;

  for (fs::directory_iterator it(sysfs / "bus/pci/devices", ec), end; !ec && it != end; it.increment(ec)) {
    std::string bdf = it->path().filename().string();
    if (is_bdf(bdf)) scan.pci.push_back(read_pci_device(sysfs, bdf));
  }
  std::sort(scan.pci.begin(), scan.pci.end(), [](const auto& a, const auto& b) { return a.bdf < b.bdf; });

  std::vector<std::string> routed = default_route_interfaces(roots.procfs);
  ec.clear();
  for (fs::directory_iterator it(sysfs / "class/net", ec), end; !ec && it != end; it.increment(ec)) {
    NetInterface n;
    n.name = it->path().filename().string();
    n.pci = nearest_bdf(it->path());
    n.operstate = read_line(it->path() / "operstate");
    n.default_route = std::find(routed.begin(), routed.end(), n.name) != routed.end();
    scan.net.push_back(std::move(n));
  }
  std::sort(scan.net.begin(), scan.net.end(), [](const auto& a, const auto& b) { return natural_less(a.name, b.name); });

  ec.clear();
  for (fs::directory_iterator it(sysfs / "class/infiniband", ec), end; !ec && it != end; it.increment(ec)) {
    RdmaNic nic;
    nic.name = it->path().filename().string();
    nic.pci = nearest_bdf(it->path() / "device");
    std::error_code port_ec;
    for (fs::directory_iterator p(it->path() / "ports", port_ec), pend; !port_ec && p != pend; p.increment(port_ec)) {
      RdmaPort port;
      try {
        port.port = static_cast<unsigned>(std::stoul(p->path().filename().string()));
      } catch (const std::exception&) {
        continue;
      }
      port.state = after_colon(read_line(p->path() / "state"));
      port.phys_state = after_colon(read_line(p->path() / "phys_state"));
      port.rate = read_line(p->path() / "rate");
      port.link_layer = read_line(p->path() / "link_layer");
      nic.ports.push_back(std::move(port));
    }
    std::sort(nic.ports.begin(), nic.ports.end(), [](const auto& a, const auto& b) { return a.port < b.port; });
    for (const auto& n : scan.net) {
      if (!nic.pci.empty() && n.pci == nic.pci) nic.netdevs.push_back(n.name);
    }
    scan.rdma.push_back(std::move(nic));
  }
  std::sort(scan.rdma.begin(), scan.rdma.end(), [](const auto& a, const auto& b) { return natural_less(a.name, b.name); });

  ec.clear();
  for (fs::directory_iterator it(sysfs / "devices/system/node", ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= 4 || name.rfind("node", 0) != 0) continue;
    if (!std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    scan.numa.push_back({std::stoi(name.substr(4)), read_line(it->path() / "cpulist")});
  }
  std::sort(scan.numa.begin(), scan.numa.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  scan.online_cpus = read_line(sysfs / "devices/system/cpu/online");
  return scan;
}

}  // namespace dtrain::node::topo
