// Windows host snapshots from outside input: parsing never crashes, what parses serializes back
// to an equal snapshot, and everything downstream of a parsed snapshot runs without crashing:
// the process-isolation pieces and, for format 2, the Hyper-V GPU chain (plan, preflight, every
// output format, the device plugin's hyperv inventory). The generated PowerShell must keep every
// snapshot string inside a literal or a JSON here-string: no snapshot byte may start a command.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "windows/hyperv.h"
#include "windows/windows.h"

namespace {

using namespace tessera::windows;

bool ParsesAsJson(const std::string& text) {
  return !nlohmann::json::parse(text, nullptr, false).is_discarded();
}

// Outside the here-strings, each script line is a comment, blank, or one of the generator's own
// commands; no control character but the line feed appears anywhere.
bool ScriptIsOnlyOurs(const std::string& script) {
  for (char c : script) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') return false;
  }
  std::istringstream lines(script);
  std::string line;
  bool in_here_string = false;
  static const char* const kCommands[] = {"$ErrorActionPreference = ",
                                          "$pod = crictl runp ",
                                          "$ctr = crictl create ",
                                          "crictl start ",
                                          "crictl exec ",
                                          "Disable-PnpDevice ",
                                          "Dismount-VMHostAssignableDevice "};
  while (std::getline(lines, line)) {
    if (in_here_string) {
      if (line.rfind("'@ | Set-Content", 0) == 0) in_here_string = false;
      continue;
    }
    if (line == "@'") {
      in_here_string = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    bool known = false;
    for (const char* command : kCommands)
      known = known || line.rfind(command, 0) == 0;
    if (!known) return false;
  }
  return !in_here_string;
}

void FuzzHyperV(const Snapshot& snapshot) {
  auto inventory = BuildHyperVPluginInventory(snapshot);
  if (inventory.ok()) {
    for (const PluginResource& r : inventory->resources) {
      for (const PluginDevice& d : r.devices) {
        if (!AllocateHyperV(snapshot, *inventory, {d.id}).ok()) std::abort();
      }
    }
  }
  size_t adapters = snapshot.hyperv_facts->pci_adapters.size();
  for (size_t i = 0; i < adapters && i < 8; ++i) {
    auto plan = PlanHyperVGpu(snapshot, std::to_string(i), HyperVGpuOptions{});
    if (!plan.ok()) continue;
    ImageInfo image{snapshot.os.build, "servercore"};
    HyperVGpuPreflight preflight = CheckHyperVGpu(snapshot, *plan, image);
    if (preflight.checks.size() != 17) std::abort();
    if (!ParsesAsJson(CriPodSandboxConfigJson(*plan)) ||
        !ParsesAsJson(CriContainerConfigJson(*plan)) || !ParsesAsJson(OciSpecJson(*plan)) ||
        !ParsesAsJson(HyperVGpuJson(snapshot, *plan, preflight))) {
      std::abort();
    }
    auto hcs = HcsDocumentsJson(snapshot, *plan);
    if (hcs.ok() && !ParsesAsJson(*hcs)) std::abort();
    if (!ScriptIsOnlyOurs(CrictlScript(snapshot, *plan))) std::abort();
    PreflightLines(preflight);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto snapshot = ParseSnapshot(text);
  if (!snapshot.ok()) return 0;
  auto again = ParseSnapshot(SnapshotToJson(*snapshot));
  if (!again.ok() || !(*again == *snapshot)) std::abort();
  if (nlohmann::json::parse(InventoryJson(*snapshot), nullptr, false).is_discarded()) std::abort();
  for (MountFormat format :
       {MountFormat::kCtr, MountFormat::kNerdctl, MountFormat::kDocker, MountFormat::kJson}) {
    MountsOptions options;
    options.format = format;
    options.selection.all = true;
    auto plan = PlanMounts(*snapshot, options);
    if (!plan.ok()) continue;
    for (const FileMount& m : plan->files.mounts) {
      if (m.source.find("\\..\\") != std::string::npos || !m.read_only) std::abort();
    }
    if (nlohmann::json::parse(MountsPlanJson(*snapshot, *plan), nullptr, false).is_discarded()) {
      std::abort();
    }
  }
  auto inventory = BuildPluginInventory(*snapshot, 2);
  if (inventory.ok()) {
    std::vector<std::string> ids;
    for (const PluginResource& r : inventory->resources) {
      for (const PluginDevice& d : r.devices)
        ids.push_back(d.id);
    }
    auto allocation = Allocate(*snapshot, *inventory, ids, DefaultVendorFiles());
    if (!allocation.ok()) std::abort();
  }
  if (snapshot->hyperv_facts) FuzzHyperV(*snapshot);
  return 0;
}
