// NFS storage entitlements: validation, resolving a submission's volumes, podman volume arguments.
#include <set>
#include <string>

#include "common/untrusted_text.h"
#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool IsControl(unsigned char c) {
  return c < 0x20 || c == 0x7f;
}

bool IsHostName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view label = name.substr(start, dot - start);
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!IsAlnum(c) && c != '-') return false;
    }
    start = dot + 1;
  }
  return true;
}

bool IsIpv6(std::string_view text) {
  if (text.size() < 2 || text.size() > 45 || text.find(':') == std::string_view::npos) {
    return false;
  }
  for (char c : text) {
    if (!IsHex(c) && c != ':' && c != '.') return false;
  }
  return true;
}

// Splits "/a/b" into its components; false when one is empty, "." or "..".
bool CleanAbsolute(std::string_view path, std::vector<std::string_view>* parts) {
  if (path.empty() || path.front() != '/') return false;
  size_t start = 1;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    parts->push_back(part);
    start = slash + 1;
  }
  // A trailing slash leaves start == size with the last component already taken: "/a/" is
  // refused too, so that one directory has one spelling.
  return path.size() == 1 || path.back() != '/';
}

}  // namespace

Status ValidateMountPath(std::string_view path, std::string_view field) {
  const std::string where(field);
  if (path.empty()) return InvalidArgument(where + ": empty");
  if (path.size() > 4096) return InvalidArgument(where + ": longer than 4096 bytes");
  for (unsigned char c : path) {
    if (IsControl(c)) return InvalidArgument(where + ": holds a control character");
    if (c == ':' || c == ',') {
      return InvalidArgument(where + ": may not hold ':' or ',' (podman mount syntax)");
    }
  }
  std::vector<std::string_view> parts;
  if (!CleanAbsolute(path, &parts)) {
    return InvalidArgument(where + ": \"" + Excerpt(path) +
                           "\" must be an absolute path without empty, '.' or '..' components");
  }
  if (parts.empty()) return InvalidArgument(where + ": may not be \"/\"");
  if (parts[0] == "dev" || parts[0] == "proc" || parts[0] == "sys") {
    return InvalidArgument(where + ": \"" + Excerpt(path) + "\" is on /" + std::string(parts[0]) +
                           ", which the container runtime owns");
  }
  return Ok();
}

Status ValidateNfsExport(const NfsExport& nfs, std::string_view field) {
  const std::string where(field);
  if (auto s = ValidateExportName(nfs.name, where + ".name"); !s) return s;
  if (!IsHostName(nfs.server) && !IsIpv6(nfs.server)) {
    return InvalidArgument(where + ".server: expected a host name, IPv4 or IPv6 address");
  }
  if (nfs.path.size() > 1024) return InvalidArgument(where + ".path: longer than 1024 bytes");
  for (unsigned char c : nfs.path) {
    // ',' would end the mount option list, whitespace and URL delimiters break nfs:// URLs.
    if (IsControl(c) || c == ' ' || c == ',' || c == '?' || c == '#' || c == '%') {
      return InvalidArgument(where +
                             ".path: may not hold control characters, spaces, ',', '?', '#' "
                             "or '%'");
    }
  }
  std::vector<std::string_view> parts;
  if (!CleanAbsolute(nfs.path, &parts)) {
    return InvalidArgument(where +
                           ".path: must be an absolute path without empty, '.' or '..' "
                           "components");
  }
  return Ok();
}

