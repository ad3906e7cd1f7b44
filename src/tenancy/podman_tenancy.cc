// Effects: tenancy networks and NFS volumes through podman, host firewall rules through iptables.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <set>
#include <string>

#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

std::string Trimmed(const std::string& text) {
  size_t end = text.find_last_not_of(" \n\r\t");
  return end == std::string::npos ? std::string() : text.substr(0, end + 1);
}

Error CommandFailed(const std::vector<std::string>& argv, const CommandOutput& output) {
  std::string line;
  for (const auto& arg : argv)
    line += (line.empty() ? "" : " ") + arg;
  return Unavailable(line + ": exit " + std::to_string(output.status) + ": " +
                     Trimmed(output.err.empty() ? output.out : output.err));
}

}  // namespace

PodmanTenancy::PodmanTenancy(PodmanTenancyOptions options) : options_(std::move(options)) {
  if (!options_.runner) {
    options_.runner = [](const std::vector<std::string>& argv) { return RunCommand(argv); };
  }
}

Result<CommandOutput> PodmanTenancy::Podman(std::vector<std::string> args) {
  args.insert(args.begin(), options_.podman);
  spdlog::debug("tenancy: {}", fmt::join(args, " "));
  return options_.runner(args);
}

Result<CommandOutput> PodmanTenancy::Iptables(std::vector<std::string> args) {
  // -w: wait for the xtables lock instead of failing when podman's CNI plugins hold it.
  args.insert(args.begin(), {options_.iptables, "-w"});
  spdlog::debug("tenancy: {}", fmt::join(args, " "));
  return options_.runner(args);
}

Result<NetworkInfo> PodmanTenancy::InspectNetwork(std::string_view tenancy) {
  if (auto s = ValidateTenancyName(tenancy); !s) return s.error();
  auto exists = Podman({"network", "exists", NetworkName(tenancy)});
  if (!exists) return exists.error();
  if (exists->status == 1) return NotFound("network " + NetworkName(tenancy) + ": does not exist");
  auto args = NetworkInspectArgs(tenancy);
  auto output = Podman(args);
  if (!output) return output.error();
  if (output->status != 0) return CommandFailed(args, *output);
  return ParseNetworkInspect(output->out);
}

Result<NetworkInfo> PodmanTenancy::EnsureNetwork(std::string_view tenancy) {
  auto info = InspectNetwork(tenancy);
  if (!info && info.error().category == ErrorCategory::kNotFound) {
    auto args = NetworkCreateArgs(tenancy);
    auto created = Podman(args);
    if (!created) return created.error();
    // A concurrent create of the same name is fine: the inspect below decides.
    if (created->status != 0 && created->err.find("already") == std::string::npos) {
      return CommandFailed(args, *created);
    }
    info = InspectNetwork(tenancy);
  }
  if (!info) return info.error();
  const std::string name = NetworkName(tenancy);
  // Someone else's network with our name must not become a tenancy's (it may be routed).
  if (!info->internal) {
    return FailedPrecondition("network " + name + ": exists but is not --internal; remove it");
  }
  auto label = info->labels.find(std::string(kTenancyLabel));
  if (label == info->labels.end() || label->second != tenancy) {
    return FailedPrecondition("network " + name + ": exists without label " +
                              std::string(kTenancyLabel) + "=" + std::string(tenancy));
  }
  if (auto s = EnsureFirewall(*info, tenancy); !s) return s.error();
  return info;
}

Status PodmanTenancy::RemoveNetwork(std::string_view tenancy, bool tenancy_deleted,
                                    size_t container_count) {
  if (auto s = CheckNetworkRemovable(tenancy, tenancy_deleted, container_count); !s) return s;
  auto info = InspectNetwork(tenancy);
  if (!info && info.error().category == ErrorCategory::kNotFound) return Ok();
  if (!info) return info.error();
  auto args = NetworkRemoveArgs(tenancy);
  auto removed = Podman(args);
  if (!removed) return removed.error();
  if (removed->status != 0) {
    // podman refuses while a container (even a stopped one) is attached.
    if (removed->err.find("in use") != std::string::npos ||
        removed->err.find("being used") != std::string::npos) {
      return FailedPrecondition("network " + NetworkName(tenancy) +
                                ": still in use: " + Trimmed(removed->err));
    }
    return CommandFailed(args, *removed);
  }
  // Rules go after the network: a failure above leaves the tenancy still fenced in.
  return RemoveFirewall(*info, tenancy);
}

