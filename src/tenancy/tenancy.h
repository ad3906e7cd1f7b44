// Tenant isolation in embedded (podman) mode: tenancy names, one podman network per tenancy,
// the host firewall rules that keep tenancy networks apart, NFS storage entitlements and the
// podman volumes that carry them into containers.
//
// Pure functions (names, argv lists, parsing, entitlement checks) are separate from the effects
// (PodmanTenancy runs podman and iptables, without a shell). docs/tenancy.md explains the model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace tessera::tenancy {

// ---------------------------------------------------------------------------------------------
// Names

// Tenancy names are DNS-1123 labels (as Kubernetes namespaces): 1..63 characters of lowercase
// letters, digits and '-', starting and ending with a letter or digit; the same rule as the
// fleet's tenancy records, so every tenancy can have a network. `field` names the input in the
// error ("tenancy", "path.name").
inline constexpr size_t kMaxTenancyNameLength = 63;
Status ValidateTenancyName(std::string_view name, std::string_view field = "tenancy");

// Export (volume) names: the same DNS-1123 label rule.
Status ValidateExportName(std::string_view name, std::string_view field = "name");

// "tessera-t-<tenancy>": the podman network of a tenancy.
inline constexpr std::string_view kNetworkPrefix = "tessera-t-";
std::string NetworkName(std::string_view tenancy);
// Label put on every network and volume made for a tenancy: io.tessera.tenancy=<name>.
inline constexpr std::string_view kTenancyLabel = "io.tessera.tenancy";

// ---------------------------------------------------------------------------------------------
// Networks

// What a submission asks for in `network`: its tenancy's network (the default) or none at all
// (loopback only).
enum class NetworkMode { kTenancy, kNone };
const char* NetworkModeName(NetworkMode mode);
// "tenancy" | "none"; the error names `field`.
Result<NetworkMode> ParseNetworkMode(std::string_view text, std::string_view field = "network");
// The submission's `network` value (absent/null → kTenancy); strict: only those two strings.
Result<NetworkMode> NetworkModeFromJson(const nlohmann::json& value,
                                        std::string_view field = "network");

// podman arguments (without "podman") creating a tenancy's network: a bridge network marked
// --internal. Measured on Debian 12 (podman 4.3.1, CNI backend, iptables-nft): two ordinary
// bridge networks reach each other, because the host routes between bridges (ip_forward=1,
// FORWARD policy ACCEPT, CNI's firewall plugin only adds ACCEPT rules). --internal leaves the
// bridge without a host address and the containers without a gateway, so another tenancy's
// subnet is unreachable; the firewall rules below close the same path at the host as well.
std::vector<std::string> NetworkCreateArgs(std::string_view tenancy);
std::vector<std::string> NetworkInspectArgs(std::string_view tenancy);
std::vector<std::string> NetworkRemoveArgs(std::string_view tenancy);

// A network may go only when its tenancy has been deleted and no container of it is left.
Status CheckNetworkRemovable(std::string_view tenancy, bool tenancy_deleted,
                             size_t container_count);

// `podman run` flags placing a container of `tenancy` on the network it is allowed: its own
// network, or none.
std::vector<std::string> ContainerNetworkArgs(std::string_view tenancy, NetworkMode mode);

// What `podman network inspect` says about a network (the fields isolation depends on).
struct NetworkInfo {
  std::string name;
  std::string driver;
  std::string bridge;  // host bridge device, e.g. cni-podman3
  bool internal = false;
  std::vector<std::string> subnets;
  std::map<std::string, std::string> labels;
};
// Parses `podman network inspect NAME` output (a JSON list of one network).
Result<NetworkInfo> ParseNetworkInspect(std::string_view json_text);

// Host firewall (iptables) rules for one tenancy bridge, in chain kIsolationChain: drop anything
// the host would route into or out of the bridge. Traffic between containers on the same bridge
// is switched, not routed, so it is untouched (with br_netfilter it is seen as -i br -o br, which
// these rules exclude). Each rule is iptables arguments without the verb (-A/-C/-D CHAIN).
inline constexpr std::string_view kIsolationChain = "TESSERA-ISOLATION";
std::vector<std::vector<std::string>> IsolationRules(std::string_view bridge,
                                                     std::string_view tenancy);
