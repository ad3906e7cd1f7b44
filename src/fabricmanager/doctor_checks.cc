// `tessera doctor` fabric checks. Pure: the facts gathered by the command in, checks out.
#include <algorithm>
#include <set>

#include "fabricmanager/operator_tools.h"

namespace tessera::fabricmanager {
namespace {

using runtimes::Check;
using runtimes::Verdict;

bool IsBridgeClass(uint32_t class_code) {
  const uint32_t cls = class_code >> 8;
  return cls == 0x0600 || cls == 0x0604 || cls == 0x0609;
}

Check NvswitchGroups(const FabricDoctorInput& input) {
  Check check{"fabric.nvswitch_vfio", "NVSwitch IOMMU groups wholly on vfio-pci (Service VM)",
              Verdict::kPass, "", ""};
  std::set<int> groups;
  std::vector<std::string> switches;
  for (const auto& device : input.inventory->devices) {
    if (device.kind != inventory::DeviceKind::kNvSwitch) continue;
    switches.push_back(device.pci_address);
    if (!device.iommu_group) {
      check.verdict = Verdict::kFail;
      check.evidence = "NVSwitch " + device.pci_address + " has no IOMMU group";
      check.fix = "turn the IOMMU on (intel_iommu=on or amd_iommu=on) and reboot";
      return check;
    }
    groups.insert(*device.iommu_group);
  }
  if (switches.empty()) {
    check.verdict = Verdict::kFail;
    check.evidence = "no NVSwitch PCI function on this host";
    check.fix =
        "a Service VM needs NVSwitches (HGX H100/H200); B200/B300 boards are not supported yet";
    return check;
  }
  std::vector<std::string> wrong;
  size_t functions = 0;
  for (int group : groups) {
    auto it = input.inventory->iommu_groups.find(group);
    if (it == input.inventory->iommu_groups.end()) continue;
    for (const auto& member : it->second.members) {
      auto fact = input.members.find(member);
      if (fact == input.members.end()) continue;
      if (IsBridgeClass(fact->second.class_code)) continue;
      ++functions;
      if (fact->second.driver != "vfio-pci")
        wrong.push_back(member + " (" +
                        (fact->second.driver.empty() ? "no driver" : fact->second.driver) + ")");
    }
  }
  std::string group_list;
  for (int group : groups)
    group_list += (group_list.empty() ? "" : ",") + std::to_string(group);
  if (wrong.empty()) {
    check.evidence = std::to_string(functions) + " functions in IOMMU groups {" + group_list +
                     "} of " + std::to_string(switches.size()) + " NVSwitches, all on vfio-pci";
    return check;
  }
  check.verdict = Verdict::kFail;
  for (const auto& w : wrong)
    check.evidence += (check.evidence.empty() ? "not on vfio-pci: " : ", ") + w;
  check.fix =
      "bind every member of the NVSwitch groups to vfio-pci before starting the Service VM "
      "(driverctl set-override <address> vfio-pci, or vfio-pci.ids=10de:22a3,11f8:4128); a "
      "member left on the host fails VFIO mapping";
  return check;
}

Check Manager(const FabricDoctorInput& input) {
  Check check{"fabric.manager", "fabric manager reachable and in shared NVSwitch mode",
              Verdict::kPass, "", ""};
  const auto& listed = *input.listed;
  const std::string at = "at " + input.fm_address.value_or("?");
  if (listed) {
    size_t active = std::count_if(listed->begin(), listed->end(),
                                  [](const SupportedPartition& p) { return p.active; });
    check.evidence = at + ": " + std::to_string(listed->size()) + " partitions, " +
                     std::to_string(active) + " active";
    return check;
  }
  const Error& error = listed.error();
  check.evidence = at + ": " + error.message;
  if (error.message.find("FM_ST_NOT_CONFIGURED") != std::string::npos) {
    check.verdict = Verdict::kWarn;
    check.fix =
        "it is initialising, or restarted and waits for the active partition list: tessera "
        "serve / the node agent send it within 10 s; by hand: tessera fabric set-active ID...";
  } else if (error.message.find("FM_ST_NOT_SUPPORTED") != std::string::npos) {
    check.verdict = Verdict::kFail;
    check.fix = "set FABRIC_MODE=1 in fabricmanager.cfg and restart the fabric manager";
  } else {
    check.verdict = Verdict::kFail;
    check.fix =
        "start the fabric manager (in the Service VM: systemctl start nvidia-fabricmanager) and "
        "check FM_CMD_BIND_INTERFACE / FM_CMD_PORT_NUMBER against --fabric-manager";
  }
  return check;
}

bool Holds(const deviceplugin::Lease& lease) {
  return lease.state == deviceplugin::LeaseState::kReserved ||
         lease.state == deviceplugin::LeaseState::kActive;
}

Check Leases(const FabricDoctorInput& input, const std::vector<SupportedPartition>& partitions) {
  Check check{"fabric.leases", "active fabric partitions match the GPU leases", Verdict::kPass, "",
              ""};
  const auto& leases = *input.leases;
  std::vector<std::string> idle, uncovered, unknown;
  std::set<std::string> covered;
  size_t active = 0;
  for (const auto& partition : partitions) {
    if (!partition.active) continue;
    ++active;
    bool held = false;
    for (int module : partition.modules()) {
      auto address = input.modules.pci_by_module.find(module);
      if (address == input.modules.pci_by_module.end()) {
        unknown.push_back(std::to_string(module));
        continue;
      }
      covered.insert(address->second);
      auto lease = leases.find(address->second);
      held = held || (lease != leases.end() && Holds(lease->second));
    }
    if (!held) idle.push_back(std::to_string(partition.id) + " " + ModuleSet(partition.modules()));
  }
  for (const auto& [pci, lease] : leases) {
    if (Holds(lease) && !covered.count(pci))
      uncovered.push_back(pci + (lease.tenancy.empty() ? "" : " (tenancy " + lease.tenancy + ")"));
  }
  if (!uncovered.empty()) {
    check.verdict = Verdict::kFail;
    for (const auto& u : uncovered)
      check.evidence +=
          (check.evidence.empty() ? "leased GPUs in no active partition: " : ", ") + u;
    check.fix =
        "their workloads have no NVLink (cuInit fails with 802 in a guest): let tessera serve / "
        "the node agent reconcile (restart it), or tessera fabric activate the partition";
    return check;
  }
  if (!idle.empty()) {
    check.verdict = Verdict::kWarn;
    for (const auto& i : idle)
      check.evidence += (check.evidence.empty() ? "active partitions nothing leases: " : ", ") + i;
    check.fix =
        "tessera fabric deactivate ID (tessera serve and the node agent deactivate what "
        "nothing holds when they start)";
    return check;
  }
  if (!unknown.empty()) {
    check.verdict = Verdict::kWarn;
    check.evidence = "modules without a known PCI address: " + unknown.front() + "...";
    check.fix =
        "load the NVIDIA driver (NVML module IDs) or give --partition-table with pci_addresses";
    return check;
  }
  check.evidence = std::to_string(active) + " active partitions, each held by a lease";
  return check;
}

Check Config(const FabricDoctorInput& input) {
  Check check{"fabric.config", "fabricmanager.cfg for shared NVSwitch mode with restarts",
              Verdict::kPass, "", ""};
  const std::string path = input.config_path.value_or("fabricmanager.cfg");
  const auto& config = *input.config;
  if (!config) {
    check.verdict = Verdict::kFail;
    check.evidence = path + ": " + config.error().message;
    check.fix = "rewrite it with tessera fabric service-vm";
    return check;
  }
  auto value = [&](const char* key) {
    auto it = config->find(key);
    return it == config->end() ? std::string() : it->second;
  };
  std::vector<std::string> problems;
  Verdict verdict = Verdict::kPass;
  if (value("FABRIC_MODE") != "1") {
    problems.push_back("FABRIC_MODE=" + value("FABRIC_MODE") + " (shared NVSwitch needs 1)");
    verdict = Verdict::kFail;
  }
  if (value("FABRIC_MODE_RESTART") != "1") {
    problems.push_back("FABRIC_MODE_RESTART=" + value("FABRIC_MODE_RESTART") +
                       " (a restart deactivates every partition under running guests)");
    if (verdict == Verdict::kPass) verdict = Verdict::kWarn;
  }
  if (input.fm_address) {
    auto address = ParseFabricAddress(*input.fm_address);
    if (address && !address->unix_socket) {
      std::string port = value("FM_CMD_PORT_NUMBER").empty() ? "6666" : value("FM_CMD_PORT_NUMBER");
      if (value("FM_CMD_BIND_INTERFACE") != address->host ||
          port != std::to_string(address->port)) {
        problems.push_back("it listens on " + value("FM_CMD_BIND_INTERFACE") + ":" + port +
                           ", tessera calls " + address->ToString());
        verdict = Verdict::kFail;
      }
    }
  }
  if (problems.empty()) {
    check.evidence = path + ": FABRIC_MODE=1, FABRIC_MODE_RESTART=1, FM_CMD_BIND_INTERFACE=" +
                     value("FM_CMD_BIND_INTERFACE");
    return check;
  }
  check.verdict = verdict;
  check.evidence = path + ": ";
  for (size_t i = 0; i < problems.size(); ++i)
    check.evidence += (i ? "; " : "") + problems[i];
  check.fix = "tessera fabric service-vm writes a fabricmanager.cfg with all three";
  return check;
}

}  // namespace

std::vector<Check> FabricChecks(const FabricDoctorInput& input) {
  std::vector<Check> checks;
  if (input.service_vm && input.inventory) checks.push_back(NvswitchGroups(input));
  if (input.listed) {
    checks.push_back(Manager(input));
    if (*input.listed && input.leases) checks.push_back(Leases(input, **input.listed));
  }
  if (input.config) checks.push_back(Config(input));
  return checks;
}

}  // namespace tessera::fabricmanager
