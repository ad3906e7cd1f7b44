// Measured metering through a real tessera-serve (podman, SQLite) with the stand-in NVML seeing a
// real container's real processes: SM-seconds and energy survive kill -9 of the service and equal
// exactly what the stand-in served after the first pass (none counted twice, none lost while the
// service was down: NVML keeps the samples and the energy counter); memory is charged for the
// time the processes held it, the seconds the service was down included (within one interval);
// the per-container figures on /metrics carry the container's labels and NVML's device name; the
// usage record of the ended container, the usage API and the per-tenancy series return the same
// numbers.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "serve/container_wait.h"
#include "serve/serve_process.h"
#include "support/fake_nvml_state.h"
#include "support/podman_harness.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

// The GPU's telemetry cursor as the store holds it (read from the SQLite file).
struct StoredCursor {
  uint64_t sample_us = 0, energy_mj = 0;
  int64_t sampled_ms = 0;
};
StoredCursor ReadCursor(const std::string& db_path, const std::string& gpu) {
  StoredCursor out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(
          db, "SELECT sample_us, energy_mj, sampled_ms FROM telemetry_cursors WHERE gpu = ?1", -1,
          &stmt, nullptr) == SQLITE_OK) {
    sqlite3_bind_text(stmt, 1, gpu.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      out.sample_us = static_cast<uint64_t>(sqlite3_column_int64(stmt, 0));
      out.energy_mj = static_cast<uint64_t>(sqlite3_column_int64(stmt, 1));
      out.sampled_ms = sqlite3_column_int64(stmt, 2);
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

// A measured figure of a container (its "measured" is null until telemetry measured it).
double Measured(const json& container, const char* key) {
  const json& measured = container.is_object() ? container.value("measured", json()) : json();
  return measured.is_object() ? measured.value(key, 0.0) : 0.0;
}

TEST(TelemetryEndToEnd, MeteringAcrossKill9EqualsWhatTheStandInServed) {
  const Podman& podman = Podman::Get();
  ASSERT_TRUE(podman.ready()) << podman.setup_error();
  TempHost host("hgx-h100-dgx");
  TempDir dir;
  const std::string kind = UniqueTestKind("gpu");
  const std::string instance =
      "tele-" + std::to_string(::getpid()) + "-" + kind.substr(kind.rfind('-') + 1);
  struct Cleanup {
    std::string instance, kind;
    ~Cleanup() {
      RemoveInstanceContainers(instance);
      RemoveSpecsOfKind(kind);
    }
  } cleanup{instance, kind};
  const auto gpus = WriteGpuRoms(host.root());
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  // NVML's name for the GPUs (the modelName label) and their power limit (the energy bound).
  const std::string nvml_device = " name=NVIDIA_H100_80GB_HBM3 power_limit_mw=700000";
  std::string devices;
  for (const auto& gpu : gpus)
    devices += "device " + gpu + nvml_device +
               " util=0 memory_used=0 memory_total=85899345920 energy_mj=1000\n";
  scenario.Write(devices);
  const std::vector<std::string> flags = {"--root",
                                          host.root(),
                                          "--cdi-kind",
                                          kind,
                                          "--instance",
                                          instance,
                                          "--stop-grace-s",
                                          "1",
                                          "--nvml",
                                          FAKE_NVML,
                                          "--telemetry-interval",
                                          "300ms",
                                          "--telemetry-proc-dir",
                                          "/proc"};
  auto serve = std::make_unique<ServeProcess>(dir.path(), flags);
  std::string log;
  ASSERT_TRUE(serve->Start(&log)) << log;
  auto admin = serve->Connect(serve->admin_token());

  int status = 0;
  json body = {{"image", podman.image()},
               {"tenancy", "metered"},
               {"gpus", 1},
               {"command", {"/bin/sh", "-c", "sleep 300 & exec sleep 301"}}};
  auto submitted = CallJson(*admin, "POST", "/v1/containers", body.dump(), &status);
  ASSERT_EQ(status, 202) << submitted;
  const std::string id = submitted["id"];
  auto running = WaitForContainerState(*admin, *serve, id, {"running"});
  ASSERT_EQ(running["gpus"].size(), 1u);
  const std::string gpu = running["gpus"][0];
  std::vector<std::string> pids;
  for (uint32_t pid : ContainerHostPids(podman, "tessera-" + id, 2))
    pids.push_back(std::to_string(pid));
  ASSERT_EQ(pids.size(), 2u);
  const std::string processes = "process " + gpu + " pid=" + pids[0] +
                                " memory=2147483648\nprocess " + gpu + " pid=" + pids[1] +
                                " memory=1073741824\n";
  // Phase 1: one sample and a still energy counter (the baseline for what follows).
  const uint64_t t0 = NowMicros();
  scenario.Write(devices + processes + "sample " + gpu + " pid=" + pids[0] +
                 " ts=" + std::to_string(t0) + " sm=50\n");
  json container;
  ASSERT_TRUE(WaitUntil([&] {
    container = CallJson(*admin, "GET", "/v1/containers/" + id);
    return Measured(container, "memory_gib_seconds") > 0 &&
           ReadCursor(serve->data_dir() + "/tessera.db", gpu).sample_us == t0;
  })) << container
      << serve->log();
  // The t0 sample covered the time since the previous pass (the service has been passing over
  // the GPU since it started); what comes after it is counted from here.
  container = CallJson(*admin, "GET", "/v1/containers/" + id);
  const double at_t0 = Measured(container, "sm_seconds");
  EXPECT_GT(at_t0, 0.0);
  EXPECT_LE(at_t0, 0.5 * 0.6 + 1e-9);  // at most one pass gap (two intervals) at 50 %

  // /metrics: the container's processes on its GPU under dcgm-exporter's names, its labels.
  std::string metrics = CallJson(*admin, "GET", "/metrics").get<std::string>();
  std::string bus_id = "0000" + gpu;  // as NVML prints it: 8-digit domain, upper case
  for (char& c : bus_id)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_TRUE(std::regex_search(
      metrics, std::regex("DCGM_FI_DEV_FB_USED\\{[^}]*pci_bus_id=\"" + bus_id +
                          "\"[^}]*container=\"" + id + "\",tenancy=\"metered\"\\} 3072")))
      << metrics;
  EXPECT_NE(metrics.find("tessera_gpu_unattributed_processes{gpu="), std::string::npos);
  EXPECT_TRUE(
      std::regex_search(metrics, std::regex("DCGM_FI_DEV_FB_USED\\{[^}]*pci_bus_id=\"" + bus_id +
                                            "\",[^}]*modelName=\"NVIDIA H100 80GB HBM3\"")))
      << metrics;
  EXPECT_NE(metrics.find("tessera_telemetry_readings_clamped_total{"), std::string::npos);
  // `tessera top` on serve (with the admin token): the GPU, its holder, the tenancy's line.
  int top_status = -1;
  const std::string top = RunCommand(
      TesseraBinary() + " top --once --server http://127.0.0.1:" + std::to_string(serve->port()) +
          " --token-file " + serve->data_dir() + "/admin.token 2>&1",
      &top_status);
  EXPECT_EQ(top_status, 0) << top;
  EXPECT_NE(top.find(gpu), std::string::npos) << top;
  EXPECT_NE(top.find("metered/" + id), std::string::npos) << top;
  EXPECT_NE(top.find("\nmetered "), std::string::npos) << top;

  // Phase 2: both processes busy (the first at 50 %, the second at 30 %) with a sample every
  // 100 ms up to t_end, and the energy counter running at 200 W. The service is killed with -9
  // halfway and started again.
  const uint64_t period = 100'000;
  const uint64_t t_end = t0 + 60 * period;
  const uint64_t t1 = NowMicros();
  std::string busy;
  for (int i = 0; i < 2; ++i)
    busy += "busy " + gpu + " pid=" + pids[i] + " sm=" + std::to_string(i == 0 ? 50 : 30) +
            " period_ms=100 from_us=" + std::to_string(t0) + " to_us=" + std::to_string(t_end) +
            "\n";
  std::string running_devices;
  for (const auto& g : gpus)
    running_devices += "device " + g + nvml_device + " util=" + (g == gpu ? "80" : "0") +
                       " memory_used=3221225472 memory_total=85899345920 energy_mj=1000" +
                       (g == gpu ? " energy_rate_mw=200000 energy_from_us=" + std::to_string(t1) +
                                       " util_period_ms=100 util_from_us=" + std::to_string(t0)
                                 : std::string()) +
                       "\n";
  scenario.Write(running_devices + processes + busy);
  ASSERT_TRUE(WaitUntil([&] {
    container = CallJson(*admin, "GET", "/v1/containers/" + id);
    return Measured(container, "sm_seconds") > 0.4;
  })) << container;
  EXPECT_EQ(serve->Kill(SIGKILL), 128 + SIGKILL);
  // Down for at least three seconds: ten intervals nobody passes over.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  serve = std::make_unique<ServeProcess>(dir.path(), flags);
  ASSERT_TRUE(serve->Start(&log)) << log;
  admin = serve->Connect(serve->admin_token());
  ASSERT_TRUE(WaitUntil([&] {
    return ReadCursor(serve->data_dir() + "/tessera.db", gpu).sample_us == t_end;
  })) << serve->log();
  // Every sample after t0 counted once: 60 periods of 0.1 s at 50 % + 30 %.
  container = CallJson(*admin, "GET", "/v1/containers/" + id);
  const double sm_seconds = Measured(container, "sm_seconds");
  EXPECT_NEAR(sm_seconds - at_t0, 60 * 0.1 * (0.5 + 0.3), 1e-9) << container;
  // Which is also what the stand-in says it served: each distinct sample once.
  std::set<std::string> served;
  std::istringstream lines(scenario.Served());
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("sample ", 0) == 0) served.insert(line);
  double from_served = 0;
  for (const auto& line : served) {
    std::istringstream fields(line);
    std::string word, pci, pid;
    uint64_t ts = 0;
    int sm = 0;
    fields >> word >> pci >> pid >> ts >> sm;
    if (ts > t0) from_served += 0.1 * sm / 100.0;
  }
  EXPECT_NEAR(sm_seconds - at_t0, from_served, 1e-9);
  // Memory: 3 GiB held since the processes were listed (t0), the time down included. A pass after
  // `since` has been counted when the container is read; the first pass after t0 charged from the
  // pass before it (one interval, 1 s allowed under load).
  const int64_t since = static_cast<int64_t>(NowMicros() / 1000);
  ASSERT_TRUE(WaitUntil([&] {
    return ReadCursor(serve->data_dir() + "/tessera.db", gpu).sampled_ms > since;
  })) << serve->log();
  container = CallJson(*admin, "GET", "/v1/containers/" + id);
  const int64_t read_at = static_cast<int64_t>(NowMicros() / 1000);
  const double held_from_t0 = static_cast<double>(static_cast<int64_t>(t0 / 1000));
  const double memory = Measured(container, "memory_gib_seconds");
  EXPECT_GE(memory, 3 * (since - held_from_t0) / 1000.0 - 1e-6) << container;
  EXPECT_LE(memory, 3 * (read_at - held_from_t0) / 1000.0 + 3 * 1.0) << container;
  // Energy: exactly the counter's growth since the baseline pass (it stood at 1000 mJ then), all
  // of it this container's: it holds the GPU whole and runs its only processes.
  const StoredCursor cursor = ReadCursor(serve->data_dir() + "/tessera.db", gpu);
  EXPECT_GT(cursor.energy_mj, 1000u);
  EXPECT_NEAR(Measured(container, "energy_joules"), (cursor.energy_mj - 1000) / 1000.0, 1e-6)
      << container;

  // The container ends: its usage record carries the measured figures, as do the usage API, its
  // series in the per-container list, and the per-tenancy counters.
  CallJson(*admin, "DELETE", "/v1/containers/" + id, "", &status);
  auto ended = WaitForContainerState(*admin, *serve, id, {"exited", "failed"});
  const json measured = ended["measured"];
  auto usage = CallJson(*admin, "GET", "/v1/tenancies/metered/usage");
  ASSERT_EQ(usage["containers"].size(), 1u) << usage;
  EXPECT_NEAR(usage["containers"][0].value("sm_seconds", 0.0), measured.value("sm_seconds", -1.0),
              1e-9);
  EXPECT_NEAR(usage.value("energy_joules", 0.0), measured.value("energy_joules", -1.0), 1e-9);
  EXPECT_NEAR(usage.value("memory_gib_seconds", 0.0), measured.value("memory_gib_seconds", -1.0),
              1e-9);
  EXPECT_GE(measured.value("sm_seconds", 0.0), sm_seconds);
  metrics = CallJson(*admin, "GET", "/metrics").get<std::string>();
  std::smatch counter;
  ASSERT_TRUE(std::regex_search(
      metrics, counter,
      std::regex("tessera_tenancy_sm_seconds_total\\{tenancy=\"metered\",gpu_model=\"[^\"]*\","
                 "mode=\"gpu\"\\} ([0-9.]+)")))
      << metrics;
  EXPECT_NEAR(std::stod(counter[1]), measured.value("sm_seconds", 0.0), 1e-3);
  // A restart loads the record as it was written.
  serve->Kill(SIGTERM);
  serve = std::make_unique<ServeProcess>(dir.path(), flags);
  ASSERT_TRUE(serve->Start(&log)) << log;
  admin = serve->Connect(serve->admin_token());
  usage = CallJson(*admin, "GET", "/v1/tenancies/metered/usage");
  EXPECT_NEAR(usage.value("sm_seconds", 0.0), measured.value("sm_seconds", -1.0), 1e-9) << usage;
}

}  // namespace
}  // namespace tessera::testing
