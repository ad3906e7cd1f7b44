// `tessera top`: a terminal view of what each GPU and each tenancy uses, for operators on a node
// without a browser. Reads /v1/telemetry of `tessera serve` (embedded mode, with a token) or of
// a node agent (tessera-lease-sync --metrics-listen), and redraws every --interval seconds.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "client/client.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

constexpr size_t kMaxRows = 1024;  // a frame never holds more GPUs or holders than this

struct TopFlags {
  std::string server;
  std::string token_file;
  double interval_s = 2;
  bool once = false;
};

double Number(const json& object, const char* key) {
  if (!object.is_object()) return 0;
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : 0;
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
  std::snprintf(text, sizeof text, "%.1f", bytes / (1024.0 * 1024 * 1024));
  return text;
}

struct TenancyRow {
  std::map<std::string, bool> gpus;
  double sm_percent = 0;
  double memory = 0;
  double processes = 0;
};

// One frame: a line per GPU (and per MIG instance), then one per tenancy and the unattributed.
std::string RenderTop(const json& doc, const std::string& source) {
  std::string out;
  char line[512];
  const json& gpus = doc.is_object() && doc.contains("gpus") && doc["gpus"].is_array()
                         ? doc["gpus"]
                         : json::array();
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  std::snprintf(line, sizeof line, "tessera top - %s - %zu GPUs - %s\n\n", source.c_str(),
                gpus.size(), when);
  out += line;
  std::snprintf(line, sizeof line, "%-4s %-13s %-22s %5s %15s %7s %5s %5s  %s\n", "GPU", "PCI",
                "MODEL", "UTIL", "MEMORY GiB", "POWER", "TEMP", "PROCS", "CONTAINERS");
  out += line;
  std::map<std::string, TenancyRow> tenancies;
  TenancyRow unattributed;
  size_t rows = 0;
  for (const auto& gpu : gpus) {
    if (++rows > kMaxRows) break;
    const json& holders =
        gpu.contains("holders") && gpu["holders"].is_array() ? gpu["holders"] : json::array();
    const json& nobody = gpu.contains("unattributed") ? gpu["unattributed"] : json::object();
    double processes = Number(nobody, "processes");
    std::string names;
    for (const auto& holder : holders) {
      processes += Number(holder, "processes");
      std::string tenancy = Text(holder, "tenancy");
      std::string who =
          (tenancy.empty() ? "-" : tenancy) + "/" +
          (Text(holder, "pod").empty() ? Text(holder, "container") : Text(holder, "pod"));
      if (!names.empty()) names += ", ";
      names += who;
      if (tenancy.empty()) continue;
      TenancyRow& row = tenancies[tenancy];
      row.gpus[Text(gpu, "pci_address")] = true;
      row.sm_percent += Number(holder, "sm_percent");
      row.memory += Number(holder, "memory_bytes");
      row.processes += Number(holder, "processes");
    }
    unattributed.sm_percent += Number(nobody, "sm_percent");
    unattributed.memory += Number(nobody, "memory_bytes");
    unattributed.processes += Number(nobody, "processes");
    std::string util = "-";
    if (gpu.value("lost", false)) {
      util = "LOST";
    } else if (gpu.contains("gpu_percent") && gpu["gpu_percent"].is_number()) {
      util = std::to_string(static_cast<int>(Number(gpu, "gpu_percent"))) + "%";
    } else if (gpu.value("mig", false)) {
      util = "MIG";
    }
    const std::string memory =
        GiB(Number(gpu, "memory_used")) + "/" + GiB(Number(gpu, "memory_total"));
    std::snprintf(line, sizeof line, "%-4d %-13s %-22s %5s %15s %5.0f W %3.0f C %5.0f  %s\n",
                  static_cast<int>(Number(gpu, "index")), Text(gpu, "pci_address", 13).c_str(),
                  Text(gpu, "model", 22).c_str(), util.c_str(), memory.c_str(),
                  Number(gpu, "power_watts"), Number(gpu, "temperature_c"), processes,
                  names.substr(0, 200).c_str());
    out += line;
    if (gpu.contains("mig_instances") && gpu["mig_instances"].is_array()) {
      for (const auto& instance : gpu["mig_instances"]) {
        std::string sm =
            instance.contains("sm_percent") && instance["sm_percent"].is_number()
                ? std::to_string(static_cast<int>(Number(instance, "sm_percent"))) + "%"
                : "-";
        std::snprintf(
            line, sizeof line, "       MIG gi %-3.0f %-12s SM %5s %15s\n",
            Number(instance, "gpu_instance_id"), Text(instance, "profile", 12).c_str(), sm.c_str(),
            (GiB(Number(instance, "memory_used")) + "/" + GiB(Number(instance, "memory_total")))
                .c_str());
        out += line;
      }
    }
  }
  std::snprintf(line, sizeof line, "\n%-24s %5s %10s %12s %6s\n", "TENANCY", "GPUS", "SM (GPUs)",
                "MEMORY GiB", "PROCS");
  out += line;
  auto tenancy_line = [&](const std::string& name, const TenancyRow& row, bool with_gpus) {
    std::snprintf(line, sizeof line, "%-24s %5s %10.2f %12s %6.0f\n", name.substr(0, 24).c_str(),
                  with_gpus ? std::to_string(row.gpus.size()).c_str() : "", row.sm_percent / 100,
                  GiB(row.memory).c_str(), row.processes);
    out += line;
  };
  for (const auto& [name, row] : tenancies)
    tenancy_line(name, row, true);
  tenancy_line("(unattributed)", unattributed, false);
  return out;
}

}  // namespace

void AddTopCommand(CLI::App& app) {
  auto flags = std::make_shared<TopFlags>();
  CLI::App* top = app.add_subcommand(
      "top",
      "What each GPU and each tenancy uses, refreshing: reads /v1/telemetry of tessera serve or "
      "of a node agent (tessera-lease-sync --metrics-listen)");
  top->add_option("--server", flags->server,
                  "tessera serve or a node agent (default $TESSERA_SERVER or "
                  "http://127.0.0.1:8080)");
  top->add_option("--token-file", flags->token_file,
                  "Token for tessera serve (default $TESSERA_TOKEN, $TESSERA_TOKEN_FILE, "
                  "tessera-data/admin.token; a node agent needs none)");
  top->add_option("--interval", flags->interval_s, "Seconds between refreshes")
      ->check(CLI::Range(0.2, 3600.0))
      ->capture_default_str();
  top->add_flag("--once", flags->once, "Print one frame and exit (no screen control codes)");
  top->callback([flags] {
    const std::string server = ApiServer(flags->server);
    auto endpoint = client::ParseServer(server);
    if (!endpoint) Fail(endpoint.error());
    auto token = ApiToken(flags->token_file);  // a node agent's endpoint needs none
    client::Connection connection(*endpoint, token ? *token : "");
    for (;;) {
      auto response = connection.Call("GET", "/v1/telemetry");
      if (!response) Fail(response.error().WithContext(server));
      if (response->status != 200)
        Fail(Unavailable(server + "/v1/telemetry: HTTP " + std::to_string(response->status)));
      auto doc = json::parse(response->body, nullptr, false);
      if (doc.is_discarded() || !doc.is_object())
        Fail(Unavailable(server + "/v1/telemetry: not a JSON object"));
      std::string frame = RenderTop(doc, server);
      if (flags->once) {
        std::fputs(frame.c_str(), stdout);
        return;
      }
      std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
      std::fputs(frame.c_str(), stdout);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(flags->interval_s));
    }
  });
}

}  // namespace tessera::cli
