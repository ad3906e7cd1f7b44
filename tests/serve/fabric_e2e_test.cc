// Shared NVSwitch mode end to end: a real tessera-serve with --fabric-manager on the HGX fixture,
// real podman containers, and the stand-in fabric manager (libnvfm.so.1 stand-in with its state
// in a file this test reads and changes). Times are compared on one clock: the stand-in logs
// CLOCK_BOOTTIME, and /proc/uptime (inside the containers and in the check command) counts it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "serve/container_wait.h"
#include "serve/podman_serve_fixture.h"
#include "serve/serve_process.h"
#include "support/fake_fabric_manager.h"
#include "support/fake_nvml_state.h"
#include "support/podman_harness.h"
#include "support/wait.h"
#include "topology/topology.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

const std::string kSocket = "unix:/run/nvidia-fabricmanager/socket";

// The fixture's NVML module IDs (tests/fixtures/hosts/hgx-h100-dgx.nvml).
const std::map<std::string, int> kModuleOf = {
    {"0000:18:00.0", 3}, {"0000:2a:00.0", 1}, {"0000:3a:00.0", 4}, {"0000:5d:00.0", 2},
    {"0000:9a:00.0", 7}, {"0000:ab:00.0", 5}, {"0000:ba:00.0", 8}, {"0000:db:00.0", 6}};

// The partition whose modules are exactly those of `gpus`.
int PartitionOf(const json& gpus) {
  std::vector<int> modules;
  for (const auto& gpu : gpus)
    modules.push_back(kModuleOf.at(gpu.get<std::string>()));
  std::sort(modules.begin(), modules.end());
  for (const auto& partition : topology::HgxH100Table().partitions)
    if (partition.modules == modules) return static_cast<int>(partition.id);
  return -1;
}

// "12345.67" seconds -> ms.
long long UptimeMs(const std::string& text) {
  return static_cast<long long>(std::stod(text) * 1000.0);
}

class FabricServe : public PodmanServeTest {
 protected:
  FabricServe() : PodmanServeTest("fabric") {}

  void StartFabricServe(std::vector<std::string> extra = {}) {
    check_log_ = dir_.path() + "/checks.log";
    const std::string script = dir_.path() + "/check.sh";
    std::ofstream(script) << "#!/bin/sh\necho \"$(cut -d' ' -f1 /proc/uptime) $1\" >> "
                          << check_log_ << "\nexit 0\n";
    ::chmod(script.c_str(), 0755);
    std::vector<std::string> args = {
        "--fabric-manager", kSocket,   "--nvfm-library",           FAKE_NVFM,
        "--nvml",           FAKE_NVML, "--firmware-check-command", script};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_NO_FATAL_FAILURE(StartServe(args));
  }

  std::string Submit(int gpus, const std::string& script) {
    json body = {{"image", image_},
                 {"tenancy", "team-a"},
                 {"gpus", gpus},
                 {"command", {"/bin/sh", "-c", script}}};
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  json WaitFor(const std::string& id, const std::set<std::string>& states) {
    return WaitForContainerState(*admin_, *serve_, id, states);
  }

  // Every one of the fixture's eight GPUs is free again (its check done). An answer that is not
  // the list is not settled.
  bool Settled() {
    const json listed = CallJson(*admin_, "GET", "/v1/gpus");
    if (!listed.contains("gpus") || listed["gpus"].size() != kModuleOf.size()) return false;
    for (const auto& gpu : listed["gpus"])
      if (gpu["state"] != "free") return false;
    return true;
  }

  // When the check command ran for `pci` (ms of CLOCK_BOOTTIME), or -1.
  long long CheckedAt(const std::string& pci) {
    std::ifstream in(check_log_);
    std::string uptime, address;
    long long at = -1;
    while (in >> uptime >> address)
      if (address == pci) at = UptimeMs(uptime);
    return at;
  }

  long long CallAt(const std::string& call, int partition) {
    for (const auto& c : fm_.Succeeded(call))
      if (c.argument == std::to_string(partition)) return c.ms;
    return -1;
  }

  // What the container printed: /proc/uptime at its start and at its end.
  std::vector<long long> PrintedTimes(const std::string& id) {
    auto response = admin_->Call("GET", "/v1/containers/" + id + "/logs");
    std::istringstream lines(response ? response->body : "");
    std::vector<long long> out;
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) out.push_back(UptimeMs(line));
    return out;
  }

  FakeFabricManager fm_{kSocket};
  FakeNvmlState nvml_{"hgx-h100-dgx"};
  std::string check_log_;
};

// Prints /proc/uptime when it starts and when it is asked to stop, runs until then.
const char* kUntilStopped =
    "trap 'cut -d\" \" -f1 /proc/uptime; exit 0' TERM; cut -d' ' -f1 /proc/uptime; "
    "sleep 600 & wait";

