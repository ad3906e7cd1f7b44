// Gathers HostFacts below a host root. PCI devices, IOMMU groups and the driver come from the
// inventory; the few extra files doctor needs (kernel release, hugepages, group members'
// drivers, CDI spec files) are read here, all through the same root.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>

#include "common/atomic_file.h"
#include "process/process.h"
#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

std::optional<std::string> ReadTrimmed(const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text) return std::nullopt;
  std::string value = *text;
  while (!value.empty() && (value.back() == '\n' || value.back() == ' '))
    value.pop_back();
  return value;
}

std::optional<int> ReadInt(const std::string& path) {
  auto text = ReadTrimmed(path);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  long value = std::strtol(text->c_str(), &end, 10);
  if (*end != '\0') return std::nullopt;
  return int(value);
}

std::optional<std::string> LinkBasename(const std::string& path) {
  std::array<char, 4096> buffer;
  ssize_t n = ::readlink(path.c_str(), buffer.data(), buffer.size() - 1);
  if (n <= 0) return std::nullopt;
  std::string target(buffer.data(), size_t(n));
  auto slash = target.rfind('/');
  return slash == std::string::npos ? target : target.substr(slash + 1);
}

std::vector<std::string> ListSpecFiles(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (dirent* entry = ::readdir(d)) {
    std::string name = entry->d_name;
    auto ends = [&](const std::string& suffix) {
      return name.size() > suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends(".json") || ends(".yaml")) names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<Version> VersionFromCommand(const char* command) {
  FILE* pipe = ::popen(command, "re");  // "e": not inherited by later children
  if (!pipe) return std::nullopt;
  std::string output;
  std::array<char, 512> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  if (status != 0) return std::nullopt;
  return Version::Parse(output);
}

}  // namespace

Result<RunscInfo> ReadRunscInfo(const std::string& runsc) {
  std::string path = process::FindExecutable(runsc);
  if (path.empty() || ::access(path.c_str(), X_OK) != 0)
    return NotFound("runsc: " + runsc + " is not installed");
  process::Options options;
  options.timeout_ms = 10000;
  options.capture_stderr = false;
  auto version = process::Run({path, "--version"}, options);
  if (!version) return version.error();
  if (version->status != 0)
    return Unavailable(path + " --version: exit status " + std::to_string(version->status));
  // `runsc flags` prints its list on stderr in some releases: read both.
  options.capture_stderr = true;
  auto flags = process::Run({path, "flags"}, options);
  if (!flags) return flags.error();
  if (flags->status != 0)
    return Unavailable(path + " flags: exit status " + std::to_string(flags->status));
  return ParseRunscInfo(path, version->output, flags->output);
}

Result<HostFacts> ReadHostFacts(const HostFactsOptions& options) {
  HostFacts facts;
  inventory::ReadOptions read;
  read.root = options.root;
  read.read_pci_ids = false;  // names are not needed for any check
  auto inv = inventory::ReadInventory(read);
  if (!inv) return inv.error();
  facts.inventory = std::move(*inv);
  const std::string& root = options.root;
  auto at = [&](const std::string& path) { return inventory::HostPath(root, path); };

  facts.kernel_release = ReadTrimmed(at("/proc/sys/kernel/osrelease"));
  const std::string huge = "/sys/kernel/mm/hugepages/hugepages-1048576kB/";
  facts.hugepages_1g_total = ReadInt(at(huge + "nr_hugepages"));
  facts.hugepages_1g_free = ReadInt(at(huge + "free_hugepages"));

  // GPUs' groups (VM isolation) and NVSwitches' groups (the fabric manager's Service VM).
  std::vector<const inventory::PciDevice*> grouped = facts.inventory.Gpus();
  for (const auto& device : facts.inventory.devices)
    if (device.kind == inventory::DeviceKind::kNvSwitch) grouped.push_back(&device);
  for (const auto* gpu : grouped) {
    if (!gpu->iommu_group) continue;
    auto group = facts.inventory.iommu_groups.find(*gpu->iommu_group);
    if (group == facts.inventory.iommu_groups.end()) continue;
    for (const auto& member : group->second.members) {
      if (facts.group_members.count(member)) continue;
      PciFunction function;
      std::string dir = at("/sys/bus/pci/devices/" + member);
      function.driver = LinkBasename(dir + "/driver").value_or("");
      if (auto cls = ReadTrimmed(dir + "/class"))
        function.class_code = uint32_t(std::strtoul(cls->c_str(), nullptr, 16));
      facts.group_members.emplace(member, function);
    }
  }

  for (const char* dir : {"/etc/cdi", "/var/run/cdi"}) {
    for (const auto& name : ListSpecFiles(at(dir))) {
      std::string path = std::string(dir) + "/" + name;
      auto content = ReadWholeFile(at(path));
      if (content) facts.cdi_specs.push_back({path, std::move(*content)});
    }
  }

  const bool real_host = (root == "/" || root.empty()) && options.ask_tools;
  if (options.podman_version) {
    facts.podman_version = Version::Parse(*options.podman_version);
  } else if (real_host) {
    facts.podman_version = VersionFromCommand("podman --version 2>/dev/null");
  }
  if (options.containerd_version) {
    facts.containerd_version = Version::Parse(*options.containerd_version);
  } else if (real_host) {
    facts.containerd_version = VersionFromCommand("containerd --version 2>/dev/null");
  }
  if (options.runsc || real_host) {
    auto runsc = ReadRunscInfo(options.runsc.value_or("runsc"));
    if (runsc) facts.runsc = std::move(*runsc);
  }
  return facts;
}

}  // namespace tessera::runtimes
