// Layout files in the shape of NVIDIA mig-parted's config: named configs, each a list of
// entries that select GPUs and say whether MIG is on and which profiles they hold.
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "common/bounded_yaml.h"
#include "common/pci_address.h"
#include "mig/mig.h"

namespace tessera::mig {
namespace {

constexpr size_t kMaxEntries = 64;
constexpr uint32_t kMaxCount = 64;

std::string Short(const std::string& text) {
  return text.size() > 64 ? text.substr(0, 64) + "…" : text;
}

DeviceSelector ParseDevices(const YAML::Node& node, const std::string& where) {
  DeviceSelector selector;
  if (node && node.IsScalar() && node.as<std::string>() == "all") {
    selector.all = true;
    return selector;
  }
  if (!node || !node.IsSequence() || node.size() == 0 || node.size() > kMaxEntries) {
    throw std::runtime_error(where + ": want \"all\" or a list of GPU indices / PCI addresses");
  }
  for (size_t i = 0; i < node.size(); ++i) {
    if (!node[i].IsScalar()) throw std::runtime_error(where + ": want scalars");
    std::string text = node[i].as<std::string>();
    if (!text.empty() && std::all_of(text.begin(), text.end(), ::isdigit) && text.size() <= 3) {
      selector.indices.push_back(static_cast<uint32_t>(std::stoul(text)));
    } else if (IsPciAddress(text)) {
      selector.pci_addresses.push_back(text);
    } else {
      throw std::runtime_error(where + "[" + std::to_string(i) + "]: \"" + Short(text) +
                               "\" is neither a GPU index nor a PCI address (0000:18:00.0)");
    }
  }
  return selector;
}

// The profiles of an entry's mig-devices (a mapping of profile to count); those of count 0
// are left out.
Status ParseMigDevices(const YAML::Node& devices, const std::string& at, LayoutEntry* entry) {
  if (!devices.IsMap() || devices.size() > kMaxEntries) {
    return InvalidArgument(at + ".mig-devices: want a mapping of profile to count");
  }
  if (!entry->mig_enabled && devices.size() > 0) {
    return InvalidArgument(at + ".mig-devices: given with mig-enabled false");
  }
  for (const auto& device : devices) {
    std::string profile = device.first.as<std::string>();
    long long count = device.second.as<long long>();
    if (profile.empty() || profile.size() > 32) {
      return InvalidArgument(at + ".mig-devices: a profile name of 1..32 characters");
    }
    if (count < 0 || count > kMaxCount) {
      return InvalidArgument(at + ".mig-devices." + profile + ": want a count 0.." +
                             std::to_string(kMaxCount));
    }
    if (count > 0) entry->mig_devices.push_back({profile, static_cast<uint32_t>(count)});
  }
  return Ok();
}

// One entry of a config: the GPUs it selects, whether MIG is on, and the profiles they hold.
Result<LayoutEntry> ParseLayoutEntry(const YAML::Node& e, const std::string& at) {
  if (!e.IsMap()) return InvalidArgument(at + ": want a mapping");
  for (const auto& field : e) {
    std::string key = field.first.as<std::string>();
    if (key != "devices" && key != "mig-enabled" && key != "mig-devices") {
      return InvalidArgument(at + "." + Short(key) + ": unknown field");
    }
  }
  LayoutEntry entry;
  entry.devices = ParseDevices(e["devices"], at + ".devices");
  if (!e["mig-enabled"] || !e["mig-enabled"].IsScalar()) {
    return InvalidArgument(at + ".mig-enabled: want true or false");
  }
  entry.mig_enabled = e["mig-enabled"].as<bool>();
  const YAML::Node& devices = e["mig-devices"];
  if (devices) {
    if (auto parsed = ParseMigDevices(devices, at, &entry); !parsed) return parsed.error();
  }
  return entry;
}

// The config to use: the one named, or the only one when no name is given.
Result<std::string> ChooseConfigName(const YAML::Node& configs, const std::string& name) {
  if (!name.empty()) {
    if (!configs[name]) return NotFound("layout has no config \"" + Short(name) + "\"");
    return name;
  }
  if (configs.size() != 1) {
    return InvalidArgument("layout holds " + std::to_string(configs.size()) +
                           " configs; name one with --select");
  }
  return configs.begin()->first.as<std::string>();
}

}  // namespace

bool DeviceSelector::Matches(uint32_t index, const std::string& pci_address) const {
  return all || std::find(indices.begin(), indices.end(), index) != indices.end() ||
         std::find(pci_addresses.begin(), pci_addresses.end(), pci_address) != pci_addresses.end();
}

Result<LayoutConfig> ParseLayoutConfig(std::string_view yaml, const std::string& name) {
  try {
    auto loaded = LoadBoundedYaml(yaml);
    if (!loaded) return loaded.error().WithContext("layout");
    YAML::Node doc = std::move(*loaded);
    if (!doc.IsMap()) return InvalidArgument("layout: want a mapping");
    for (const auto& entry : doc) {
      std::string key = entry.first.as<std::string>();
      if (key != "version" && key != "mig-configs") {
        return InvalidArgument("layout." + Short(key) + ": unknown field");
      }
    }
    if (!doc["version"] || doc["version"].as<std::string>() != "v1") {
      return InvalidArgument("layout.version: want v1");
    }
    const YAML::Node& configs = doc["mig-configs"];
    if (!configs || !configs.IsMap() || configs.size() == 0) {
      return InvalidArgument("layout.mig-configs: want a mapping of named configs");
    }
    auto chosen_name = ChooseConfigName(configs, name);
    if (!chosen_name) return chosen_name.error();
    // Constructed, never assigned: assigning a YAML::Node writes through to what it refers to.
    const YAML::Node chosen = configs[*chosen_name];
    std::string where = "mig-configs." + Short(*chosen_name);
    if (!chosen.IsSequence() || chosen.size() == 0 || chosen.size() > kMaxEntries) {
      return InvalidArgument(where + ": want a list of entries");
    }
    LayoutConfig config;
    config.name = *chosen_name;
    for (size_t i = 0; i < chosen.size(); ++i) {
      auto entry = ParseLayoutEntry(chosen[i], where + "[" + std::to_string(i) + "]");
      if (!entry) return entry.error();
      config.entries.push_back(std::move(*entry));
    }
    return config;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("layout: ") + e.what());
  }
}

}  // namespace tessera::mig
