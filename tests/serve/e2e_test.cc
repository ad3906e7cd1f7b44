// End to end: a real tessera-serve running real podman containers (runc, CDI devices) on a
// materialized HGX H100 host tree with real character devices; the service is restarted,
// killed with SIGKILL, and its firmware checks pass and fail.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "serve/container_wait.h"
#include "serve/podman_serve_fixture.h"
#include "serve/serve_process.h"
#include "support/podman_harness.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

class ServeE2e : public PodmanServeTest {
 protected:
  ServeE2e() : PodmanServeTest("e2e") {}

  std::string Submit(int gpus, const std::string& script, client::Connection* as = nullptr,
                     const std::string& tenancy = "team-a") {
    json body = {{"image", image_},
                 {"tenancy", tenancy},
                 {"gpus", gpus},
                 {"command", {"/bin/sh", "-c", script}}};
    int status = 0;
    auto answer = CallJson(as ? *as : *admin_, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  json WaitFor(const std::string& id, const std::set<std::string>& states) {
    return WaitForContainerState(*admin_, *serve_, id, states);
  }

  std::map<std::string, json> Gpus() {
    std::map<std::string, json> out;
    int status = 0;
    auto listed = CallJson(*admin_, "GET", "/v1/gpus", "", &status);
    EXPECT_EQ(status, 200) << listed << "\n" << serve_->log();
    for (const auto& gpu : listed["gpus"])
      out[gpu["pci_address"]] = gpu;
    return out;
  }

  // Waits until no GPU is leased (every check done).
  std::map<std::string, json> WaitSettled(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    auto deadline = Clock::now() + timeout;
    std::map<std::string, json> gpus;
    while (Clock::now() < deadline) {
      gpus = Gpus();
      bool settled = true;
      for (const auto& [pci, gpu] : gpus) {
        std::string state = gpu["state"];
        settled = settled && (state == "free" || state == "quarantined" || state == "draining");
      }
      if (settled) return gpus;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "GPUs did not settle";
    return gpus;
  }

  std::string Logs(const std::string& id, client::Connection* as = nullptr, int* status = nullptr) {
    auto response = (as ? as : admin_.get())->Call("GET", "/v1/containers/" + id + "/logs");
    if (status) *status = response ? response->status : 0;
    return response ? response->body : "";
  }
};

// Counts the per-GPU device nodes the container was given.
const char* kCountGpus = "ls /dev/ | grep -cE '^nvidia[0-9]+$'; echo \"tenant $TENANT\"";

TEST_F(ServeE2e, ContainersWithOneTwoAndEightGpusRunToCompletion) {
  StartServe();
  std::string one = Submit(1, kCountGpus);
  std::string two = Submit(2, kCountGpus);
  std::string eight = Submit(8, kCountGpus);
  std::map<std::string, int> want = {{one, 1}, {two, 2}, {eight, 8}};
  for (const auto& [id, count] : want) {
    auto done = WaitFor(id, {"exited", "failed"});
    EXPECT_EQ(done["state"], "exited") << done;
    EXPECT_EQ(done.value("exit_code", -1), 0) << done;
    EXPECT_EQ(done["gpus"].size(), static_cast<size_t>(count));
    std::string logs = Logs(id);
    EXPECT_EQ(logs.substr(0, logs.find('\n')), std::to_string(count)) << logs;
  }
  // The 8-GPU container could only run when the others had given their GPUs back.
  auto gpus = WaitSettled();
  for (const auto& [pci, gpu] : gpus)
    EXPECT_EQ(gpu["state"], "free") << gpu;
  // Exit codes come from podman.
  std::string failing = Submit(0, "echo bye; exit 7");
  auto done = WaitFor(failing, {"exited", "failed"});
  EXPECT_EQ(done.value("exit_code", -1), 7) << done;
  EXPECT_EQ(Logs(failing), "bye\n");
}

TEST_F(ServeE2e, TenancyTokensIsolateRealContainersAndTheirLogs) {
  StartServe();
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/alpha", "{}", &status);
  CallJson(*admin_, "PUT", "/v1/tenancies/beta", "{}", &status);
  auto alpha = serve_->Connect(
      CallJson(*admin_, "POST", "/v1/tenancies/alpha/tokens")["token"].get<std::string>());
  auto beta = serve_->Connect(
      CallJson(*admin_, "POST", "/v1/tenancies/beta/tokens")["token"].get<std::string>());
  std::string id = Submit(1, "echo secret-of-alpha", alpha.get(), "alpha");
  WaitFor(id, {"exited"});
  EXPECT_EQ(Logs(id, alpha.get(), &status), "secret-of-alpha\n");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(Logs(id, beta.get(), &status).find("secret"), std::string::npos);
  EXPECT_EQ(status, 404);
  CallJson(*beta, "DELETE", "/v1/containers/" + id, "", &status);
  EXPECT_EQ(status, 404);
  // beta sees the GPU grid, but not who holds what.
  for (const auto& gpu : CallJson(*beta, "GET", "/v1/gpus")["gpus"]) {
    EXPECT_EQ(gpu["tenancy"], "");
    EXPECT_FALSE(gpu.contains("firmware_baseline"));
  }
}

TEST_F(ServeE2e, LeasesGoThroughTheStateMachineAndAChangedRomIsQuarantined) {
  StartServe();
  std::string id = Submit(1, "sleep 1");
  auto running = WaitFor(id, {"running"});
  ASSERT_EQ(running["gpus"].size(), 1u);
  const std::string pci = running["gpus"][0];
  EXPECT_EQ(Gpus()[pci]["state"], "active");
  auto leases = json::parse(ReadText(serve_->lease_file()));
  EXPECT_EQ(leases["gpus"][pci]["state"], "active");
  EXPECT_EQ(leases["gpus"][pci]["tenancy"], "team-a");
  WaitFor(id, {"exited"});
  auto gpus = WaitSettled();
  EXPECT_EQ(gpus[pci]["state"], "free");
  std::string log = serve_->log();
  size_t at = 0;
  for (const char* step : {"free -> reserved", "reserved -> active", "active -> releasing",
                           "releasing -> checking", "checking -> free"}) {
    size_t found = log.find("GPU " + pci + ": " + step, at);
    EXPECT_NE(found, std::string::npos) << step << "\n" << log;
    if (found != std::string::npos) at = found;
  }

  // Someone rewrote the option ROMs while the service ran: the GPUs of the next lease fail
  // their check and are quarantined with the reason; GPUs not leased are not touched.
  for (const auto& gpu : gpus_)
    WriteText(host_.root() + "/sys/bus/pci/devices/" + gpu + "/rom", "ROM-v2-tampered");
  std::string second = Submit(2, "true");
  auto done = WaitFor(second, {"exited"});
  gpus = WaitSettled();
  std::set<std::string> held(done["gpus"].begin(), done["gpus"].end());
  ASSERT_EQ(held.size(), 2u);
  for (const auto& [address, gpu] : gpus) {
    if (held.count(address)) {
      EXPECT_EQ(gpu["state"], "quarantined") << gpu;
      EXPECT_NE(gpu["reason"].get<std::string>().find("option ROM changed"), std::string::npos)
          << gpu;
    } else {
      EXPECT_EQ(gpu["state"], "free") << gpu;
    }
  }
  leases = json::parse(ReadText(serve_->lease_file()));
  EXPECT_EQ(leases["gpus"][*held.begin()]["state"], "quarantined");
  // Quarantined GPUs are never placed: an 8-GPU request waits.
  std::string big = Submit(8, "true");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/containers/" + big)["state"], "pending");
  // The operator accepts the new firmware: release makes it the baseline.
  for (const auto& address : held) {
    int status = 0;
    auto gpu = CallJson(*admin_, "POST", "/v1/gpus/" + address + "/release", "", &status);
    EXPECT_EQ(status, 200) << gpu;
  }
  EXPECT_EQ(WaitFor(big, {"exited"}).value("exit_code", -1), 0);
}

TEST_F(ServeE2e, ConfiguredCheckCommandsFailAndTimeOutIntoQuarantine) {
  std::string script = dir_.path() + "/check.sh";
  WriteText(script, "#!/bin/sh\nif [ \"$1\" = \"" + gpus_[0] +
                        "\" ]; then echo 'ECC errors: 12'; exit 3; fi\nexit 0\n");
  ::chmod(script.c_str(), 0755);
  std::string slow = dir_.path() + "/slow.sh";
  WriteText(slow, "#!/bin/sh\nsleep 30\n");
  ::chmod(slow.c_str(), 0755);
  StartServe({"--firmware-check-command", script, "--firmware-check", gpus_[1] + "=" + slow,
              "--firmware-check-timeout-ms", "500"});
  std::string id = Submit(8, "true");
  WaitFor(id, {"exited"});
  auto gpus = WaitSettled();
  EXPECT_EQ(gpus[gpus_[0]]["state"], "quarantined");
  EXPECT_NE(gpus[gpus_[0]]["reason"].get<std::string>().find("status 3: ECC errors: 12"),
            std::string::npos)
      << gpus[gpus_[0]];
  EXPECT_EQ(gpus[gpus_[1]]["state"], "quarantined");
  EXPECT_NE(gpus[gpus_[1]]["reason"].get<std::string>().find("timed out"), std::string::npos)
      << gpus[gpus_[1]];
  for (size_t i = 2; i < gpus_.size(); ++i)
    EXPECT_EQ(gpus[gpus_[i]]["state"], "free") << gpus[gpus_[i]];
}

TEST_F(ServeE2e, RestartMidRunAdoptsRunningContainersAndFailsVanishedOnes) {
  StartServe();
  std::string survivor = Submit(1, "sleep 4; echo finished");
  std::string victim = Submit(1, "sleep 60");
  WaitFor(survivor, {"running"});
  auto victim_running = WaitFor(victim, {"running"});
  const std::string victim_gpu = victim_running["gpus"][0];
  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  // While the service is down, one container disappears.
  RunArgv({"podman", "rm", "-f", "-t", "0", "tessera-" + victim});
  Restart();
  auto done = WaitFor(survivor, {"exited", "failed"});
  EXPECT_EQ(done["state"], "exited") << done;
  EXPECT_EQ(done.value("exit_code", -1), 0);
  EXPECT_EQ(Logs(survivor), "finished\n");
  auto vanished = WaitFor(victim, {"failed", "exited"});
  EXPECT_EQ(vanished["state"], "failed");
  EXPECT_NE(vanished["reason"].get<std::string>().find("vanished"), std::string::npos) << vanished;
  auto gpus = WaitSettled();
  for (const auto& [pci, gpu] : gpus)
    EXPECT_EQ(gpu["state"], "free") << gpu;
  // The vanished container's GPU went through the check before it was free again.
  std::string log = serve_->log();
  EXPECT_NE(log.find("GPU " + victim_gpu + ": releasing -> checking"), std::string::npos);
}

TEST_F(ServeE2e, KillDashNineWithSubmissionsInFlightLosesNoAcknowledgedOne) {
  StartServe();
  std::mutex mutex;
  std::vector<std::string> acknowledged;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      auto connection = serve_->Connect(serve_->admin_token());
      for (int i = 0; !stop && i < 400; ++i) {
        json body = {{"image", image_},
                     {"tenancy", "load"},
                     {"gpus", 1 + (i + t) % 2},
                     {"command", {"true"}}};
        auto response = connection->Call("POST", "/v1/containers", body.dump());
        if (!response) break;  // the service is gone
        if (response->status == 202) {
          std::lock_guard lock(mutex);
          acknowledged.push_back(json::parse(response->body)["id"]);
        }
      }
    });
  }
  // Killed once a number of submissions were acknowledged, while the clients still send more.
  EXPECT_TRUE(WaitUntil([&] {
    std::lock_guard lock(mutex);
    return acknowledged.size() > 10;
  }));
  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  stop = true;
  for (auto& client : clients)
    client.join();
  ASSERT_GT(acknowledged.size(), 10u);
  Restart();
  for (const auto& id : acknowledged) {
    int status = 0;
    CallJson(*admin_, "GET", "/v1/containers/" + id, "", &status);
    EXPECT_EQ(status, 200) << id << " was acknowledged but is gone";
  }
  // No GPU is ever in two leases: sample while the backlog runs.
  for (int round = 0; round < 20; ++round) {
    std::map<std::string, std::string> holder;
    for (const auto& c : CallJson(
             *admin_, "GET", "/v1/containers?state=pending,running&limit=1000")["containers"]) {
      for (const auto& gpu : c["gpus"]) {
        auto [it, inserted] = holder.emplace(gpu.get<std::string>(), c["id"].get<std::string>());
        EXPECT_TRUE(inserted) << "GPU " << gpu << " held by " << it->second << " and " << c["id"];
      }
    }
    for (const auto& [pci, gpu] : Gpus()) {
      if (gpu["container_id"] != "") {
        auto it = holder.find(pci);
        if (it != holder.end()) EXPECT_EQ(it->second, gpu["container_id"]) << pci;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace
}  // namespace tessera::testing
