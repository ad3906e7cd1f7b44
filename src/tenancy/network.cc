// Tenancy networks as podman arguments, and the host firewall rules that keep them apart.
#include <nlohmann/json.hpp>
#include <string>

#include "tenancy/tenancy.h"

namespace tessera::tenancy {

const char* NetworkModeName(NetworkMode mode) {
  switch (mode) {
    case NetworkMode::kTenancy:
      return "tenancy";
    case NetworkMode::kNone:
      return "none";
  }
  return "tenancy";
}

Result<NetworkMode> ParseNetworkMode(std::string_view text, std::string_view field) {
  if (text == "tenancy") return NetworkMode::kTenancy;
  if (text == "none") return NetworkMode::kNone;
  return InvalidArgument(std::string(field) + ": expected \"tenancy\" or \"none\"");
}

Result<NetworkMode> NetworkModeFromJson(const nlohmann::json& value, std::string_view field) {
  if (value.is_null()) return NetworkMode::kTenancy;
  if (!value.is_string()) {
    return InvalidArgument(std::string(field) + ": expected a string (\"tenancy\" or \"none\")");
  }
  return ParseNetworkMode(value.get_ref<const std::string&>(), field);
}

std::vector<std::string> NetworkCreateArgs(std::string_view tenancy) {
  return {"network",
          "create",
          "--driver",
          "bridge",
          "--internal",
          "--label",
          std::string(kTenancyLabel) + "=" + std::string(tenancy),
          NetworkName(tenancy)};
}

std::vector<std::string> NetworkInspectArgs(std::string_view tenancy) {
  return {"network", "inspect", NetworkName(tenancy)};
}

std::vector<std::string> NetworkRemoveArgs(std::string_view tenancy) {
  return {"network", "rm", NetworkName(tenancy)};
}

Status CheckNetworkRemovable(std::string_view tenancy, bool tenancy_deleted,
                             size_t container_count) {
  const std::string network = NetworkName(tenancy);
  if (!tenancy_deleted) {
    return FailedPrecondition("network " + network + ": tenancy " + std::string(tenancy) +
                              " still exists");
  }
  if (container_count > 0) {
    return FailedPrecondition("network " + network + ": tenancy " + std::string(tenancy) +
                              " still has " + std::to_string(container_count) + " container(s)");
  }
  return Ok();
}

std::vector<std::string> ContainerNetworkArgs(std::string_view tenancy, NetworkMode mode) {
  // Always explicit: podman's default network is shared by everything started without one.
  if (mode == NetworkMode::kNone) return {"--network", "none"};
  return {"--network", NetworkName(tenancy)};
}

std::vector<std::vector<std::string>> IsolationRules(std::string_view bridge,
                                                     std::string_view tenancy) {
  const std::string br(bridge);
  const std::string comment = NetworkName(tenancy);
  return {
      {"-i", br, "!", "-o", br, "-m", "comment", "--comment", comment, "-j", "DROP"},
      {"-o", br, "!", "-i", br, "-m", "comment", "--comment", comment, "-j", "DROP"},
  };
}

std::vector<std::string> IsolationHookChains() {
  return {"FORWARD", "CNI-ADMIN"};
}

}  // namespace tessera::tenancy
