#include "mig/placements.h"

namespace tessera::mig {

std::vector<TablePlacement> AllPlacements(const ProfileTable& table) {
  std::vector<TablePlacement> out;
  for (const Profile& profile : table.profiles) {
    for (uint32_t start : profile.starts) {
      if (profile.size == 0 || start + profile.size > table.memory_slices) continue;
      out.push_back({&profile, nvml::Placement{start, profile.size}});
    }
  }
  return out;
}

std::string ProfileLabel(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    out += keep ? c : '-';
  }
  return out;
}

}  // namespace tessera::mig