TEST_F(FabricServe, ActivatesBeforeStartResendsAfterARestartDeactivatesBeforeTheCheck) {
  StartFabricServe();
  const std::string id = Submit(2, kUntilStopped);
  auto running = WaitFor(id, {"running"});
  ASSERT_EQ(running["state"], "running") << running;
  const int partition = PartitionOf(running["gpus"]);
  ASSERT_GE(partition, 0) << "not a whole partition: " << running["gpus"];
  EXPECT_EQ(fm_.Active(), (std::vector<int>{partition}));

  // The fabric manager restarts (FABRIC_MODE_RESTART=1) under the running container.
  fm_.Restart();
  const long long restarted = std::stoll(fm_.Get("restart_at"));
  ASSERT_TRUE(WaitUntil([&] { return fm_.Get("mode") == "shared"; }))
      << "the active list never came\n"
      << serve_->log();
  EXPECT_EQ(fm_.Active(), (std::vector<int>{partition}));
  auto resent = fm_.Succeeded("fmSetActivatedFabricPartitions");
  ASSERT_EQ(resent.size(), 1u);
  EXPECT_EQ(resent[0].argument, "[" + std::to_string(partition) + "]");
  EXPECT_LE(resent[0].ms - restarted, 10000) << "the active list came too late";
  ASSERT_TRUE(WaitUntil([&] {
    auto metrics = admin_->Call("GET", "/metrics");
    return metrics &&
           metrics->body.find("tessera_fabric_manager_restarts_total 1\n") != std::string::npos;
  }));
  EXPECT_NE(serve_->log().find("fabric manager restarted"), std::string::npos);

  int status = 0;
  CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
  EXPECT_EQ(status, 202);
  WaitFor(id, {"exited", "failed"});
  ASSERT_TRUE(WaitUntil([&] { return Settled(); })) << serve_->log();
  EXPECT_TRUE(fm_.Active().empty());

  // activate -> start; stop -> deactivate -> check.
  auto printed = PrintedTimes(id);
  ASSERT_EQ(printed.size(), 2u);
  const long long activated = CallAt("fmActivateFabricPartition", partition);
  const long long deactivated = CallAt("fmDeactivateFabricPartition", partition);
  ASSERT_GT(activated, 0);
  ASSERT_GT(deactivated, 0);
  EXPECT_LE(activated, printed[0] + 10) << "activated after the container started";
  EXPECT_GE(deactivated, printed[1]) << "deactivated before the container stopped";
  for (const auto& gpu : running["gpus"]) {
    long long checked = CheckedAt(gpu);
    EXPECT_GE(checked + 10, deactivated) << gpu << " was checked before the deactivation\n"
                                         << ReadText(check_log_) << serve_->log();
  }
}

TEST_F(FabricServe, ARefusedActivationIsTheContainersReasonAndItsGpusGoBack) {
  StartFabricServe();
  fm_.Set("fail_activate", "-10");
  const std::string id = Submit(2, "echo never");
  auto failed = WaitFor(id, {"failed", "exited"});
  EXPECT_EQ(failed["state"], "failed");
  const std::string reason = failed.value("reason", "");
  EXPECT_NE(reason.find("FM_ST_NVLINK_ERROR (-10): NVLink training failed for the partition's "
                        "GPUs"),
            std::string::npos)
      << reason;
  ASSERT_TRUE(WaitUntil([&] { return Settled(); })) << serve_->log();
  EXPECT_TRUE(fm_.Active().empty());
  for (const auto& gpu : failed["gpus"])
    EXPECT_GT(CheckedAt(gpu), 0) << gpu << " did not go through its check";
  // Nothing was started.
  auto listed = RunArgv({"podman", "ps", "-aq", "--filter", "label=tessera.instance=" + instance_});
  EXPECT_EQ(listed.output, "");
}

