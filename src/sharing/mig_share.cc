// Shares of a MIG slice: the profile a share names, the memory a slice of it is counted as,
// what such a share is metered as, and which slice of its profile it goes to.
#include <fmt/format.h>

#include <map>
#include <optional>
#include <regex>

#include "common/untrusted_text.h"
#include "sharing/sharing.h"

namespace tessera::sharing {

Status CheckMigProfile(std::string_view profile) {
  if (profile.empty()) return InvalidArgument("mig: must name a MIG profile such as 3g.40gb");
  if (profile.size() > kMaxMigProfileLength)
    return InvalidArgument(fmt::format("mig: \"{}\": longer than {} characters",
                                       Excerpt(profile, 20), kMaxMigProfileLength));
  // The names NVML gives GPU and compute instance profiles; bounded above, so the expression
  // runs on at most 32 characters.
  static const std::regex shape(
      R"(^([1-9][0-9]?c\.)?[1-9][0-9]?g\.[1-9][0-9]{0,3}gb([+-][a-z][a-z.]{0,15})?$)");
  if (!std::regex_match(profile.begin(), profile.end(), shape))
    return InvalidArgument(
        fmt::format("mig: \"{}\" is not a MIG profile name (like 1g.10gb, 3g.40gb or 1g.10gb+me)",
                    Excerpt(profile, 20)));
  return Ok();
}

uint64_t MigProfileMemoryBytes(std::string_view profile) {
  if (!CheckMigProfile(profile)) return 0;
  // "<g>g.<N>gb" follows the last "g." before "gb" (a compute instance's "<c>c." comes first).
  const size_t gb = profile.find("gb");
  const size_t dot = profile.rfind('.', gb);
  if (gb == std::string_view::npos || dot == std::string_view::npos) return 0;
  uint64_t gigabytes = 0;
  for (char c : profile.substr(dot + 1, gb - dot - 1))
    gigabytes = gigabytes * 10 + static_cast<uint64_t>(c - '0');
  return gigabytes * 1000 * 1000 * 1000;
}

double MigShareFraction(const Share& share, uint64_t slice_memory_bytes,
                        double slice_gpu_fraction) {
  return Fraction(share, slice_memory_bytes) * slice_gpu_fraction;
}

Result<size_t> ChooseSlice(const std::vector<SharedSlice>& slices, const Share& share,
                           const std::string& tenancy_uid, const PlacementRules& rules) {
  std::optional<size_t> best;
  uint64_t best_held = 0;
  std::map<std::string, int> reasons;  // why the slices of its profile do not take it
  int of_profile = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].profile != share.mig_profile) continue;
    ++of_profile;
    std::string why = WhyNotFits(slices[i].room, share, tenancy_uid, rules);
    if (!why.empty()) {
      ++reasons[why];
      continue;
    }
    uint64_t held = 0;
    for (const Share& other : slices[i].room.held)
      held += other.memory_bytes;
    if (!best || held > best_held) {
      best = i;
      best_held = held;
    }
  }
  if (best) return *best;
  if (of_profile == 0)
    return FailedPrecondition(fmt::format("no MIG slice of {} here", share.mig_profile));
  std::string text;
  for (const auto& [why, count] : reasons) {
    if (!text.empty()) text += "; ";
    text += fmt::format("{} slice(s): {}", count, why);
  }
  return FailedPrecondition(fmt::format("no MIG slice of {} has room for {} and {}% ({})",
                                        share.mig_profile, FormatMemory(share.memory_bytes),
                                        share.compute_percent, text));
}

}  // namespace tessera::sharing
