// Every place a profile table allows an instance: the devices a GPU offers when MIG instances are
// made by demand (the DRA driver publishes one per profile and start). Pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mig/mig.h"

namespace tessera::mig {

struct TablePlacement {
  const Profile* profile = nullptr;  // points into the table
  nvml::Placement placement;
};

// In the table's profile order, then by start; placements that do not fit in the board's memory
// slices are left out.
std::vector<TablePlacement> AllPlacements(const ProfileTable& table);

// A profile name as a DNS label: lowercase, every character other than [a-z0-9] a '-'
// ("1g.10gb+me" -> "1g-10gb-me").
std::string ProfileLabel(std::string_view name);

}  // namespace tessera::mig
