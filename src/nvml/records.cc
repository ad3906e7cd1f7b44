// NVML's records from the bytes a call left in the caller's buffer: per-process lists, event
// data, PCI bus IDs. Pure.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "nvml/nvml.h"
#include "nvml/nvml_abi.h"

namespace tessera::nvml {

std::vector<ProcessMemory> ProcessRecords(std::string_view bytes, bool mps) {
  std::vector<ProcessMemory> out;
  const size_t count = bytes.size() / sizeof(abi::ProcessInfo);
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    abi::ProcessInfo raw;
    std::memcpy(&raw, bytes.data() + i * sizeof raw, sizeof raw);
    ProcessMemory process;
    process.pid = raw.pid;
    if (raw.used_gpu_memory != abi::kValueNotAvailable) process.used_bytes = raw.used_gpu_memory;
    process.gpu_instance_id = raw.gpu_instance_id;
    process.compute_instance_id = raw.compute_instance_id;
    process.mps = mps;
    out.push_back(process);
  }
  return out;
}

std::vector<ProcessUtilization> UtilizationRecords(std::string_view bytes) {
  std::vector<ProcessUtilization> out;
  const size_t count = bytes.size() / sizeof(abi::ProcessUtilizationSample);
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    abi::ProcessUtilizationSample raw;
    std::memcpy(&raw, bytes.data() + i * sizeof raw, sizeof raw);
    out.push_back(
        {raw.pid, raw.time_stamp, std::min(raw.sm_util, 100u), std::min(raw.mem_util, 100u)});
  }
  return out;
}

std::optional<Event> DecodeEventData(std::string_view bytes) {
  static_assert(sizeof(abi::EventData) == kEventDataBytes);
  if (bytes.size() < sizeof(abi::EventData)) return std::nullopt;
  abi::EventData raw;
  std::memcpy(&raw, bytes.data(), sizeof raw);
  Event event;
  event.gpu = raw.device;
  event.type = raw.event_type;
  event.data = raw.event_data;
  event.gpu_instance_id = raw.gpu_instance_id;
  event.compute_instance_id = raw.compute_instance_id;
  return event;
}

std::string SysfsPciAddress(std::string_view nvml_bus_id) {
  // "DDDDDDDD:BB:DD.F" (NVML) or "DDDD:BB:DD.F" (sysfs); the domain's leading zeros go.
  const size_t colon = nvml_bus_id.find(':');
  if (colon == std::string_view::npos || colon < 4 || colon > 8) return "";
  std::string_view domain = nvml_bus_id.substr(0, colon);
  std::string_view rest = nvml_bus_id.substr(colon);
  if (domain.substr(0, domain.size() - 4).find_first_not_of('0') != std::string_view::npos)
    return "";
  std::string out(domain.substr(domain.size() - 4));
  out.append(rest);
  // ":BB:DD.F" after the domain, every digit hex.
  if (out.size() != 12 || out[4] != ':' || out[7] != ':' || out[10] != '.') return "";
  for (size_t i = 0; i < out.size(); ++i) {
    if (i == 4 || i == 7 || i == 10) continue;
    const auto c = static_cast<unsigned char>(out[i]);
    if (!std::isxdigit(c)) return "";
    out[i] = static_cast<char>(std::tolower(c));
  }
  return out;
}

}  // namespace tessera::nvml
