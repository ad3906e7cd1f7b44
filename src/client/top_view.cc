// `tessera top`'s frame from a /v1/telemetry document. Pure. The document comes from whatever
// answers at --server: every figure is bounded to what it can mean before it is printed (a
// percentage within 0..100, counts and sizes never negative, nothing non-finite), and text is
// cut to printable ASCII, so a broken or hostile answer never prints a wrapped integer
// ("-2147483648%") or a terminal escape.
#include "client/top_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace tessera::client {
namespace {

using nlohmann::json;

constexpr size_t kMaxRows = 1024;  // a frame never holds more GPUs or holders than this
constexpr double kMaxBytes = 1125899906842624.0;  // 1 PiB: no GPU holds more
constexpr double kMaxCount = 1e6;                 // processes on one GPU

// A number of the document within [low, high]; `fallback` when it is absent, not a number or
// not finite.
double Number(const json& object, const char* key, double low, double high, double fallback = 0) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return fallback;
  const double value = it->get<double>();
  if (!std::isfinite(value)) return fallback;
  return std::clamp(value, low, high);
}

bool HasNumber(const json& object, const char* key) {
  if (!object.is_object()) return false;
  auto it = object.find(key);
  return it != object.end() && it->is_number() && std::isfinite(it->get<double>());
}

bool Flag(const json& object, const char* key) {
  if (!object.is_object()) return false;
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

std::string Text(const json& object, const char* key, size_t max = 40) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  std::string text = it->get<std::string>().substr(0, max);
  for (char& c : text)
    if (c < 0x20 || c > 0x7e) c = '?';  // never a terminal escape from the server
  return text;
}

std::string GiB(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", std::clamp(bytes, 0.0, kMaxBytes) / (1u << 30));
  return text;
}

std::string Percent(double value) {
  char text[16];
  std::snprintf(text, sizeof text, "%d%%",
                static_cast<int>(std::lround(std::clamp(value, 0.0, 100.0))));
  return text;
}

struct TenancyRow {
  std::map<std::string, bool> gpus;
  double sm_percent = 0;
  double memory = 0;
  double processes = 0;
};

// What the GPUs' holders add up to, per tenancy and for what no tenancy holds.
struct TenancyTotals {
  std::map<std::string, TenancyRow> tenancies;
  TenancyRow unattributed;
};

const json& ArrayAt(const json& object, const char* key) {
  static const json empty = json::array();
  return object.is_object() && object.contains(key) && object[key].is_array() ? object[key] : empty;
}

std::string TopHeader(const std::string& source, size_t gpu_count, std::time_t now) {
  std::string out;
  char line[512];
  char when[32] = "";
  std::tm local{};
  if (::localtime_r(&now, &local)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &local);
  std::snprintf(line, sizeof line, "tessera top - %s - %zu GPUs - %s\n\n",
                source.substr(0, 200).c_str(), gpu_count, when);
  out += line;
  std::snprintf(line, sizeof line, "%-4s %-13s %-22s %5s %15s %7s %5s %5s  %s\n", "GPU", "PCI",
                "MODEL", "UTIL", "MEMORY GiB", "POWER", "TEMP", "PROCS", "CONTAINERS");
  out += line;
  return out;
}

// Adds the GPU's holders to `totals` and their processes to `processes`; returns who they are
// ("tenancy/pod", cut near 200 characters).
std::string CountHolders(const json& gpu, double* processes, TenancyTotals* totals) {
  std::string names;
  size_t holder_rows = 0;
  for (const auto& holder : ArrayAt(gpu, "holders")) {
    if (++holder_rows > kMaxRows) break;
    *processes += Number(holder, "processes", 0, kMaxCount);
    std::string tenancy = Text(holder, "tenancy");
    std::string who =
        (tenancy.empty() ? "-" : tenancy) + "/" +
        (Text(holder, "pod").empty() ? Text(holder, "container") : Text(holder, "pod"));
    if (names.size() < 200) {
      if (!names.empty()) names += ", ";
      names += who;
    }
    if (tenancy.empty()) continue;
    TenancyRow& row = totals->tenancies[tenancy];
    row.gpus[Text(gpu, "pci_address")] = true;
    row.sm_percent += Number(holder, "sm_percent", 0, 100);
    row.memory += Number(holder, "memory_bytes", 0, kMaxBytes);
    row.processes += Number(holder, "processes", 0, kMaxCount);
  }
  return names;
}

