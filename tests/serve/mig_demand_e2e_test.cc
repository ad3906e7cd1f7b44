// MIG by demand through a real tessera-serve with real podman containers, on the materialized
// H100 with seven 1g.10gb instances and the stand-in NVML (its call log is the witness): a size
// that exists nowhere is made from idle instances only and its container gets the new device's
// nodes; a kill -9 right after the create neither leaks nor duplicates the instance; a large
// request keeps its memory slices against a stream of small ones; --mig-by-demand off serves
// only what exists.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <set>
#include <sstream>
#include <thread>

#include "serve/container_wait.h"
#include "serve/device_listing.h"
#include "serve/podman_serve_fixture.h"
#include "serve/serve_process.h"
#include "support/fake_nvml_state.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

// Lines of the stand-in's call log with `text` in them.
size_t CountLines(const std::string& log, const std::string& text) {
  size_t count = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);)
    count += line.find(text) != std::string::npos ? 1 : 0;
  return count;
}

// The GPU instance of a MIG device UUID: its second group, in hex (the fixture's and the
// stand-in's UUIDs both carry it there).
unsigned GiOf(const std::string& uuid) {
  return static_cast<unsigned>(std::stoul(uuid.substr(13, 4), nullptr, 16));
}

class MigByDemand : public PodmanServeTest {
 protected:
  explicit MigByDemand(const std::string& fixture = "h100-mig-1g")
      : PodmanServeTest("migdemand", fixture, 1), nvml_(fixture) {}

  void SetUp() override {
    PodmanServeTest::SetUp();
    nvml_.MirrorCapabilitiesUnder(host_.root());
  }

  std::string SubmitMig(const std::string& profile, int count) {
    return SubmitAccepted({{"image", image_},
                           {"tenancy", "shapes"},
                           {"mig", {{"profile", profile}, {"count", count}}},
                           {"command", {"/bin/sh", "-c", kListDeviceNodes}}});
  }

  std::vector<std::string> Listed(const std::string& id) { return ListedDeviceNodes(*admin_, id); }

  std::string Reason(const std::string& id, const std::string& wanted) {
    json container;
    EXPECT_TRUE(WaitUntil(
        [&] {
          container = Get("/v1/containers/" + id);
          return container.value("reason", "").find(wanted) != std::string::npos;
        },
        std::chrono::seconds(60)))
        << container;
    return container.value("reason", "");
  }

  std::vector<json> Slices() {
    const json listed = Get("/v1/gpus");
    std::vector<json> out;
    for (const auto& gpu : listed["gpus"])
      for (const auto& slice : gpu["mig"]["slices"])
        out.push_back(slice);
    return out;
  }

  void Stop(const std::string& id) {
    int status = 0;
    CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
    EXPECT_EQ(status, 202);
    EXPECT_NE(WaitFor(id, {"exited", "failed"})["state"], "pending");
  }

  // The container runs with its one new MIG device: the parent's node and the two capability
  // nodes, which exist under the host root as character devices.
  void ExpectNewDeviceNodes(const std::string& id) {
    auto nodes = Listed(id);
    ASSERT_EQ(nodes.size(), 3u);
    EXPECT_EQ(nodes[0], "/dev/nvidia0");
    for (size_t i = 1; i < nodes.size(); ++i) {
      EXPECT_EQ(nodes[i].rfind("/dev/nvidia-caps/nvidia-cap", 0), 0u) << nodes[i];
      struct stat st {};
      EXPECT_EQ(::stat((host_.root() + nodes[i]).c_str(), &st), 0) << nodes[i];
      EXPECT_TRUE(S_ISCHR(st.st_mode)) << nodes[i];
    }
  }

  FakeNvmlState nvml_;
};

