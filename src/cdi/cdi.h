// Container Device Interface (CDI) specs: the model, a builder from an Inventory, the smallest
// cdiVersion a spec needs, a strict parser and a validator with the reference library's rules,
// and atomic writes into the spec directories.
//
// CDI is how podman, containerd >= 1.7, CRI-O, Docker >= 25 and kubelet learn what a device needs
// inside a container. Field names and rules follow the CDI specification and the reference Go
// library (github.com/cncf-tags/container-device-interface, pkg/cdi).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "inventory/inventory.h"

namespace tessera::cdi {

// ---- The spec model (field for field the CDI JSON; empty/absent fields are omitted) ----

struct DeviceNode {
  std::string path;       // in the container
  std::string host_path;  // on the host; empty = same as path (needs cdiVersion 0.5.0)
  std::string type;       // "c", "b", "u", "p" or empty
  int64_t major = 0;      // 0 = not given (the runtime stats host_path)
  int64_t minor = 0;
  std::optional<uint32_t> file_mode;
  std::string permissions;  // subset of "rwm"
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;

  friend bool operator==(const DeviceNode&, const DeviceNode&) = default;
};

struct Mount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;
  std::string type;  // needs cdiVersion 0.4.0

  friend bool operator==(const Mount&, const Mount&) = default;
};

struct Hook {
  std::string hook_name;  // prestart, createRuntime, createContainer, startContainer, poststart,
                          // poststop
  std::string path;
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::optional<int64_t> timeout;

  friend bool operator==(const Hook&, const Hook&) = default;
};

// Intel RDT class of service (cdiVersion 0.7.0).
struct IntelRdt {
  std::string clos_id;
  std::string l3_cache_schema;
  std::string mem_bw_schema;
  bool enable_cmt = false;
  bool enable_mbm = false;

  friend bool operator==(const IntelRdt&, const IntelRdt&) = default;
};

struct ContainerEdits {
  std::vector<std::string> env;  // "NAME=value"
  std::vector<DeviceNode> device_nodes;
  std::vector<Hook> hooks;
  std::vector<Mount> mounts;
  std::optional<IntelRdt> intel_rdt;      // cdiVersion 0.7.0
  std::vector<uint32_t> additional_gids;  // cdiVersion 0.7.0

  bool empty() const {
    return env.empty() && device_nodes.empty() && hooks.empty() && mounts.empty() && !intel_rdt &&
           additional_gids.empty();
  }
  friend bool operator==(const ContainerEdits&, const ContainerEdits&) = default;
};

struct Device {
  std::string name;
  std::map<std::string, std::string> annotations;  // cdiVersion 0.6.0
  ContainerEdits container_edits;

  friend bool operator==(const Device&, const Device&) = default;
};

struct Spec {
  std::string version;                             // "cdiVersion"
  std::string kind;                                // "vendor/class"
  std::map<std::string, std::string> annotations;  // cdiVersion 0.6.0
  std::vector<Device> devices;
  ContainerEdits container_edits;  // applied once when any device of the spec is injected

  std::string Vendor() const;  // part of kind before '/', empty when kind has none
  std::string Class() const;   // part after '/'
  friend bool operator==(const Spec&, const Spec&) = default;
};

// ---- Versions ----

// The lowest cdiVersion whose schema covers everything `spec` uses: 0.3.0 base; 0.4.0 mount
// type; 0.5.0 device node hostPath or a device name not starting with a letter; 0.6.0
// annotations or a '.' in the class; 0.7.0 additionalGids or intelRdt. (Upstream
// pkg/cdi/version.go, requiresV040..requiresV070.)
std::string MinimumVersion(const Spec& spec);
// Versions this validator knows, oldest first ("0.1.0" .. "0.7.0").
const std::vector<std::string>& KnownVersions();

// ---- Names ----

// Each returns the problem, or an empty string when the name is valid.
std::string CheckVendorName(std::string_view vendor);
std::string CheckClassName(std::string_view class_name);
std::string CheckDeviceName(std::string_view name);
// "vendor/class" split and both halves checked.
std::string CheckKind(std::string_view kind);

// ---- Parsing and validation ----