TEST_F(FabricServe, AfterAKillTheRestartedServiceKeepsWhatRunsAndDeactivatesTheRest) {
  StartFabricServe();
  const std::string keeper = Submit(2, "sleep 600");
  const std::string ender = Submit(1, kUntilStopped);
  auto kept = WaitFor(keeper, {"running"});
  auto ended = WaitFor(ender, {"running"});
  const int kept_partition = PartitionOf(kept["gpus"]);
  const int ended_partition = PartitionOf(ended["gpus"]);
  ASSERT_GE(kept_partition, 0);
  ASSERT_GE(ended_partition, 0);
  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  // While the service is down: one container ends, and someone activates a partition by hand.
  RunArgv({"podman", "stop", "-t", "5", "tessera-" + ender});
  std::set<int> busy;
  for (const auto& gpu : kept["gpus"])
    busy.insert(kModuleOf.at(gpu));
  for (const auto& gpu : ended["gpus"])
    busy.insert(kModuleOf.at(gpu));
  int stray = -1;
  for (const auto& partition : topology::HgxH100Table().partitions) {
    if (std::none_of(partition.modules.begin(), partition.modules.end(),
                     [&](int m) { return busy.count(m) > 0; })) {
      stray = static_cast<int>(partition.id);
      break;
    }
  }
  ASSERT_GE(stray, 0);
  std::vector<int> active = {kept_partition, ended_partition, stray};
  std::sort(active.begin(), active.end());
  std::string list;
  for (int id : active)
    list += std::to_string(id) + " ";
  fm_.Set("active", list);

  Restart();
  ASSERT_TRUE(WaitUntil([&] { return fm_.Active() == std::vector<int>{kept_partition}; }))
      << "active now: " << fm_.Get("active") << "\n"
      << serve_->log();
  auto done = WaitFor(ender, {"exited", "failed"});
  EXPECT_EQ(done["state"], "exited") << done;
  ASSERT_TRUE(WaitUntil([&] { return CheckedAt(ended["gpus"][0]) > 0; })) << serve_->log();
  EXPECT_GE(CheckedAt(ended["gpus"][0]) + 10,
            CallAt("fmDeactivateFabricPartition", ended_partition));
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/containers/" + keeper)["state"], "running");

  int status = 0;
  CallJson(*admin_, "DELETE", "/v1/containers/" + keeper, "", &status);
  WaitFor(keeper, {"exited", "failed"});
  ASSERT_TRUE(WaitUntil([&] { return fm_.Active().empty(); })) << serve_->log();
}

// A fabric manager that takes activations and never answers: each start fails at the deadline
// with that reason while the hang lasts, none waits for it, the service keeps answering, and
// starts work again once it answers.
TEST_F(FabricServe, AHungActivationFailsItsStartAndHoldsNoOther) {
  StartFabricServe({"--fabric-manager-timeout", "1s"});
  fm_.Set("hang", "activate");
  const std::string first = Submit(2, "echo never");
  const std::string second = Submit(1, "echo never");
  auto one = WaitFor(first, {"failed", "exited"});
  auto two = WaitFor(second, {"failed", "exited"});
  EXPECT_EQ(fm_.Get("hang"), "activate") << "the starts waited for the hang to end";
  EXPECT_EQ(one["state"], "failed");
  EXPECT_NE(one.value("reason", "").find("no answer within 1s"), std::string::npos) << one;
  EXPECT_EQ(two["state"], "failed");
  EXPECT_NE(two.value("reason", "").find("no answer within 1s"), std::string::npos) << two;
  auto health = admin_->Call("GET", "/healthz");
  ASSERT_TRUE(health.ok()) << "the service died";
  EXPECT_EQ(health->status, 200);

  fm_.Set("hang", "none");
  ASSERT_TRUE(WaitUntil([&] { return Settled(); })) << serve_->log();
  // For one deadline after the unanswered call, starts fail at once with its reason; then the
  // fabric manager is asked again.
  std::string third;
  json running;
  ASSERT_TRUE(WaitUntil(
      [&] {
        third = Submit(1, kUntilStopped);
        running = WaitFor(third, {"running", "failed"});
        if (running["state"] == "running") return true;
        EXPECT_NE(running.value("reason", "").find("no answer within 1s"), std::string::npos)
            << running;
        return !WaitUntil([&] { return Settled(); });  // (gives up if the GPUs stay taken)
      },
      std::chrono::seconds(60), std::chrono::milliseconds(100)))
      << serve_->log();
  ASSERT_EQ(running["state"], "running") << running;
  EXPECT_EQ(fm_.Active(), (std::vector<int>{PartitionOf(running["gpus"])}));
  int status = 0;
  CallJson(*admin_, "DELETE", "/v1/containers/" + third, "", &status);
  WaitFor(third, {"exited", "failed"});
  ASSERT_TRUE(WaitUntil([&] { return fm_.Active().empty(); })) << serve_->log();
}

TEST_F(FabricServe, AFabricManagerThatHangsAtStartFailsTheStartWithTheReason) {
  fm_.Set("hang", "list");
  serve_ = std::make_unique<ServeProcess>(
      dir_.path(),
      std::vector<std::string>{"--root", host_.root(), "--cdi-kind", kind_, "--instance", instance_,
                               "--fabric-manager", kSocket, "--nvfm-library", FAKE_NVFM, "--nvml",
                               FAKE_NVML, "--fabric-manager-timeout", "500ms"});
  std::string log;
  EXPECT_FALSE(serve_->Start(&log)) << "it started on a fabric manager that never answered";
  EXPECT_NE(log.find("fmGetSupportedFabricPartitions: no answer within 500 ms"), std::string::npos)
      << log;
  fm_.Set("hang", "none");
}

}  // namespace
}  // namespace tessera::testing
