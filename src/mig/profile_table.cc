// MIG profile tables: one YAML file per board (data/mig-profiles/), the H100 80GB one built in.
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "common/bounded_yaml.h"
#include "mig/mig.h"

namespace tessera::mig {
namespace {

constexpr uint32_t kMaxSlices = 64;  // no board has more; bounds the placement search

uint32_t Unsigned(const YAML::Node& node, const std::string& where, uint32_t max) {
  if (!node || !node.IsScalar()) throw std::runtime_error(where + ": want a number");
  long long value = node.as<long long>();
  if (value < 0 || value > static_cast<long long>(max)) {
    throw std::runtime_error(where + ": out of range 0.." + std::to_string(max));
  }
  return static_cast<uint32_t>(value);
}

std::string Text(const YAML::Node& node, const std::string& where) {
  if (!node || !node.IsScalar()) throw std::runtime_error(where + ": want a string");
  std::string text = node.as<std::string>();
  if (text.empty() || text.size() > 64) throw std::runtime_error(where + ": want 1..64 characters");
  return text;
}

void RejectUnknown(const YAML::Node& map, std::initializer_list<const char*> known,
                   const std::string& where) {
  for (const auto& entry : map) {
    std::string key = entry.first.as<std::string>();
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      throw std::runtime_error(where + "." + key.substr(0, 64) + ": unknown field");
    }
  }
}

}  // namespace

const Profile* ProfileTable::FindByName(std::string_view name) const {
  for (const auto& profile : profiles)
    if (profile.name == name) return &profile;
  return nullptr;
}

const Profile* ProfileTable::FindById(uint32_t id) const {
  for (const auto& profile : profiles)
    if (profile.id == id) return &profile;
  return nullptr;
}

Result<ProfileTable> ParseProfileTable(std::string_view yaml) {
  try {
    auto loaded = LoadBoundedYaml(yaml);
    if (!loaded) return loaded.error().WithContext("profile table");
    YAML::Node doc = std::move(*loaded);
    if (!doc.IsMap()) return InvalidArgument("profile table: want a mapping");
    RejectUnknown(doc, {"board", "pci_device_ids", "memory_slices", "compute_slices", "profiles"},
                  "profile table");
    ProfileTable table;
    table.board = Text(doc["board"], "board");
    const YAML::Node& ids = doc["pci_device_ids"];
    if (!ids || !ids.IsSequence() || ids.size() == 0 || ids.size() > 64) {
      return InvalidArgument("pci_device_ids: want a list of \"10de:2330\"");
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      std::string id = Text(ids[i], "pci_device_ids[" + std::to_string(i) + "]");
      if (id.size() != 9 || id[4] != ':') {
        return InvalidArgument("pci_device_ids[" + std::to_string(i) + "]: want vvvv:dddd");
      }
      table.pci_device_ids.push_back(id);
    }
    table.memory_slices = Unsigned(doc["memory_slices"], "memory_slices", kMaxSlices);
    table.compute_slices = Unsigned(doc["compute_slices"], "compute_slices", kMaxSlices);
    const YAML::Node& profiles = doc["profiles"];
    if (!profiles || !profiles.IsSequence() || profiles.size() > 64) {
      return InvalidArgument("profiles: want a list of at most 64");
    }
    for (size_t i = 0; i < profiles.size(); ++i) {
      std::string where = "profiles[" + std::to_string(i) + "]";
      const YAML::Node& p = profiles[i];
      if (!p.IsMap()) return InvalidArgument(where + ": want a mapping");
      RejectUnknown(p, {"name", "id", "compute_slices", "size", "starts", "max_instances"}, where);
      Profile profile;
      profile.name = Text(p["name"], where + ".name");
      profile.id = Unsigned(p["id"], where + ".id", 1023);
      profile.compute_slices =
          Unsigned(p["compute_slices"], where + ".compute_slices", table.compute_slices);
      profile.size = Unsigned(p["size"], where + ".size", table.memory_slices);
      profile.max_instances =
          Unsigned(p["max_instances"], where + ".max_instances", table.memory_slices);
      if (profile.size == 0 || profile.compute_slices == 0) {
        return InvalidArgument(where + ": size and compute_slices must be positive");
      }
      const YAML::Node& starts = p["starts"];
      if (!starts || !starts.IsSequence() || starts.size() == 0 ||
          starts.size() > table.memory_slices) {
        return InvalidArgument(where + ".starts: want a list of memory slices");
      }
      for (size_t s = 0; s < starts.size(); ++s) {
        uint32_t start =
            Unsigned(starts[s], where + ".starts[" + std::to_string(s) + "]", table.memory_slices);
        if (start + profile.size > table.memory_slices) {
          return InvalidArgument(where + ".starts[" + std::to_string(s) +
                                 "]: " + std::to_string(start) + "+" +
                                 std::to_string(profile.size) + " runs past " +
                                 std::to_string(table.memory_slices) + " memory slices");
        }
        profile.starts.push_back(start);
      }
      if (table.FindByName(profile.name) || table.FindById(profile.id)) {
        return InvalidArgument(where + ": name or id listed twice");
      }
      table.profiles.push_back(std::move(profile));
    }
    return table;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("profile table: ") + e.what());
  }
}

const ProfileTable* TableForDevice(const std::vector<ProfileTable>& tables,
                                   std::string_view pci_device_id) {
  for (const auto& table : tables) {
    for (const auto& id : table.pci_device_ids)
      if (id == pci_device_id) return &table;
  }
  return nullptr;
}

}  // namespace tessera::mig