// One problem in a spec: device is "-" for spec-level problems; field is a JSON path such as
// "containerEdits.deviceNodes[0].path".
struct Problem {
  std::string device;
  std::string field;
  std::string message;
  friend bool operator==(const Problem&, const Problem&) = default;
};
// "device: field: message"
std::string FormatProblem(const Problem& problem);

// The largest spec file read or parsed.
inline constexpr size_t kMaxSpecFileBytes = size_t{16} << 20;

// Strict parse of a JSON or YAML spec (YAML when the text does not start with '{'): unknown
// fields, wrong types and missing required fields are problems. The spec holds whatever could
// be decoded.
struct ParsedSpec {
  Spec spec;
  std::vector<Problem> problems;
};
ParsedSpec ParseSpec(std::string_view text);

// The reference library's semantic rules: version known and high enough for the fields used,
// vendor/class/device name syntax, duplicate device names, empty device edits, env entries
// without '=', empty device/mount/hook paths, device node type and permissions, hook names.
std::vector<Problem> ValidateSpec(const Spec& spec);

// Parse + validate the text of one spec file.
std::vector<Problem> CheckSpecText(std::string_view text);

// One problem found in a file.
struct FileProblem {
  std::string file;
  Problem problem;
};
// "file: device: field: message"
std::string FormatFileProblem(const FileProblem& problem);

// Validates files and directories as a runtime would load them: a directory contributes its
// *.json and *.yaml files (not subdirectories); devices defined in two files of one directory
// conflict. Unreadable paths are problems too.
std::vector<FileProblem> ValidatePaths(const std::vector<std::string>& paths);

// ---- Serialisation ----

// Deterministic JSON (fields in the specification's order, absent fields omitted).
std::string ToJson(const Spec& spec, int indent = 2);
// Block-style YAML; strings are always double-quoted so "0" stays a string.
std::string ToYaml(const Spec& spec);

// ---- Building specs from an inventory ----

enum class Mode {
  kAuto,    // per device from its bound driver: nvidia -> driver, vfio-pci -> vfio, else dri
  kDriver,  // shared host kernel (runc, gVisor): /dev/nvidia*, driver libraries and binaries
  kVfio,    // VM isolation (Kata): whole IOMMU groups through /dev/vfio
  kDri,     // DRM render/card nodes (AMD, Intel, NVIDIA graphics), /dev/kfd for AMD
};
const char* ModeName(Mode mode);
Result<Mode> ParseMode(std::string_view name);

struct BuildOptions {
  Mode mode = Mode::kAuto;
  // Overrides the kind of the GPU spec ("vendor/class"); empty = default per mode and vendor
  // (driver: nvidia.com/gpu, vfio: nvidia.com/pgpu, dri: amd.com/gpu, intel.com/gpu,
  // nvidia.com/gpu). Must select exactly one GPU spec.
  std::string gpu_kind;
  std::string nvswitch_kind = "nvidia.com/nvswitch";
  // vfio mode: use iommufd (/dev/iommu + /dev/vfio/devices/vfioN) instead of the legacy group
  // container (/dev/vfio/vfio + /dev/vfio/<group>).
  bool iommufd = false;
};

struct BuildResult {
  std::vector<Spec> specs;            // sorted by kind, each with its minimum cdiVersion
  std::vector<std::string> warnings;  // devices left out and why
};

// Pure: reads nothing but the inventory. Device node host paths and mount sources are the
// inventory's paths under its root (inventory::HostPath); container paths are the host paths.
Result<BuildResult> BuildSpecs(const inventory::Inventory& inventory, const BuildOptions& options);

// ---- Writing ----

inline constexpr const char* kDefaultSpecDir = "/var/run/cdi";

enum class Format { kJson, kYaml };
Result<Format> ParseFormat(std::string_view name);
std::string Serialize(const Spec& spec, Format format);

// "<vendor>-<class>.json" (or .yaml).
std::string SpecFileName(const Spec& spec, Format format);

// Writes atomically (temp file + rename in the same directory), mode 0644, creating `dir` when
// missing. Returns whether the file changed: an identical file is left alone. `durability`: see
// common/atomic_file.h (a spec rebuilt after every boot need not survive a power loss).
Result<bool> WriteSpecFile(const std::string& path, const std::string& content,
                           Durability durability = Durability::kPowerLoss);

}  // namespace tessera::cdi
