// A pass as JSON, for the node endpoint's /v1/telemetry and `tessera top`.
#include <nlohmann/json.hpp>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {

std::string PassToJson(const PassResult& pass, const Directory& directory) {
  using nlohmann::json;
  json gpus = json::array();
  std::map<std::string, json> holders_of;  // by PCI address
  for (const auto& holder : pass.holders) {
    const Holder& who = directory.holders[holder.holder];
    for (const auto& gpu : holder.gpus) {
      holders_of[gpu.pci_address].push_back({{"key", who.key},
                                             {"tenancy", who.tenancy},
                                             {"mode", who.mode},
                                             {"pod", who.pod},
                                             {"namespace", who.namespace_},
                                             {"container", who.container},
                                             {"processes", gpu.processes},
                                             {"memory_bytes", gpu.memory_bytes},
                                             {"sm_percent", gpu.sm_percent}});
    }
  }
  auto optional = [](const auto& value) { return value ? json(*value) : json(nullptr); };
  for (const auto& gpu : pass.gpus) {
    const GpuReading& r = gpu.reading;
    json mig = json::array();
    for (const auto& instance : r.mig_instances)
      mig.push_back({{"gpu_instance_id", instance.gpu_instance_id},
                     {"compute_instance_id", instance.compute_instance_id},
                     {"uuid", instance.uuid},
                     {"profile", instance.profile},
                     {"memory_used", instance.memory_used},
                     {"memory_total", instance.memory_total},
                     {"sm_percent", optional(instance.sm_percent)}});
    auto holders = holders_of.find(r.identity.pci_address);
    gpus.push_back({{"pci_address", r.identity.pci_address},
                    {"uuid", r.identity.uuid},
                    {"model", r.identity.model},
                    {"index", r.identity.index},
                    {"node", r.identity.node},
                    {"lost", r.lost},
                    {"mig", r.mig},
                    {"gpu_percent", r.mig ? json(nullptr) : optional(r.gpu_percent)},
                    {"memory_used", optional(r.memory_used)},
                    {"memory_total", optional(r.memory_total)},
                    {"power_watts", gpu.power_watts},
                    {"temperature_c", optional(r.temperature_c)},
                    {"energy_mj", optional(r.energy_mj)},
                    {"sm_percent", gpu.sm_percent},
                    {"xids", r.xids},
                    {"unattributed",
                     {{"processes", gpu.unattributed_processes},
                      {"memory_bytes", gpu.unattributed_memory},
                      {"sm_percent", gpu.unattributed_sm_percent}}},
                    {"mig_instances", std::move(mig)},
                    {"holders", holders == holders_of.end() ? json::array() : holders->second}});
  }
  return json{{"time_ms", pass.time_ms}, {"gpus", std::move(gpus)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::telemetry