// Chains that jump to kIsolationChain: FORWARD (first rule) and CNI-ADMIN, which the CNI firewall
// plugin evaluates before its own per-container ACCEPT rules.
std::vector<std::string> IsolationHookChains();

// ---------------------------------------------------------------------------------------------
// NFS storage entitlements

// One NFS export a tenancy may mount.
struct NfsExport {
  std::string name;    // the name submissions use; DNS-1123 label
  std::string server;  // host name, IPv4 or IPv6 address (no brackets)
  std::string path;    // absolute path on the server
  uint16_t port = 0;   // 0: the NFS default (2049)
  bool read_only = false;
  bool operator==(const NfsExport&) const = default;
};

// Key of a tenancy's storage entitlements among the fleet record's extensions (JSON text as
// written by StorageEntitlementsToJson).
inline constexpr std::string_view kStorageExtension = "storage";

struct StorageEntitlements {
  std::vector<NfsExport> nfs;  // names unique
  bool operator==(const StorageEntitlements&) const = default;
};

// The admin body: {"nfs": [{"name", "server", "path", "readOnly"?, "port"?}]}; strict (unknown
// fields rejected), errors name the field ("nfs[1].server: ...").
inline constexpr size_t kMaxExports = 64;
Result<StorageEntitlements> ParseStorageEntitlements(std::string_view json_text);
Result<StorageEntitlements> StorageEntitlementsFromJson(const nlohmann::json& value);
std::string StorageEntitlementsToJson(const StorageEntitlements& entitlements);
Status ValidateNfsExport(const NfsExport& nfs, std::string_view field = "nfs");

// One entry of a submission's `volumes`.
struct VolumeRequest {
  std::string name;
  std::string mount_path;
  std::optional<bool> read_only;  // absent: the export's own mode
  bool operator==(const VolumeRequest&) const = default;
};

// The submission's `volumes`: [{"name", "mountPath", "readOnly"?}], at most kMaxVolumes entries;
// strict, errors name the field ("volumes[0].mountPath: ..."). mountPath is checked here too.
inline constexpr size_t kMaxVolumes = 32;
Result<std::vector<VolumeRequest>> ParseVolumeRequests(std::string_view json_text);
Result<std::vector<VolumeRequest>> VolumeRequestsFromJson(const nlohmann::json& value,
                                                          std::string_view field = "volumes");
// The same array back (the API's container view and the store's spec column both write it).
nlohmann::json VolumeRequestsToJson(const std::vector<VolumeRequest>& requests);

// mountPath rules: absolute, at most 4096 bytes, no empty, "." or ".." components, none of
// ':' ',' or control characters (they would split podman's --volume/--mount syntax), and not
// "/" nor /dev, /proc, /sys or anything under them (the runtime owns those).
Status ValidateMountPath(std::string_view path, std::string_view field = "mountPath");

// A request resolved against the tenancy's entitlements.
struct ResolvedVolume {
  NfsExport source;
  std::string podman_volume;  // PodmanVolumeName(tenancy, source.name)
  std::string mount_path;
  bool read_only = false;
};

// Every request must name an export of *this* tenancy's entitlements; anything else (unknown
// name, another tenancy's export, a podman volume name) is kPermissionDenied naming the volume.
// Asking readOnly:false of a read-only export is refused the same way rather than silently
// downgraded: the submitter learns at submit time, not from EROFS inside the job.
// Two requests with the same mountPath are kInvalidArgument.
Result<std::vector<ResolvedVolume>> ResolveVolumes(std::string_view tenancy,
                                                   const StorageEntitlements& entitlements,
                                                   const std::vector<VolumeRequest>& requests);

// "tessera-t-<tenancy>.<export>": '.' cannot occur in either name, so names never collide.
std::string PodmanVolumeName(std::string_view tenancy, std::string_view export_name);

