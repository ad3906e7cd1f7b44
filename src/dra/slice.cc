// The node's ResourceSlice (resource.k8s.io/v1): one pool named after the node, one slice in
// it, one device per GPU that may be handed out now, a faulted GPU's devices with their taint.
#include <time.h>

#include <algorithm>
#include <cstdint>
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
  if (device.mig_slot) {
    attributes["placementStart"] = {{"int", device.mig_slot->start}};
    attributes["placementSize"] = {{"int", device.mig_slot->size}};
  }
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
  // A pool of several slices (counter sets) bounds each slice, not the pool.
  const size_t limit = node.counter_sets.empty() ? kMaxSliceDevices : SIZE_MAX;
  for (const auto& device : node.devices) {
    if (WhyUnavailable(device, state).empty() && names.size() < limit) {
      names.push_back(device.name);
      tainted = tainted || FaultOf(device, state) != nullptr;
    }
  }
  // The API server refuses a slice with taints and more devices than this.
  if (tainted && names.size() > kMaxTaintedSliceDevices && node.counter_sets.empty())
    names.resize(kMaxTaintedSliceDevices);
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

namespace {

json DevicesJson(const NodeDevices& node, const std::vector<std::string>& names,
                 const std::map<std::string, DeviceTaint>& taints) {
  json devices = json::array();
  for (const auto& name : names) {
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
    if (!device->consumes.empty()) {
      json counters = json::object();
      for (const auto& [counter, value] : device->consumes)
        counters[counter] = {{"value", std::to_string(value)}};
      entry["consumesCounters"] =
          json::array({{{"counterSet", device->counter_set}, {"counters", std::move(counters)}}});
    }
    devices.push_back(std::move(entry));
  }
  return devices;
}

// One slice of the pool, holding `content` ("devices" or "sharedCounters") in its spec.
json SliceJson(std::string name, const SliceOptions& options, size_t slice_count, const char* field,
               json content) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", std::move(name)}}},
          {"spec",
           {{"driver", options.driver},
            {"pool",
             {{"name", options.node_name},
              {"generation", options.generation},
              {"resourceSliceCount", slice_count}}},
            {"nodeName", options.node_name},
            {field, std::move(content)}}}};
}

size_t Chunks(size_t items, size_t per_chunk) {
  return std::max<size_t>(1, (items + per_chunk - 1) / per_chunk);
}

}  // namespace

std::string BuildResourceSlice(const NodeDevices& node, const std::vector<std::string>& published,
                               const SliceOptions& options, std::string_view resource_version,
                               const std::map<std::string, DeviceTaint>& taints) {
  json slice = SliceJson(SliceName(options.driver, options.node_name), options, 1, "devices",
                         DevicesJson(node, published, taints));
  if (!resource_version.empty()) {
    slice["metadata"]["resourceVersion"] = std::string(resource_version);
  }
  return slice.dump();
}

std::string PoolSliceName(std::string_view driver, std::string_view node_name, size_t index) {
  std::string name = SliceName(driver, node_name);
  if (index == 0) return name;
  std::string suffix = "-" + std::to_string(index);
  if (name.size() + suffix.size() > 253) name.resize(253 - suffix.size());
  return name + suffix;
}

size_t PoolSliceCount(const NodeDevices& node) {
  if (node.counter_sets.empty()) return 1;
  return Chunks(node.counter_sets.size(), kMaxSliceCounterSets) +
         Chunks(node.devices.size(), kMaxCounterSliceDevices);
}

std::vector<std::string> BuildResourceSlices(const NodeDevices& node,
                                             const std::vector<std::string>& published,
                                             const SliceOptions& options,
                                             const std::map<std::string, DeviceTaint>& taints) {
  if (node.counter_sets.empty()) return {BuildResourceSlice(node, published, options, {}, taints)};
  const size_t count = PoolSliceCount(node);
  const size_t counter_slices = Chunks(node.counter_sets.size(), kMaxSliceCounterSets);
  std::vector<std::string> slices;
  // From 1.35 a slice holds either devices or counter sets: the sets go first, in slices of their
  // own, then the devices (which name sets of other slices of the pool).
  for (size_t i = 0; i < counter_slices; ++i) {
    json sets = json::array();
    for (size_t k = i * kMaxSliceCounterSets;
         k < node.counter_sets.size() && k < (i + 1) * kMaxSliceCounterSets; ++k) {
      json counters = json::object();
      for (const auto& [counter, value] : node.counter_sets[k].counters)
        counters[counter] = {{"value", std::to_string(value)}};
      sets.push_back({{"name", node.counter_sets[k].name}, {"counters", std::move(counters)}});
    }
    slices.push_back(SliceJson(PoolSliceName(options.driver, options.node_name, slices.size()),
                               options, count, "sharedCounters", std::move(sets))
                         .dump());
  }
  for (size_t i = counter_slices; i < count; ++i) {
    size_t first = (i - counter_slices) * kMaxCounterSliceDevices;
    std::vector<std::string> names;
    for (size_t k = first; k < published.size() && k < first + kMaxCounterSliceDevices; ++k)
      names.push_back(published[k]);
    slices.push_back(SliceJson(PoolSliceName(options.driver, options.node_name, i), options, count,
                               "devices", DevicesJson(node, names, taints))
                         .dump());
  }
  return slices;
}

}  // namespace tessera::dra