Status PodmanTenancy::EnsureFirewall(const NetworkInfo& network, std::string_view tenancy) {
  if (!options_.firewall) return Ok();
  if (network.bridge.empty()) {
    return Internal("network " + network.name + ": inspect names no bridge interface");
  }
  const std::string chain(kIsolationChain);
  auto Check = [&](std::vector<std::string> args) -> Result<bool> {
    auto output = Iptables(std::move(args));
    if (!output) return output.error();
    return output->status == 0;
  };
  auto Must = [&](std::vector<std::string> args) -> Status {
    auto output = Iptables(args);
    if (!output) return output.error();
    if (output->status != 0) return CommandFailed(args, *output);
    return Ok();
  };
  // -N fails when the chain exists; -L tells the two cases apart.
  for (const std::string& name : {chain, std::string("CNI-ADMIN")}) {
    auto listed = Check({"-n", "-L", name});
    if (!listed) return listed.error();
    if (!*listed) {
      auto created = Iptables({"-N", name});
      if (!created) return created.error();
    }
  }
  for (const auto& hook : IsolationHookChains()) {
    auto present = Check({"-C", hook, "-j", chain});
    if (!present) return present.error();
    if (!*present) {
      if (auto s = Must({"-I", hook, "1", "-j", chain}); !s) return s;
    }
  }
  for (auto rule : IsolationRules(network.bridge, tenancy)) {
    std::vector<std::string> check = {"-C", chain};
    check.insert(check.end(), rule.begin(), rule.end());
    auto present = Check(check);
    if (!present) return present.error();
    if (*present) continue;
    std::vector<std::string> append = {"-A", chain};
    append.insert(append.end(), rule.begin(), rule.end());
    if (auto s = Must(append); !s) return s;
  }
  return Ok();
}

Status PodmanTenancy::RemoveFirewall(const NetworkInfo& network, std::string_view tenancy) {
  if (!options_.firewall || network.bridge.empty()) return Ok();
  const std::string chain(kIsolationChain);
  for (auto rule : IsolationRules(network.bridge, tenancy)) {
    // Repeated while present: a crashed earlier run may have appended a rule twice.
    for (int i = 0; i < 8; ++i) {
      std::vector<std::string> del = {"-D", chain};
      del.insert(del.end(), rule.begin(), rule.end());
      auto output = Iptables(del);
      if (!output) return output.error();
      if (output->status != 0) break;
    }
  }
  return Ok();
}

Result<VolumeInfo> PodmanTenancy::InspectVolume(std::string_view volume) {
  auto exists = Podman({"volume", "exists", std::string(volume)});
  if (!exists) return exists.error();
  if (exists->status == 1) return NotFound("volume " + std::string(volume) + ": does not exist");
  auto args = VolumeInspectArgs(volume);
  auto output = Podman(args);
  if (!output) return output.error();
  if (output->status != 0) return CommandFailed(args, *output);
  return ParseVolumeInspect(output->out);
}

Status PodmanTenancy::RemoveVolume(std::string_view volume) {
  auto info = InspectVolume(volume);
  if (!info && info.error().category == ErrorCategory::kNotFound) return Ok();
  if (!info) return info.error();
  auto args = VolumeRemoveArgs(volume);
  auto removed = Podman(args);
  if (!removed) return removed.error();
  if (removed->status != 0) {
    if (removed->err.find("in use") != std::string::npos ||
        removed->err.find("being used") != std::string::npos) {
      return FailedPrecondition("volume " + std::string(volume) + ": still in use");
    }
    return CommandFailed(args, *removed);
  }
  return Ok();
}

Result<VolumeInfo> PodmanTenancy::EnsureVolume(std::string_view tenancy, const NfsExport& nfs) {
  if (auto s = ValidateTenancyName(tenancy); !s) return s.error();
  if (auto s = ValidateNfsExport(nfs); !s) return s.error();
  const std::string name = PodmanVolumeName(tenancy, nfs.name);
  auto info = InspectVolume(name);
  if (info) {
    auto label = info->labels.find(std::string(kTenancyLabel));
    if (info->driver == "local" && info->options == NfsVolumeOptions(nfs) &&
        label != info->labels.end() && label->second == tenancy) {
      return info;
    }
    // The entitlement changed (server, path, mode): the volume must say the new thing.
    if (auto s = RemoveVolume(name); !s) return s.error();
  } else if (info.error().category != ErrorCategory::kNotFound) {
    return info.error();
  }
  auto args = VolumeCreateArgs(tenancy, nfs);
  auto created = Podman(args);
  if (!created) return created.error();
  if (created->status != 0 && created->err.find("already exists") == std::string::npos) {
    return CommandFailed(args, *created);
  }
  return InspectVolume(name);
}

Status PodmanTenancy::SyncVolumes(std::string_view tenancy,
                                  const StorageEntitlements& entitlements) {
  if (auto s = ValidateTenancyName(tenancy); !s) return s;
  std::vector<std::string> args = {
      "volume",   "ls",       "--filter", std::string(kTenancyLabel) + "=" + std::string(tenancy),
      "--format", "{{.Name}}"};
  args[3] = "label=" + args[3];
  auto listed = Podman(args);
  if (!listed) return listed.error();
  if (listed->status != 0) return CommandFailed(args, *listed);
  std::set<std::string> wanted;
  for (const auto& nfs : entitlements.nfs) {
    wanted.insert(PodmanVolumeName(tenancy, nfs.name));
  }
  size_t start = 0;
  const std::string& text = listed->out;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string volume = Trimmed(text.substr(start, end - start));
    start = end + 1;
    // Only volumes named like ours: the label alone could be set by anyone.
    if (volume.rfind(NetworkName(tenancy) + ".", 0) != 0) continue;
    if (wanted.count(volume) == 0) {
      if (auto s = RemoveVolume(volume); !s) return s;
    }
  }
  for (const auto& nfs : entitlements.nfs) {
    if (auto info = EnsureVolume(tenancy, nfs); !info) return info.error();
  }
  return Ok();
}

}  // namespace tessera::tenancy