TEST_F(MigByDemand, ASizeThatExistsNowhereIsMadeFromIdleInstancesOnly) {
  StartServe({"--nvml", FAKE_NVML});
  std::string small = SubmitMig("1g.10gb", 2);
  ASSERT_EQ(WaitFor(small, {"running", "exited", "failed"})["state"], "running");
  std::set<unsigned> held;
  const json small_record = Get("/v1/containers/" + small);
  for (const auto& uuid : small_record["mig_devices"])
    held.insert(GiOf(uuid.get<std::string>()));
  ASSERT_EQ(held.size(), 2u) << small_record << serve_->log();

  // No 3g.40gb exists: one is made, where only idle 1g.10gb instances were.
  std::string big = SubmitMig("3g.40gb", 1);
  ASSERT_EQ(WaitFor(big, {"running", "exited", "failed"})["state"], "running") << serve_->log();
  auto record = Get("/v1/containers/" + big);
  ASSERT_EQ(record["mig_devices"].size(), 1u) << record;
  EXPECT_NEAR(record["mig_gpus"].get<double>(), 3.0 / 7.0, 1e-9) << record;
  const std::string uuid = record["mig_devices"][0];
  EXPECT_NE(nvml_.State().find("uuid=" + uuid), std::string::npos) << nvml_.State();
  ExpectNewDeviceNodes(big);

  const std::string log = nvml_.Log();
  EXPECT_EQ(CountLines(log, "nvmlDeviceCreateGpuInstanceWithPlacement 0000:18:00.0 profile=9"), 1u)
      << log;
  EXPECT_GE(CountLines(log, "nvmlGpuInstanceDestroy"), 3u) << log;
  for (unsigned gi : held) {
    EXPECT_EQ(CountLines(log, "nvmlGpuInstanceDestroy 0000:18:00.0 gi=" + std::to_string(gi) + " "),
              0u)
        << log;
    EXPECT_EQ(CountLines(log, "Destroy 0000:18:00.0 gi=" + std::to_string(gi) + " ci="), 0u) << log;
  }
  // The running slices' container was never disturbed.
  EXPECT_EQ(Get("/v1/containers/" + small)["state"], "running");
  size_t three = 0;
  for (const auto& slice : Slices())
    if (slice["profile"] == "3g.40gb") {
      ++three;
      EXPECT_EQ(slice["container_id"], big) << slice;
    }
  EXPECT_EQ(three, 1u);
  // Each change is in the audit trail as the service's.
  auto audit = Get("/v1/audit?action=gpu.mig_reshape");
  ASSERT_FALSE(audit["records"].empty()) << audit;
  EXPECT_NE(audit["records"][0]["detail"].get<std::string>().find("create 3g.40gb"),
            std::string::npos)
      << audit;

  // The decision's time, as the service logged it.
  const std::string serve_log = serve_->log();
  const size_t decided = serve_log.find("decided in ");
  ASSERT_NE(decided, std::string::npos) << serve_log;
  std::printf("serve: %s\n",
              serve_log.substr(decided, serve_log.find(')', decided) - decided).c_str());

  // More than the board can ever hold is still refused.
  int status = 0;
  auto refused = Post({{"image", image_},
                       {"tenancy", "shapes"},
                       {"mig", {{"profile", "1g.10gb"}, {"count", 8}}},
                       {"command", {"true"}}},
                      &status);
  EXPECT_EQ(status, 409) << refused;
  EXPECT_NE(refused.dump().find("can hold 7 MIG devices of 1g.10gb, 8 requested"),
            std::string::npos)
      << refused;
  Stop(big);
  Stop(small);
}

TEST_F(MigByDemand, AnInstanceNvmlSaysIsInUseStopsItsStepAndIsLeftAlone) {
  // A process the service does not know of runs on GI 13 (1g.10gb at 6).
  nvml_.Replace("uuid=MIG-7d1b2c3a-000d-4000-8006-000000000000",
                "uuid=MIG-7d1b2c3a-000d-4000-8006-000000000000 processes=1");
  StartServe({"--nvml", FAKE_NVML});
  std::string big = SubmitMig("3g.40gb", 1);
  ASSERT_EQ(WaitFor(big, {"running", "exited", "failed"})["state"], "running") << serve_->log();
  ExpectNewDeviceNodes(big);
  const std::string log = nvml_.Log();
  // The step at 4 stopped at GI 13's IN_USE (19) and made nothing there; the next one went to 0.
  EXPECT_EQ(CountLines(log, "nvmlComputeInstanceDestroy 0000:18:00.0 gi=13 ci=0 -> 19"), 1u) << log;
  EXPECT_EQ(CountLines(log, "nvmlGpuInstanceDestroy 0000:18:00.0 gi=13 "), 0u) << log;
  EXPECT_EQ(CountLines(log, "profile=9 start=4"), 0u) << log;
  EXPECT_EQ(CountLines(log,
                       "nvmlDeviceCreateGpuInstanceWithPlacement 0000:18:00.0 profile=9 "
                       "start=0 size=4 -> 0"),
            1u)
      << log;
  EXPECT_NE(nvml_.State().find("gi 0000:18:00.0 id=13 "), std::string::npos);
  auto audit = Get("/v1/audit?action=gpu.mig_reshape");
  EXPECT_NE(audit.dump().find("failed"), std::string::npos) << audit;
  Stop(big);
}

TEST_F(MigByDemand, AKillRightAfterTheCreateNeitherLeaksNorDuplicates) {
  StartServe({"--nvml", FAKE_NVML});
  std::string big = SubmitMig("3g.40gb", 1);
  ASSERT_TRUE(WaitUntil(
      [&] { return nvml_.Log().find("nvmlGpuInstanceCreateComputeInstance") != std::string::npos; },
      std::chrono::seconds(60), std::chrono::milliseconds(1)))
      << serve_->log();
  serve_->Kill(SIGKILL);
  Restart();
  ASSERT_EQ(WaitFor(big, {"running", "exited", "failed"})["state"], "running") << serve_->log();
  ExpectNewDeviceNodes(big);
  const std::string log = nvml_.Log();
  EXPECT_EQ(CountLines(log, "nvmlDeviceCreateGpuInstanceWithPlacement"), 1u) << log;
  const std::string state = nvml_.State();
  EXPECT_EQ(CountLines(state, " profile=9 "), 1u) << state;
  // Every instance NVML has is a slice the service lists, once.
  EXPECT_EQ(Slices().size(), CountLines(state, "ci 0000:18:00.0")) << state;
  Stop(big);
}

