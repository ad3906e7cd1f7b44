// The node's ResourceSlice (resource.k8s.io/v1): one pool named after the node, one slice in
// it, one device per GPU that may be handed out now, a faulted GPU's devices with their taint.
#include <time.h>

#include <nlohmann/json.hpp>

#include "dra/dra.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

// Version attributes are semantic versions: "580.65.06" -> "580.65.6" (no leading zeros),
// "550.54" -> "550.54.0". Empty when the text has no such shape.
std::string SemanticVersion(std::string_view version) {
  std::vector<std::string> parts(1);
  for (char c : version) {
    if (c == '.') {
      if (parts.back().empty()) return {};
      parts.emplace_back();
    } else if (c >= '0' && c <= '9') {
      parts.back() += c;
    } else {
      return {};
    }
  }
  if (parts.back().empty() || parts.size() > 3) return {};
  while (parts.size() < 3)
    parts.push_back("0");
  std::string out;
  for (auto& part : parts) {
    size_t first = part.find_first_not_of('0');
    if (!out.empty()) out += '.';
    out += first == std::string::npos ? "0" : part.substr(first);
  }
  return out;
}

// A resource.Quantity: "80Gi" for whole GiB, else plain bytes.
std::string MemoryQuantity(uint64_t bytes) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  if (bytes != 0 && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + "Gi";
  return std::to_string(bytes);
}

json Attributes(const NodeDevice& device) {
  json attributes = json::object();
  // Unqualified names get the driver's domain: CEL sees device.attributes["gpu.tessera.dev"].
  attributes["resource.kubernetes.io/pciBusID"] = {{"string", device.pci_address}};
  if (!device.uuid.empty()) attributes["uuid"] = {{"string", device.uuid}};
  if (!device.product_name.empty()) attributes["productName"] = {{"string", device.product_name}};
  attributes["type"] = {{"string", device.type}};
  attributes["numaNode"] = {{"int", device.numa_node}};
  if (auto version = SemanticVersion(device.driver_version); !version.empty()) {
    attributes["driverVersion"] = {{"version", version}};
  }
  if (!device.profile.empty()) attributes["profile"] = {{"string", device.profile}};
  if (!device.parent_uuid.empty()) attributes["parentUUID"] = {{"string", device.parent_uuid}};
  if (device.nvlink_module) {
    attributes["nvlinkModule"] = {{"int", *device.nvlink_module}};
    // One bool per partition so that a selector can say
    // device.attributes["gpu.tessera.dev"].nvlinkPartition3; a device holds at most 32
    // attributes and capacities together.
    for (uint32_t id : device.partition_ids) {
      if (attributes.size() >= 31) break;
      attributes["nvlinkPartition" + std::to_string(id)] = {{"bool", true}};
    }
  }
  return attributes;
}

// metav1.Time: RFC 3339 in UTC, whole seconds.
std::string Rfc3339(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm utc {};
  gmtime_r(&t, &utc);
  char text[32];
  strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

json TaintJson(const DeviceTaint& taint) {
  json out = {{"key", taint.key}, {"effect", TaintEffectName(taint.effect)}};
  if (!taint.value.empty()) out["value"] = taint.value;
  if (taint.time_added_unix_seconds > 0) out["timeAdded"] = Rfc3339(taint.time_added_unix_seconds);
  return out;
}

}  // namespace

std::string SliceName(std::string_view driver, std::string_view node_name) {
  std::string name;
  for (char c : std::string(node_name) + "-" + std::string(driver)) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    name += ok ? c : '-';
  }
  if (name.size() > 253) name.resize(253);
  return name;
}

std::vector<std::string> PublishedDevices(const NodeDevices& node, const DeviceState& state) {
  std::vector<std::string> names;
  bool tainted = false;
  for (const auto& device : node.devices) {
    if (WhyUnavailable(device, state).empty() && names.size() < kMaxSliceDevices) {
      names.push_back(device.name);
      tainted = tainted || FaultOf(device, state) != nullptr;
    }
  }
  // The API server refuses a slice with taints and more devices than this.
  if (tainted && names.size() > kMaxTaintedSliceDevices) names.resize(kMaxTaintedSliceDevices);
  return names;
}

std::map<std::string, DeviceTaint> DeviceTaints(const NodeDevices& node, const DeviceState& state) {
  std::map<std::string, DeviceTaint> taints;
  for (const auto& name : PublishedDevices(node, state)) {
    const NodeDevice* device = node.Find(name);
    const DeviceFault* fault = device ? FaultOf(*device, state) : nullptr;
    if (!fault) continue;
    taints[name] =
        DeviceTaint{kFaultTaintKey, fault->value, fault->effect, fault->since_unix_seconds};
  }
  return taints;
}

std::string BuildResourceSlice(const NodeDevices& node, const std::vector<std::string>& published,
                               const SliceOptions& options, std::string_view resource_version,
                               const std::map<std::string, DeviceTaint>& taints) {
  json devices = json::array();
  for (const auto& name : published) {
    const NodeDevice* device = node.Find(name);
    if (!device) continue;
    json entry = {{"name", device->name}, {"attributes", Attributes(*device)}};
    if (device->memory_bytes) {
      entry["capacity"] = {{"memory", {{"value", MemoryQuantity(*device->memory_bytes)}}}};
    }
    if (device->multiprocessors) {
      entry["capacity"]["multiprocessors"] = {{"value", std::to_string(*device->multiprocessors)}};
    }
    // One capacity per memory slice a MIG device covers, so that claims can see which slices of
    // the parent a device takes.
    for (uint32_t slice : device->memory_slices) {
      entry["capacity"]["memorySlice" + std::to_string(slice)] = {{"value", "1"}};
    }
    if (auto taint = taints.find(name); taint != taints.end()) {
      entry["taints"] = json::array({TaintJson(taint->second)});
    }
    devices.push_back(std::move(entry));
  }
  json metadata = {{"name", SliceName(options.driver, options.node_name)}};
  if (!resource_version.empty()) metadata["resourceVersion"] = std::string(resource_version);
  json slice = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", std::move(metadata)},
                {"spec",
                 {{"driver", options.driver},
                  {"pool",
                   {{"name", options.node_name},
                    {"generation", options.generation},
                    {"resourceSliceCount", 1}}},
                  {"nodeName", options.node_name},
                  {"devices", std::move(devices)}}}};
  return slice.dump();
}

}  // namespace tessera::dra
