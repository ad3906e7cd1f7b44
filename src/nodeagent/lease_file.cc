// The node lease file from GpuLeases: what tessera-lease-sync writes and the device plugin and
// the DRA plugin read. Every field comes from the API server, so each is checked or bounded
// here; the file's readers refuse a whole file over one bad key, and a refused file keeps the
// last good leases, so a bad lease must never reach it.
#include "nodeagent/lease_file.h"

#include <algorithm>

#include "backends/kubernetes/node_gpus.h"
#include "backends/kubernetes/objects.h"
#include "common/pci_address.h"
#include "common/untrusted_text.h"
#include "kubernetes/client.h"

namespace tessera::k8s {
namespace {

constexpr size_t kMaxReason = 256;
constexpr size_t kMaxName = 253;  // DNS subdomain names
constexpr size_t kMaxUid = 64;    // UIDs are 36 bytes

// The canonical PCI address `id` stands for: itself, or the GPU whose UUID it is; empty when
// the node knows no such GPU.
std::string AddressOf(const std::string& id, const NodeGpus* known) {
  if (IsPciAddress(id)) return id;
  if (known && !id.empty()) {
    for (const auto& gpu : known->gpus)
      if (gpu.uuid == id) return gpu.pci_address;
  }
  return {};
}

bool IsLeaseState(const std::string& state) {
  return std::find_if(std::begin(kLeaseStates), std::end(kLeaseStates),
                      [&](const char* known) { return state == known; }) != std::end(kLeaseStates);
}

}  // namespace

std::string LeaseFileFor(const Json& list, const std::string& node, const NodeGpus* known,
                         std::vector<std::string>* warnings) {
  auto warn = [&](const std::string& lease, const std::string& problem) {
    if (warnings) warnings->push_back("GpuLease " + Excerpt(lease, kMaxName) + ": " + problem);
  };
  Json gpus = Json::object();
  for (const auto& lease : ArrayField(list, "items")) {
    const Json& spec = ObjectField(lease, "spec");
    if (StringField(spec, "node") != node) continue;
    const std::string name = StringField(ObjectField(lease, "metadata"), "name");
    const Json& status = ObjectField(lease, "status");
    const std::string state = StringField(status, "state", "reserved");
    if (!IsLeaseState(state)) {
      warn(name, "status.state \"" + Excerpt(state, 40) + "\" is not a lease state; left out");
      continue;
    }
    auto ids = spec.find("gpuIds");
    if (ids == spec.end() || !ids->is_array()) {
      // A string is not a one-element list.
      warn(name, "spec.gpuIds is not a list; left out");
      continue;
    }
    // Version 1 of the lease file knows no faulted state (its readers refuse the file over an
    // unknown one): a faulted GPU is written as quarantined, as tessera serve writes its own.
    Json entry = {{"state", state == "faulted" ? "quarantined" : state},
                  {"reason", Excerpt(StringField(status, "reason"), kMaxReason)},
                  {"tenancy", Excerpt(StringField(spec, "tenancy"), kMaxName)}};
    // DRA: the node's plugin prepares these GPUs for the pinned claim only.
    const std::string claim = StringField(ObjectField(status, "claim"), "uid");
    if (!claim.empty()) entry["claim"] = Excerpt(claim, kMaxUid);
    for (size_t i = 0; i < ids->size(); ++i) {
      const Json& id = (*ids)[i];
      std::string address =
          id.is_string() ? AddressOf(id.get_ref<const std::string&>(), known) : std::string();
      if (address.empty()) {
        std::string shown = id.is_string()
                                ? "\"" + Excerpt(id.get_ref<const std::string&>(), 40) + "\""
                                : "a " + std::string(id.type_name());
        warn(name, "spec.gpuIds[" + std::to_string(i) + "] " + shown +
                       " is neither a canonical PCI address nor a GPU this node knows; left out");
        continue;
      }
      gpus[address] = entry;
    }
  }
  return Json{{"version", 1}, {"gpus", gpus}}.dump(2);
}

}  // namespace tessera::k8s