TEST_F(MigByDemand, ALargeRequestIsNotStarvedByAStreamOfSmallOnes) {
  StartServe({"--nvml", FAKE_NVML});
  std::string first = SubmitMig("1g.10gb", 1);
  ASSERT_EQ(WaitFor(first, {"running", "exited", "failed"})["state"], "running");
  // A 7g.80gb needs the whole GPU: it keeps all eight memory slices while `first` runs.
  std::string whole = SubmitMig("7g.80gb", 1);
  Reason(whole, "memory slices 0-7 of GPU 0000:18:00.0 are kept for it");
  // Six idle 1g.10gb instances lie in the kept slices: small requests get none of them.
  std::vector<std::string> smalls;
  for (int i = 0; i < 3; ++i)
    smalls.push_back(SubmitMig("1g.10gb", 1));
  for (const auto& id : smalls)
    EXPECT_NE(Reason(id, "1 free MIG slice(s) wanted, 0 free"), "");
  for (const auto& id : smalls)
    EXPECT_EQ(Get("/v1/containers/" + id)["state"], "pending");

  // The work in its slices ends: the 7g.80gb is made and runs before any small one.
  Stop(first);
  ASSERT_EQ(WaitFor(whole, {"running", "exited", "failed"})["state"], "running") << serve_->log();
  ExpectNewDeviceNodes(whole);
  for (const auto& id : smalls)
    EXPECT_EQ(Get("/v1/containers/" + id)["state"], "pending");
  EXPECT_EQ(CountLines(nvml_.Log(),
                       "nvmlDeviceCreateGpuInstanceWithPlacement 0000:18:00.0 "
                       "profile=0"),
            1u)
      << nvml_.Log();
  // Then the small ones get 1g.10gb instances made again.
  Stop(whole);
  for (const auto& id : smalls)
    EXPECT_EQ(WaitFor(id, {"running", "exited", "failed"})["state"], "running") << serve_->log();
  for (const auto& id : smalls)
    Stop(id);
}

TEST_F(MigByDemand, OffServesOnlyTheInstancesThatExist) {
  StartServe({"--nvml", FAKE_NVML, "--mig-by-demand", "off"});
  int status = 0;
  auto refused = Post({{"image", image_},
                       {"tenancy", "shapes"},
                       {"mig", {{"profile", "3g.40gb"}, {"count", 1}}},
                       {"command", {"true"}}},
                      &status);
  EXPECT_EQ(status, 409) << refused;
  EXPECT_NE(refused.dump().find("this host has 0 MIG devices of 3g.40gb"), std::string::npos)
      << refused;
  std::string small = SubmitMig("1g.10gb", 7);
  ASSERT_EQ(WaitFor(small, {"running", "exited", "failed"})["state"], "running");
  Stop(small);
  EXPECT_EQ(CountLines(nvml_.Log(), "Create"), 0u) << nvml_.Log();
  EXPECT_EQ(CountLines(nvml_.Log(), "Destroy"), 0u) << nvml_.Log();
}

// An A100 40GB with 2g.10gb at 0 and 2 and 3g.20gb at 4, all idle: its table is a file.
class MigByDemandA100 : public MigByDemand {
 protected:
  MigByDemandA100() : MigByDemand("a100-mig") {}
};

TEST_F(MigByDemandA100, OtherBoardsTakeTheirProfileTableFromAFile) {
  // Without the A100's table its instances stay as they are: a profile it lacks is refused.
  StartServe({"--nvml", FAKE_NVML});
  int status = 0;
  const json body = {{"image", image_},
                     {"tenancy", "shapes"},
                     {"mig", {{"profile", "1g.5gb"}, {"count", 1}}},
                     {"command", {"/bin/sh", "-c", kListDeviceNodes}}};
  auto refused = Post(body, &status);
  EXPECT_EQ(status, 409) << refused;
  EXPECT_NE(refused.dump().find("profiles here: 2g.10gb, 3g.20gb"), std::string::npos) << refused;

  StartServe({"--nvml", FAKE_NVML, "--mig-profiles",
              std::string(TESSERA_SOURCE_DIR) + "/data/mig-profiles/a100-40gb.yaml"});
  std::string small = SubmitAccepted(body);
  ASSERT_EQ(WaitFor(small, {"running", "exited", "failed"})["state"], "running") << serve_->log();
  ExpectNewDeviceNodes(small);
  const std::string log = nvml_.Log();
  EXPECT_EQ(CountLines(log, "nvmlDeviceCreateGpuInstanceWithPlacement 0000:07:00.0 profile=19 "),
            1u)
      << log;
  // One idle instance made room (the board's seven compute slices were all in instances).
  EXPECT_EQ(CountLines(log, "nvmlGpuInstanceDestroy 0000:07:00.0"), 1u) << log;
  Stop(small);
}

}  // namespace
}  // namespace tessera::testing
