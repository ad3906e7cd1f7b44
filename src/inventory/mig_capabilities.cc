// The MIG capability files the NVIDIA driver publishes per GPU under
// /proc/driver/nvidia/capabilities/gpu<minor>/mig/: gi<g>/access for each GPU instance and
// gi<g>/ci<c>/access for each compute instance in it. Their "DeviceFileMinor:" is the minor of
// /dev/nvidia-caps/nvidia-cap<N> (major: "nvidia-caps" in /proc/devices). Pure: bytes in.
#include <algorithm>
#include <map>

#include "inventory/parsers.h"

namespace tessera::inventory {

// Instance IDs are small (NVML allows at most a few dozen per GPU); the bound keeps a hostile or
// corrupt tree from producing absurd IDs.
constexpr uint32_t kMaxInstanceId = 1023;

std::optional<uint32_t> ParseMigInstanceName(std::string_view name, std::string_view prefix) {
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view digits = name.substr(prefix.size());
  if (digits.size() > 4 || (digits.size() > 1 && digits.front() == '0')) return std::nullopt;
  uint32_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > kMaxInstanceId) return std::nullopt;
  return value;
}

namespace {

struct CapabilityPath {
  uint32_t gpu_instance = 0;
  std::optional<uint32_t> compute_instance;
};

// "gi3/access" or "gi3/ci0/access"; nullopt for anything else.
std::optional<CapabilityPath> ParseCapabilityPath(std::string_view path) {
  std::vector<std::string_view> parts;
  while (!path.empty() && parts.size() < 4) {
    auto slash = path.find('/');
    parts.push_back(path.substr(0, slash));
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
  }
  if (!path.empty() || parts.size() < 2 || parts.size() > 3 || parts.back() != "access") {
    return std::nullopt;
  }
  CapabilityPath out;
  auto gi = ParseMigInstanceName(parts[0], "gi");
  if (!gi) return std::nullopt;
  out.gpu_instance = *gi;
  if (parts.size() == 3) {
    auto ci = ParseMigInstanceName(parts[1], "ci");
    if (!ci) return std::nullopt;
    out.compute_instance = *ci;
  }
  return out;
}

}  // namespace

std::vector<MigCapabilityMinors> ParseMigCapabilities(const std::vector<MigCapabilityFile>& files,
                                                      std::vector<std::string>& warnings) {
  std::map<uint32_t, uint32_t> gi_minors;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> ci_minors;
  for (const MigCapabilityFile& file : files) {
    auto where = ParseCapabilityPath(file.relative_path);
    if (!where) {
      warnings.push_back("mig/" + file.relative_path.substr(0, 64) +
                         ": not a gi<g>/access or gi<g>/ci<c>/access file");
      continue;
    }
    auto minor = ParseNvidiaCapabilityMinor(file.content);
    if (!minor) {
      warnings.push_back("mig/" + file.relative_path + ": " + minor.error().message);
      continue;
    }
    bool fresh =
        where->compute_instance
            ? ci_minors.emplace(std::pair{where->gpu_instance, *where->compute_instance}, *minor)
                  .second
            : gi_minors.emplace(where->gpu_instance, *minor).second;
    if (!fresh) warnings.push_back("mig/" + file.relative_path + ": listed twice");
  }
  std::vector<MigCapabilityMinors> out;
  for (const auto& [key, ci_minor] : ci_minors) {
    auto gi = gi_minors.find(key.first);
    if (gi == gi_minors.end()) {
      warnings.push_back("mig/gi" + std::to_string(key.first) + "/ci" + std::to_string(key.second) +
                         "/access: its GPU instance has no access file");
      continue;
    }
    out.push_back({key.first, key.second, gi->second, ci_minor});
  }
  return out;  // std::map order: by GI then CI
}

}  // namespace tessera::inventory