Result<std::vector<ResolvedVolume>> ResolveVolumes(std::string_view tenancy,
                                                   const StorageEntitlements& entitlements,
                                                   const std::vector<VolumeRequest>& requests) {
  if (auto s = ValidateTenancyName(tenancy); !s) return s.error();
  std::vector<ResolvedVolume> resolved;
  std::set<std::string> mount_paths;
  for (size_t i = 0; i < requests.size(); ++i) {
    const VolumeRequest& request = requests[i];
    const std::string where = "volumes[" + std::to_string(i) + "]";
    const NfsExport* found = nullptr;
    for (const auto& nfs : entitlements.nfs) {
      if (nfs.name == request.name) found = &nfs;
    }
    // One message for "unknown" and "another tenancy's": a tenant learns nothing about others.
    if (found == nullptr) {
      return PermissionDenied(where + ".name: volume \"" + request.name +
                              "\" is not an export tenancy " + std::string(tenancy) +
                              " is entitled to");
    }
    if (found->read_only && request.read_only.has_value() && !*request.read_only) {
      return PermissionDenied(where + ".readOnly: volume \"" + request.name +
                              "\" is entitled read-only; ask for readOnly: true");
    }
    if (auto s = ValidateMountPath(request.mount_path, where + ".mountPath"); !s) return s.error();
    if (!mount_paths.insert(request.mount_path).second) {
      return InvalidArgument(where + ".mountPath: \"" + request.mount_path +
                             "\" is used by another volume");
    }
    ResolvedVolume volume;
    volume.source = *found;
    volume.podman_volume = PodmanVolumeName(tenancy, found->name);
    volume.mount_path = request.mount_path;
    volume.read_only = found->read_only || request.read_only.value_or(false);
    resolved.push_back(std::move(volume));
  }
  return resolved;
}

std::map<std::string, std::string> NfsVolumeOptions(const NfsExport& nfs) {
  std::string o = "addr=" + nfs.server;
  if (nfs.port != 0) o += ",port=" + std::to_string(nfs.port);
  // Read-only exports are mounted read-only on the host too, not only inside the container.
  if (nfs.read_only) o += ",ro";
  // "<server>:<path>", not Docker's ":<path>": podman mounts through mount(8), and Debian's
  // mount.nfs helper fails on an empty host ("Failed to resolve server"); measured here.
  const std::string host = IsIpv6(nfs.server) ? "[" + nfs.server + "]" : nfs.server;
  return {{"type", "nfs"}, {"o", o}, {"device", host + ":" + nfs.path}};
}

std::vector<std::string> VolumeCreateArgs(std::string_view tenancy, const NfsExport& nfs) {
  std::vector<std::string> args = {"volume", "create", "--driver", "local"};
  // Fixed order (type, o, device) so logs and tests read the same every time.
  const auto options = NfsVolumeOptions(nfs);
  for (const char* key : {"type", "o", "device"}) {
    args.push_back("--opt");
    args.push_back(std::string(key) + "=" + options.at(key));
  }
  args.push_back("--label");
  args.push_back(std::string(kTenancyLabel) + "=" + std::string(tenancy));
  args.push_back(PodmanVolumeName(tenancy, nfs.name));
  return args;
}

std::vector<std::string> VolumeInspectArgs(std::string_view volume) {
  return {"volume", "inspect", std::string(volume)};
}

std::vector<std::string> VolumeRemoveArgs(std::string_view volume) {
  return {"volume", "rm", std::string(volume)};
}

std::vector<std::string> ContainerVolumeArgs(const std::vector<ResolvedVolume>& volumes) {
  std::vector<std::string> args;
  for (const auto& volume : volumes) {
    std::string spec =
        "type=volume,source=" + volume.podman_volume + ",target=" + volume.mount_path;
    if (volume.read_only) spec += ",ro=true";
    args.push_back("--mount");
    args.push_back(std::move(spec));
  }
  return args;
}

std::string NfsUrl(const NfsExport& nfs, std::string_view file) {
  std::string host = IsIpv6(nfs.server) ? "[" + nfs.server + "]" : nfs.server;
  std::string url = "nfs://" + host + nfs.path;
  if (!file.empty()) {
    if (url.back() != '/') url += '/';
    url += std::string(file);
  }
  url += "?version=4&nfsport=" + std::to_string(nfs.port != 0 ? nfs.port : 2049);
  return url;
}

}  // namespace tessera::tenancy
