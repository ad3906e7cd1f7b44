// The faulted GPUs of a /v1/gpus answer (see gpu_faults.h).
#include "client/gpu_faults.h"

#include <algorithm>
#include <cmath>

namespace tessera::client {
namespace gpu_faults_detail {

using nlohmann::json;

// A string field cut to printable ASCII: never a terminal escape from the server.
std::string Printable(const json& object, const char* key, size_t max) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  std::string text = it->get_ref<const std::string&>().substr(0, max);
  for (char& c : text)
    if (c < 0x20 || c > 0x7e) c = '?';
  return text;
}

// An integer field within [0, high]; 0 when absent, not a number or not finite.
int64_t Whole(const json& object, const char* key, double high) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return 0;
  const double value = it->get<double>();
  if (!std::isfinite(value)) return 0;
  return static_cast<int64_t>(std::clamp(value, 0.0, high));
}

std::string LastFault(const json& health) {
  auto it = health.find("last_fault");
  if (it == health.end() || !it->is_object()) return "";
  const json& fault = *it;
  const int64_t xid = Whole(fault, "xid", 1e9);
  std::string text = xid ? "Xid " + std::to_string(xid) : Printable(fault, "signal", 40);
  const std::string fault_class = Printable(fault, "class", 40);
  const std::string action = Printable(fault, "action", 40);
  if (!fault_class.empty()) text += ", class " + fault_class;
  if (!action.empty()) text += ", action " + action;
  return text;
}

}  // namespace gpu_faults_detail

Result<std::vector<GpuFault>> ListGpuFaults(const nlohmann::json& doc) {
  using gpu_faults_detail::Printable;
  using gpu_faults_detail::Whole;
  if (!doc.is_object() || !doc.contains("gpus") || !doc["gpus"].is_array())
    return InvalidArgument("not a GPU listing: no \"gpus\" array");
  std::vector<GpuFault> faults;
  for (const auto& gpu : doc["gpus"]) {
    if (!gpu.is_object()) continue;
    auto health = gpu.find("health");
    if (health == gpu.end() || !health->is_object()) continue;
    GpuFault fault;
    fault.step = Printable(*health, "step", 40);
    if (fault.step.empty() || fault.step == "healthy") continue;
    fault.id = Printable(gpu, "id", 200);
    fault.model = Printable(gpu, "model", 80);
    fault.reason = Printable(*health, "reason", 400);
    fault.attempts = static_cast<int>(Whole(*health, "attempts", 1e6));
    fault.faulted_ms = Whole(*health, "faulted_ms", 1e15);
    fault.last_fault = gpu_faults_detail::LastFault(*health);
    faults.push_back(std::move(fault));
    if (faults.size() >= kMaxGpuFaults) break;
  }
  return faults;
}

}  // namespace tessera::client