// The local driver's NFS options: type=nfs, o=addr=<server>[,port=<port>][,ro],
// device=<server>:<path> (IPv6 servers in brackets). Docker documents device=:<path>, but podman
// runs mount(8), whose mount.nfs helper refuses a device without a host.
std::map<std::string, std::string> NfsVolumeOptions(const NfsExport& nfs);

// podman arguments (without "podman") creating the volume of one entitled export.
std::vector<std::string> VolumeCreateArgs(std::string_view tenancy, const NfsExport& nfs);
std::vector<std::string> VolumeInspectArgs(std::string_view volume);
std::vector<std::string> VolumeRemoveArgs(std::string_view volume);

// `podman run` flags mounting resolved volumes: --mount type=volume,source=..,target=..[,ro].
std::vector<std::string> ContainerVolumeArgs(const std::vector<ResolvedVolume>& volumes);

// The same export as an nfs:// URL for libnfs tools (nfs-ls, nfs-cp): NFSv4, explicit port.
std::string NfsUrl(const NfsExport& nfs, std::string_view file = "");

struct VolumeInfo {
  std::string name;
  std::string driver;
  std::map<std::string, std::string> options;
  std::map<std::string, std::string> labels;
};
// Parses `podman volume inspect NAME` output (a JSON list of one volume).
Result<VolumeInfo> ParseVolumeInspect(std::string_view json_text);

// ---------------------------------------------------------------------------------------------
// Effects

struct CommandOutput {
  int status = -1;  // exit status; 128+signal when killed
  std::string out;
  std::string err;
};
// Runs argv without a shell. Tests and the service use RunCommand; a fake can be put in its place.
using CommandRunner = std::function<Result<CommandOutput>(const std::vector<std::string>& argv)>;
// fork + execvp, stdout and stderr captured separately, killed after `timeout_ms`.
Result<CommandOutput> RunCommand(const std::vector<std::string>& argv, int timeout_ms = 120000);

struct PodmanTenancyOptions {
  std::string podman = "podman";
  std::string iptables = "iptables";
  // Off only where the host has no iptables; the --internal network still isolates.
  bool firewall = true;
  CommandRunner runner;  // empty: RunCommand
};

// Creates, inspects and removes tenancy networks and NFS volumes with podman; keeps the host
// firewall rules in step. Every method is idempotent (safe to repeat after a crash).
class PodmanTenancy {
 public:
  explicit PodmanTenancy(PodmanTenancyOptions options = {});

  // Creates the network when missing (an existing network that is not --internal or not labelled
  // for this tenancy is kFailedPrecondition, never reused), then ensures its firewall rules.
  Result<NetworkInfo> EnsureNetwork(std::string_view tenancy);
  // kNotFound when the network does not exist.
  Result<NetworkInfo> InspectNetwork(std::string_view tenancy);
  // Removes the firewall rules and the network; CheckNetworkRemovable first. Missing → Ok.
  Status RemoveNetwork(std::string_view tenancy, bool tenancy_deleted, size_t container_count);

  // Creates the volume of an entitled export; an existing one with other options is replaced
  // (kFailedPrecondition when a container still uses it).
  Result<VolumeInfo> EnsureVolume(std::string_view tenancy, const NfsExport& nfs);
  Result<VolumeInfo> InspectVolume(std::string_view volume);
  Status RemoveVolume(std::string_view volume);  // missing → Ok
  // Makes the tenancy's podman volumes match its entitlements: creates/updates entitled ones and
  // removes those of exports no longer entitled.
  Status SyncVolumes(std::string_view tenancy, const StorageEntitlements& entitlements);

 private:
  Result<CommandOutput> Podman(std::vector<std::string> args);
  Status EnsureFirewall(const NetworkInfo& network, std::string_view tenancy);
  Status RemoveFirewall(const NetworkInfo& network, std::string_view tenancy);
  Result<CommandOutput> Iptables(std::vector<std::string> args);

  PodmanTenancyOptions options_;
};

}  // namespace tessera::tenancy
