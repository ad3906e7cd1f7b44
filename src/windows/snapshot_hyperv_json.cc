// Format 2's Hyper-V facts in and out: the PCI display/compute adapters with their Discrete Device
// Assignment properties, the host's Hyper-V services and IOV support, and containerd. Strict like
// the rest of the snapshot; every list is bounded, so a hostile snapshot cannot make the
// consumers walk without end.
#include <algorithm>

#include "windows/snapshot_json_fields.h"
#include "windows/windows.h"

namespace tessera::windows {
namespace snapshot_json {
namespace {

constexpr size_t kMaxPciAdapters = 256;
constexpr size_t kMaxLocationPaths = 16;
constexpr size_t kMaxMemoryRanges = 64;
constexpr size_t kMaxRuntimes = 64;
constexpr size_t kMaxAnnotationPatterns = 64;
constexpr size_t kMaxReasons = 32;
constexpr uint64_t kMaxInterrupts = 65536;

template <typename Enum, size_t N>
Enum GetEnum(const json& j, const std::string& path, const char* key,
             const std::pair<const char*, Enum> (&names)[N]) {
  std::string text = GetString(j, path, key);
  for (const auto& [name, value] : names) {
    if (text == name) return value;
  }
  std::string expected;
  for (size_t i = 0; i < N; ++i)
    expected += std::string(i == 0       ? ""
                            : i + 1 == N ? " or "
                                         : ", ") +
                "\"" + names[i].first + "\"";
  Throw(Join(path, key), "expected " + expected + ", got " + Quote(text));
}

constexpr std::pair<const char*, ServiceState> kServiceStates[] = {
    {"running", ServiceState::kRunning},
    {"stopped", ServiceState::kStopped},
    {"absent", ServiceState::kAbsent},
    {"unknown", ServiceState::kUnknown}};
constexpr std::pair<const char*, ConfigState> kConfigStates[] = {
    {"read", ConfigState::kRead},
    {"absent", ConfigState::kAbsent},
    {"unreadable", ConfigState::kUnreadable},
    {"invalid", ConfigState::kInvalid}};

DdaProperties ParseDda(const json& j, const std::string& path) {
  ExpectObject(j, path,
               {"device_type", "acs_compatible_up_hierarchy", "requires_reserved_memory_region"});
  DdaProperties d;
  d.device_type = GetNullable<uint32_t>(
      j, "device_type", [&] { return uint32_t(GetUnsigned(j, path, "device_type", 0xffff)); });
  d.acs_compatible_up_hierarchy = GetNullable<uint32_t>(j, "acs_compatible_up_hierarchy", [&] {
    return uint32_t(GetUnsigned(j, path, "acs_compatible_up_hierarchy", 0xffff));
  });
  d.requires_reserved_memory_region = GetNullable<bool>(j, "requires_reserved_memory_region", [&] {
    return GetBool(j, path, "requires_reserved_memory_region");
  });
  return d;
}

std::vector<MemoryRange> ParseRanges(const json& j, const std::string& path) {
  const json& ranges = GetArray(j, path, "memory_ranges", kMaxMemoryRanges);
  std::string field = Join(path, "memory_ranges");
  std::vector<MemoryRange> out;
  for (size_t i = 0; i < ranges.size(); ++i) {
    std::string at = Index(field, i);
    ExpectObject(ranges[i], at, {"start", "end"});
    MemoryRange r{GetHex(ranges[i], at, "start", 16), GetHex(ranges[i], at, "end", 16)};
    if (r.end < r.start) Throw(at, "end is below start");
    out.push_back(r);
  }
  return out;
}

PciAdapter ParsePciAdapter(const json& j, const std::string& path) {
  ExpectObject(j, path,
               {"instance_id", "description", "class_code", "location_paths", "problem_code", "dda",
                "interrupts", "memory_ranges", "driver_inf", "driver_store_path"});
  PciAdapter a;
  a.instance_id = GetString(j, path, "instance_id");
  // Checked as the device string it becomes (vpci-instance-id://ID): printable, no spaces.
  if (auto ref = ParseDeviceString("vpci-instance-id://" + a.instance_id); !ref.ok()) {
    Throw(Join(path, "instance_id"), ref.error().message);
  }
  if (a.instance_id.rfind("PCI\\", 0) != 0 && a.instance_id.rfind("PCIP\\", 0) != 0) {
    Throw(Join(path, "instance_id"),
          "expected a PCI\\ or PCIP\\ device instance ID, got " + Quote(a.instance_id));
  }
  a.description = GetString(j, path, "description");
  a.class_code = GetNullable<uint32_t>(j, "class_code",
                                       [&] { return uint32_t(GetHex(j, path, "class_code", 6)); });
  a.location_paths = GetStringArray(j, path, "location_paths", kMaxLocationPaths);
  for (size_t i = 0; i < a.location_paths.size(); ++i) {
    if (a.location_paths[i].empty()) {
      Throw(Index(Join(path, "location_paths"), i), "must not be empty");
    }
  }
  a.problem_code = uint32_t(GetUnsigned(j, path, "problem_code", 0xffff));
  a.dda = ParseDda(j.at("dda"), Join(path, "dda"));
  a.interrupts = GetNullable<InterruptCounts>(j, "interrupts", [&] {
    std::string at = Join(path, "interrupts");
    const json& i = j.at("interrupts");
    ExpectObject(i, at, {"message_signaled", "line_based"});
    return InterruptCounts{uint32_t(GetUnsigned(i, at, "message_signaled", kMaxInterrupts)),
                           uint32_t(GetUnsigned(i, at, "line_based", kMaxInterrupts))};
  });
  a.memory_ranges = GetNullable<std::vector<MemoryRange>>(j, "memory_ranges",
                                                          [&] { return ParseRanges(j, path); });
  a.driver_inf = GetString(j, path, "driver_inf");
  a.driver_store_path = GetString(j, path, "driver_store_path");
  return a;
}

HyperVHost ParseHyperVHost(const json& j) {
  const std::string path = "hyperv";
  ExpectObject(j, path, {"vmms", "vmcompute", "iov_support", "iov_support_reasons"});
  HyperVHost h;
  h.vmms = GetEnum(j, path, "vmms", kServiceStates);
  h.vmcompute = GetEnum(j, path, "vmcompute", kServiceStates);
  h.iov_support =
      GetNullable<bool>(j, "iov_support", [&] { return GetBool(j, path, "iov_support"); });
  h.iov_support_reasons = GetStringArray(j, path, "iov_support_reasons", kMaxReasons);
  return h;
}

ContainerdRuntime ParseRuntime(const json& j, const std::string& path) {
  ExpectObject(
      j, path,
      {"name", "runtime_type", "sandbox_isolation", "pod_annotations", "container_annotations"});
  ContainerdRuntime r;
  r.name = GetString(j, path, "name");
  if (r.name.empty()) Throw(Join(path, "name"), "must not be empty");
  r.runtime_type = GetString(j, path, "runtime_type");
  r.sandbox_isolation = GetNullable<int64_t>(j, "sandbox_isolation", [&] {
    return int64_t(GetUnsigned(j, path, "sandbox_isolation", 0xffff));
  });
  r.pod_annotations = GetStringArray(j, path, "pod_annotations", kMaxAnnotationPatterns);
  r.container_annotations =
      GetStringArray(j, path, "container_annotations", kMaxAnnotationPatterns);
  return r;
}

ContainerdHost ParseContainerd(const json& j) {
  const std::string path = "containerd";
  ExpectObject(j, path,
               {"binary", "version", "config_path", "config", "runtimes", "shim_path",
                "hcsshim_version", "device_util_beside_shim"});
  ContainerdHost c;
  c.binary = GetString(j, path, "binary");
  if (c.binary.empty()) Throw(Join(path, "binary"), "must not be empty (use null: not found)");
  c.version = GetString(j, path, "version");
  c.config_path = GetString(j, path, "config_path");
  c.config_state = GetEnum(j, path, "config", kConfigStates);
  const json& runtimes = GetArray(j, path, "runtimes", kMaxRuntimes);
  for (size_t i = 0; i < runtimes.size(); ++i) {
    c.runtimes.push_back(ParseRuntime(runtimes[i], Index(Join(path, "runtimes"), i)));
    for (size_t k = 0; k + 1 < c.runtimes.size(); ++k) {
      if (c.runtimes[k].name == c.runtimes.back().name) {
        Throw(Index(Join(path, "runtimes"), i) + ".name",
              "duplicate runtime " + Quote(c.runtimes.back().name));
      }
    }
  }
  if (c.config_state != ConfigState::kRead && !c.runtimes.empty()) {
    Throw(Join(path, "runtimes"), "must be empty unless the config was read");
  }
  c.shim_path = GetString(j, path, "shim_path");
  c.hcsshim_version = GetString(j, path, "hcsshim_version");
  c.device_util_beside_shim = GetBool(j, path, "device_util_beside_shim");
  if (c.shim_path.empty() && c.device_util_beside_shim) {
    Throw(Join(path, "device_util_beside_shim"), "true without a shim_path");
  }
  return c;
}

ojson OptionalUnsigned(const std::optional<uint32_t>& v) {
  return v ? ojson(*v) : ojson(nullptr);
}

}  // namespace

HyperVFacts ParseHyperVFacts(const json& root) {
  HyperVFacts f;
  const json& adapters = GetArray(root, "", "pci_adapters", kMaxPciAdapters);
  for (size_t i = 0; i < adapters.size(); ++i) {
    std::string path = Index("pci_adapters", i);
    f.pci_adapters.push_back(ParsePciAdapter(adapters[i], path));
    for (size_t k = 0; k + 1 < f.pci_adapters.size(); ++k) {
      if (f.pci_adapters[k].instance_id == f.pci_adapters.back().instance_id) {
        Throw(path + ".instance_id",
              "duplicate instance ID " + Quote(f.pci_adapters.back().instance_id));
      }
    }
  }
  f.hyperv = ParseHyperVHost(root.at("hyperv"));
  if (!root.at("containerd").is_null()) f.containerd = ParseContainerd(root.at("containerd"));
  return f;
}

void WriteHyperVFacts(const HyperVFacts& f, ojson& root) {
  ojson adapters = ojson::array();
  for (const PciAdapter& a : f.pci_adapters) {
    ojson o = ojson::object();
    o["instance_id"] = a.instance_id;
    o["description"] = a.description;
    o["class_code"] = a.class_code ? ojson(Hex(*a.class_code, 6)) : ojson(nullptr);
    o["location_paths"] = a.location_paths;
    o["problem_code"] = a.problem_code;
    o["dda"] =
        ojson{{"device_type", OptionalUnsigned(a.dda.device_type)},
              {"acs_compatible_up_hierarchy", OptionalUnsigned(a.dda.acs_compatible_up_hierarchy)},
              {"requires_reserved_memory_region",
               a.dda.requires_reserved_memory_region ? ojson(*a.dda.requires_reserved_memory_region)
                                                     : ojson(nullptr)}};
    o["interrupts"] = a.interrupts ? ojson{{"message_signaled", a.interrupts->message_signaled},
                                           {"line_based", a.interrupts->line_based}}
                                   : ojson(nullptr);
    if (a.memory_ranges) {
      ojson ranges = ojson::array();
      for (const MemoryRange& r : *a.memory_ranges) {
        ranges.push_back(ojson{{"start", Hex(r.start, 16)}, {"end", Hex(r.end, 16)}});
      }
      o["memory_ranges"] = ranges;
    } else {
      o["memory_ranges"] = nullptr;
    }
    o["driver_inf"] = a.driver_inf;
    o["driver_store_path"] = a.driver_store_path;
    adapters.push_back(o);
  }
  root["pci_adapters"] = adapters;
  const HyperVHost& h = f.hyperv;
  root["hyperv"] = ojson{{"vmms", ServiceStateName(h.vmms)},
                         {"vmcompute", ServiceStateName(h.vmcompute)},
                         {"iov_support", h.iov_support ? ojson(*h.iov_support) : ojson(nullptr)},
                         {"iov_support_reasons", h.iov_support_reasons}};
  if (!f.containerd) {
    root["containerd"] = nullptr;
    return;
  }
  const ContainerdHost& c = *f.containerd;
  ojson runtimes = ojson::array();
  for (const ContainerdRuntime& r : c.runtimes) {
    runtimes.push_back(ojson{
        {"name", r.name},
        {"runtime_type", r.runtime_type},
        {"sandbox_isolation", r.sandbox_isolation ? ojson(*r.sandbox_isolation) : ojson(nullptr)},
        {"pod_annotations", r.pod_annotations},
        {"container_annotations", r.container_annotations}});
  }
  root["containerd"] = ojson{{"binary", c.binary},
                             {"version", c.version},
                             {"config_path", c.config_path},
                             {"config", ConfigStateName(c.config_state)},
                             {"runtimes", runtimes},
                             {"shim_path", c.shim_path},
                             {"hcsshim_version", c.hcsshim_version},
                             {"device_util_beside_shim", c.device_util_beside_shim}};
}

}  // namespace snapshot_json

const char* ServiceStateName(ServiceState state) {
  for (const auto& [name, value] : snapshot_json::kServiceStates) {
    if (value == state) return name;
  }
  return "unknown";
}

const char* ConfigStateName(ConfigState state) {
  for (const auto& [name, value] : snapshot_json::kConfigStates) {
    if (value == state) return name;
  }
  return "absent";
}

bool PciAdapter::Dismounted() const {
  return instance_id.rfind("PCIP\\", 0) == 0;
}

std::string PciAdapter::PciLocationPath() const {
  return FirstPciRootPath(location_paths);
}

}  // namespace tessera::windows