std::string UtilText(const json& gpu) {
  if (Flag(gpu, "lost")) return "LOST";
  if (HasNumber(gpu, "gpu_percent")) return Percent(Number(gpu, "gpu_percent", 0, 100));
  if (Flag(gpu, "mig")) return "MIG";
  return "-";
}

std::string MigLines(const json& gpu) {
  std::string out;
  char line[512];
  size_t instances = 0;
  for (const auto& instance : gpu["mig_instances"]) {
    if (++instances > kMaxRows) break;
    const std::string sm =
        HasNumber(instance, "sm_percent") ? Percent(Number(instance, "sm_percent", 0, 100)) : "-";
    std::snprintf(line, sizeof line, "       MIG gi %-3.0f %-12s SM %5s %15s\n",
                  Number(instance, "gpu_instance_id", 0, 999),
                  Text(instance, "profile", 12).c_str(), sm.c_str(),
                  (GiB(Number(instance, "memory_used", 0, kMaxBytes)) + "/" +
                   GiB(Number(instance, "memory_total", 0, kMaxBytes)))
                      .c_str());
    out += line;
  }
  return out;
}

// The GPU's line (and one per MIG instance), counting its holders into `totals`.
std::string GpuLines(const json& gpu, TenancyTotals* totals) {
  const json& nobody =
      gpu.is_object() && gpu.contains("unattributed") ? gpu["unattributed"] : json::object();
  double processes = Number(nobody, "processes", 0, kMaxCount);
  const std::string names = CountHolders(gpu, &processes, totals);
  totals->unattributed.sm_percent += Number(nobody, "sm_percent", 0, 100);
  totals->unattributed.memory += Number(nobody, "memory_bytes", 0, kMaxBytes);
  totals->unattributed.processes += Number(nobody, "processes", 0, kMaxCount);
  const std::string util = UtilText(gpu);
  const std::string memory = GiB(Number(gpu, "memory_used", 0, kMaxBytes)) + "/" +
                             GiB(Number(gpu, "memory_total", 0, kMaxBytes));
  char line[512];
  std::snprintf(line, sizeof line, "%-4d %-13s %-22s %5s %15s %5.0f W %3.0f C %5.0f  %s\n",
                static_cast<int>(Number(gpu, "index", 0, 9999)),
                Text(gpu, "pci_address", 13).c_str(), Text(gpu, "model", 22).c_str(), util.c_str(),
                memory.c_str(), Number(gpu, "power_watts", 0, 99999),
                Number(gpu, "temperature_c", 0, 999), std::min(processes, kMaxCount),
                names.substr(0, 200).c_str());
  std::string out = line;
  if (gpu.is_object() && gpu.contains("mig_instances") && gpu["mig_instances"].is_array())
    out += MigLines(gpu);
  return out;
}

std::string TenancyLines(const TenancyTotals& totals) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "\n%-24s %5s %10s %12s %6s\n", "TENANCY", "GPUS", "SM (GPUs)",
                "MEMORY GiB", "PROCS");
  out += line;
  auto tenancy_line = [&](const std::string& name, const TenancyRow& row, bool with_gpus) {
    std::snprintf(line, sizeof line, "%-24s %5s %10.2f %12s %6.0f\n", name.substr(0, 24).c_str(),
                  with_gpus ? std::to_string(row.gpus.size()).c_str() : "", row.sm_percent / 100,
                  GiB(row.memory).c_str(), row.processes);
    out += line;
  };
  for (const auto& [name, row] : totals.tenancies)
    tenancy_line(name, row, true);
  tenancy_line("(unattributed)", totals.unattributed, false);
  return out;
}

}  // namespace

std::string RenderTop(const json& doc, const std::string& source, std::time_t now) {
  const json& gpus = ArrayAt(doc, "gpus");
  std::string out = TopHeader(source, gpus.size(), now);
  TenancyTotals totals;
  size_t rows = 0;
  for (const auto& gpu : gpus) {
    if (++rows > kMaxRows) break;
    out += GpuLines(gpu, &totals);
  }
  out += TenancyLines(totals);
  return out;
}

}  // namespace tessera::client
