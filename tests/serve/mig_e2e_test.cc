// MIG slices through a real tessera-serve with real podman containers, on materialized MIG hosts
// whose profiles and UUIDs come from the stand-in NVML: slices packed onto their parent, a
// request that does not fit waiting with its reason, the parent's lease held while any slice
// runs and checked once when the last is released, the holders surviving a kill -9, MIG
// GPU-seconds metered by the share of the GPU, and the requests the service refuses.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <thread>

#include "mps/mps.h"
#include "serve/container_wait.h"
#include "serve/device_listing.h"
#include "serve/podman_serve_fixture.h"
#include "serve/serve_process.h"
#include "support/fake_mps.h"
#include "support/fake_nvml_state.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class MigServeTest : public PodmanServeTest {
 protected:
  MigServeTest(const std::string& fixture, size_t gpus)
      : PodmanServeTest("mig", fixture, gpus), nvml_(fixture) {}

  void StartWithNvml() { StartServe({"--nvml", FAKE_NVML}); }

  std::string SubmitMig(const std::string& profile, int count,
                        const char* script = kListDeviceNodes) {
    return SubmitAccepted({{"image", image_},
                           {"tenancy", "slices"},
                           {"mig", {{"profile", profile}, {"count", count}}},
                           {"command", {"/bin/sh", "-c", script}}});
  }

  // A pending container once a scheduling pass put it first in the queue (with its reason).
  json WaitFirstInQueue(const std::string& id) {
    json container;
    EXPECT_TRUE(WaitUntil(
        [&] {
          container = Get("/v1/containers/" + id);
          return container.value("queue_position", 0) == 1;
        },
        std::chrono::seconds(60)))
        << container;
    return container;
  }

  // The device nodes a running container listed.
  std::vector<std::string> Listed(const std::string& id) { return ListedDeviceNodes(*admin_, id); }

  json Gpu(const std::string& pci) {
    const json listed = Get("/v1/gpus");
    for (const auto& gpu : listed["gpus"])
      if (gpu["pci_address"] == pci) return gpu;
    ADD_FAILURE() << "no GPU " << pci << " in " << listed;
    return json();
  }

  static int HeldSlices(const json& gpu) {
    int held = 0;
    for (const auto& slice : gpu["mig"]["slices"])
      held += slice["container_id"] != "" ? 1 : 0;
    return held;
  }

  void Stop(const std::string& id) {
    int status = 0;
    CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
    EXPECT_EQ(status, 202);
    auto done = WaitFor(id, {"exited", "failed"});
    EXPECT_NE(done["state"], "pending") << done;
  }

  FakeNvmlState nvml_;
};

// One H100 with seven 1g.10gb instances.
class MigSevenSlices : public MigServeTest {
 protected:
  MigSevenSlices() : MigServeTest("h100-mig-1g", 1) {}
};

TEST_F(MigSevenSlices, SlicesShareTheirParentWhoseLeaseEndsWithTheLastSlice) {
  StartWithNvml();
  const std::string parent = gpus_[0];
  std::string a = SubmitMig("1g.10gb", 3);
  std::string b = SubmitMig("1g.10gb", 3);
  EXPECT_EQ(WaitFor(a, {"running", "exited", "failed"})["state"], "running");
  EXPECT_EQ(WaitFor(b, {"running", "exited", "failed"})["state"], "running");
  // One slice is left: a request for two waits, saying so.
  std::string c = SubmitMig("1g.10gb", 2);
  json waiting = WaitFirstInQueue(c);
  EXPECT_EQ(waiting["state"], "pending");
  EXPECT_NE(waiting["reason"].get<std::string>().find("2 free MIG slice(s) wanted, 1 free"),
            std::string::npos)
      << waiting;
  auto queue = Get("/v1/queue");
  ASSERT_EQ(queue["queue"].size(), 1u) << queue;
  EXPECT_EQ(queue["queue"][0]["mig"], json({{"profile", "1g.10gb"}, {"count", 2}}));
  // Waiting MIG requests count against the pending quota.
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/slices", R"({"quota":{"pending":1}})", &status);
  ASSERT_EQ(status, 200);
  auto refused = Post(
      {{"image", image_}, {"tenancy", "slices"}, {"mig", {{"profile", "1g.10gb"}, {"count", 1}}}},
      &status);
  EXPECT_EQ(status, 429) << refused;
  EXPECT_NE(refused.dump().find("tenancy quota: 1/1 requests pending"), std::string::npos)
      << refused;

  // Each container has the parent's node and the two capability nodes of each of its slices;
  // no two containers share a capability node.
  std::set<std::string> caps_seen;
  for (const auto& id : {a, b}) {
    auto record = Get("/v1/containers/" + id);
    EXPECT_EQ(record["gpus"], json::array({parent})) << record;
    EXPECT_EQ(record["mig_devices"].size(), 3u) << record;
    EXPECT_NEAR(record["mig_gpus"].get<double>(), 3.0 / 7.0, 1e-9) << record;
    auto nodes = Listed(id);
    ASSERT_EQ(nodes.size(), 7u);
    EXPECT_EQ(nodes[0], "/dev/nvidia0");
    for (size_t i = 1; i < nodes.size(); ++i) {
      EXPECT_EQ(nodes[i].rfind("/dev/nvidia-caps/nvidia-cap", 0), 0u) << nodes[i];
      EXPECT_TRUE(caps_seen.insert(nodes[i]).second) << nodes[i] << " given twice";
    }
  }
  json gpu = Gpu(parent);
  EXPECT_EQ(gpu["state"], "active") << gpu;
  EXPECT_EQ(HeldSlices(gpu), 6) << gpu;

  // The holders are the container records': a kill -9 and a restart keep them.
  serve_->Kill(SIGKILL);
  Restart();
  gpu = Gpu(parent);
  EXPECT_EQ(gpu["state"], "active") << gpu;
  EXPECT_EQ(HeldSlices(gpu), 6) << gpu;
  EXPECT_EQ(Get("/v1/containers/" + c)["state"], "pending");

  // a's three slices go back; c takes two of the four now free. The parent stays leased (no
  // check while other slices run).
  Stop(a);
  EXPECT_EQ(WaitFor(c, {"running", "exited", "failed"})["state"], "running");
  gpu = Gpu(parent);
  EXPECT_EQ(gpu["state"], "active") << gpu;
  EXPECT_EQ(HeldSlices(gpu), 5) << gpu;
  Stop(b);
  Stop(c);
  ASSERT_TRUE(WaitUntil([&] { return Gpu(parent)["state"] == "free"; }, std::chrono::seconds(120)))
      << serve_->log();
  // One lease, one release, one check: across both processes' logs, the parent went to
  // releasing exactly once.
  const std::string log = serve_->log();
  size_t releases = 0;
  for (size_t at = log.find(parent + ": active -> releasing"); at != std::string::npos;
       at = log.find(parent + ": active -> releasing", at + 1))
    ++releases;
  EXPECT_EQ(releases, 1u) << log;
  EXPECT_NE(log.find(parent + ": checking -> free"), std::string::npos) << log;

  // Metered by the share of the GPU: three 1g slices of seven are 3/7 of a GPU.
  auto usage = Get("/v1/tenancies/slices/usage");
  ASSERT_EQ(usage["containers"].size(), 3u) << usage;
  double total = 0;
  for (const auto& entry : usage["containers"]) {
    const double want_gpus = entry["id"] == c ? 2.0 / 7.0 : 3.0 / 7.0;
    EXPECT_NEAR(entry["gpus"].get<double>(), want_gpus, 1e-6) << entry;
    const double seconds =
        (entry["finished_ms"].get<double>() - entry["started_ms"].get<double>()) / 1000.0;
    EXPECT_NEAR(entry["gpu_seconds"].get<double>(), want_gpus * seconds, 1e-3) << entry;
    total += entry["gpu_seconds"].get<double>();
  }
  EXPECT_NEAR(usage["gpu_seconds"].get<double>(), total, 1e-3) << usage;
}

TEST_F(MigSevenSlices, RequestsTheHostCannotServeAreRefusedNamingTheField) {
  // The instances that exist are all there is (with MIG by demand a 3g.40gb would be made:
  // mig_demand_e2e_test).
  StartServe({"--nvml", FAKE_NVML, "--mig-by-demand", "off"});
  auto body = [&](json extra) {
    json b = {{"image", image_}, {"tenancy", "slices"}, {"command", {"true"}}};
    b.update(extra);
    return b;
  };
  auto mig = [](const std::string& profile, int count) {
    return json{{"profile", profile}, {"count", count}};
  };
  int status = 0;
  // The only GPU is in MIG mode: it is never handed out whole.
  auto answer = Post(body({{"gpus", 1}}), &status);
  EXPECT_EQ(status, 409) << answer;
  EXPECT_NE(answer.dump().find("0 GPUs not in MIG mode"), std::string::npos) << answer;
  // gVisor's nvproxy and Kata's VFIO take no MIG devices.
  for (const char* isolation : {"gvisor", "kata"}) {
    answer = Post(body({{"mig", mig("1g.10gb", 1)}, {"isolation", isolation}}), &status);
    EXPECT_EQ(status, 400) << answer;
    EXPECT_NE(answer.dump().find("mig: MIG slices run with isolation runc only"), std::string::npos)
        << answer;
  }
  answer = Post(body({{"mig", mig("1g.10gb", 1)}, {"gpus", 1}}), &status);
  EXPECT_EQ(status, 400) << answer;
  EXPECT_NE(answer.dump().find("mig: asks for MIG slices instead of gpus"), std::string::npos);
  // More than the host has, or a profile it does not have: 409 naming what there is.
  answer = Post(body({{"mig", mig("1g.10gb", 8)}}), &status);
  EXPECT_EQ(status, 409) << answer;
  EXPECT_NE(answer.dump().find("7 MIG devices of 1g.10gb, 8 requested"), std::string::npos)
      << answer;
  answer = Post(body({{"mig", mig("3g.40gb", 1)}}), &status);
  EXPECT_EQ(status, 409) << answer;
  EXPECT_NE(answer.dump().find("profiles here: 1g.10gb"), std::string::npos) << answer;
  // Malformed requests: 400 naming the field.
  const std::vector<std::pair<json, std::string>> bad = {
      {mig("1g.10gb", 0), "mig.count"},
      {mig("1g.10gb", 57), "mig.count"},
      {mig("../../etc/passwd", 1), "mig.profile"},
      {mig(std::string(40, '1'), 1), "mig.profile"},
      {json{{"profile", "1g.10gb"}}, "mig.count: required"},
      {json{{"count", 1}}, "mig.profile: required"},
      {json{{"profile", "1g.10gb"}, {"count", 1}, {"uuid", "MIG-x"}}, "mig.uuid: unknown field"},
      {json("1g.10gb"), "mig: must be an object"}};
  for (const auto& [value, field] : bad) {
    answer = Post(body({{"mig", value}}), &status);
    EXPECT_EQ(status, 400) << value << " " << answer;
    EXPECT_NE(answer.dump().find(field), std::string::npos) << value << " " << answer;
  }
  // Nothing was accepted.
  EXPECT_TRUE(Get("/v1/containers")["containers"].empty());
}

// An H100 with 3g.40gb + 2g.20gb + 1g.10gb beside an H100 without MIG.
class MigMixedHost : public MigServeTest {
 protected:
  MigMixedHost() : MigServeTest("h100-mig-mixed", 2) {}
};

TEST_F(MigMixedHost, WholeGpusGoToTheGpuWithoutMigAndSlicesToTheOther) {
  StartWithNvml();
  const std::string mig_gpu = gpus_[0], whole_gpu = gpus_[1];
  int status = 0;
  auto whole = Post({{"image", image_},
                     {"tenancy", "slices"},
                     {"gpus", 1},
                     {"command", {"/bin/sh", "-c", kListDeviceNodes}}},
                    &status);
  ASSERT_EQ(status, 202) << whole;
  std::string big = SubmitMig("3g.40gb", 1);
  std::string small = SubmitMig("1g.10gb", 1);
  for (const auto& id : {whole["id"].get<std::string>(), big, small})
    EXPECT_EQ(WaitFor(id, {"running", "exited", "failed"})["state"], "running") << id;

  EXPECT_EQ(Get("/v1/containers/" + whole["id"].get<std::string>())["gpus"],
            json::array({whole_gpu}));
  EXPECT_EQ(Listed(whole["id"]), std::vector<std::string>{"/dev/nvidia1"});
  auto big_record = Get("/v1/containers/" + big);
  EXPECT_EQ(big_record["gpus"], json::array({mig_gpu}));
  EXPECT_EQ(big_record["mig_devices"], json::array({"MIG-8e2c3d4b-0001-4000-8000-000000000000"}));
  EXPECT_NEAR(big_record["mig_gpus"].get<double>(), 3.0 / 7.0, 1e-9);
  // GPU instance 1 (3g.40gb) has capability minors 12 and 13 in the fixture; GI 13 (1g.10gb)
  // 120 and 121.
  EXPECT_EQ(Listed(big), (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12",
                                                   "/dev/nvidia-caps/nvidia-cap13"}));
  EXPECT_EQ(Listed(small),
            (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap120",
                                      "/dev/nvidia-caps/nvidia-cap121"}));
  // The 2g.20gb slice is the one left; a second 3g.40gb waits for the first.
  std::string second = SubmitMig("3g.40gb", 1);
  json waiting = WaitFirstInQueue(second);
  EXPECT_NE(waiting["reason"].get<std::string>().find("1 free MIG slice(s) wanted, 0 free"),
            std::string::npos)
      << waiting;
  Stop(big);
  EXPECT_EQ(WaitFor(second, {"running", "exited", "failed"})["state"], "running");
  Stop(second);
  Stop(small);
  Stop(whole["id"]);
  ASSERT_TRUE(WaitUntil(
      [&] { return Gpu(mig_gpu)["state"] == "free" && Gpu(whole_gpu)["state"] == "free"; },
      std::chrono::seconds(120)))
      << serve_->log();

  // `tessera run --mig` asks for the same and prints what the container saw.
  auto run = RunArgv({"env", "TESSERA_TOKEN=" + serve_->admin_token(),
                      std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera", "run", "--server",
                      "http://127.0.0.1:" + std::to_string(serve_->port()), "--tenancy", "slices",
                      "--mig", "1g.10gbx1", image_, "/bin/sh", "-c", "ls /dev/nvidia-caps"});
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("nvidia-cap120\nnvidia-cap121\n"), std::string::npos) << run.output;
}

TEST_F(MigMixedHost, SlicesCountAgainstTheTenancysGpuQuota) {
  StartWithNvml();
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/slices", R"({"quota":{"gpus":1}})", &status);
  ASSERT_EQ(status, 200);
  std::string big = SubmitMig("3g.40gb", 1);
  EXPECT_EQ(WaitFor(big, {"running", "exited", "failed"})["state"], "running");
  // 3/7 of a GPU in slices: a whole GPU would take the tenancy past its quota of 1.
  auto whole =
      Post({{"image", image_}, {"tenancy", "slices"}, {"gpus", 1}, {"command", {"true"}}}, &status);
  ASSERT_EQ(status, 202) << whole;
  json waiting = WaitFirstInQueue(whole["id"]);
  EXPECT_EQ(waiting["reason"], "waiting: tenancy quota 0.429/1 GPUs in use") << waiting;
  // Another slice still fits under it (4/7 of a GPU).
  std::string small = SubmitMig("1g.10gb", 1);
  EXPECT_EQ(WaitFor(small, {"running", "exited", "failed"})["state"], "running");
  bool listed = false;
  const json queue = Get("/v1/queue");
  for (const auto& tenancy : queue["tenancies"])
    if (tenancy["name"] == "slices") {
      listed = true;
      EXPECT_NEAR(tenancy["mig_gpus_in_use"].get<double>(), 4.0 / 7.0, 1e-9) << tenancy;
    }
  EXPECT_TRUE(listed) << queue;
  // The slices end: the whole GPU runs.
  Stop(big);
  Stop(small);
  auto done = WaitFor(whole["id"], {"exited", "failed"});
  EXPECT_EQ(done["state"], "exited") << done;
}

// The mixed host with the stand-in nvidia-cuda-mps-control: shares of its 3g.40gb slice.
class MigSliceShares : public MigMixedHost {
 protected:
  void SetUp() override {
    MigMixedHost::SetUp();
    mps_ = std::make_unique<FakeMps>();  // after the NVML state: it takes over the call log
    mps_root_ = dir_.path() + "/mps";
  }
  void TearDown() override {
    MigMixedHost::TearDown();
    for (const auto& daemon : mps::InspectDaemons(mps_root_)) {
      (void)mps::UnmountShm(daemon.paths.shm);
      (void)mps::UnmountShm(daemon.paths.pipe);
      if (daemon.control_pid) ::kill(static_cast<pid_t>(*daemon.control_pid), SIGKILL);
    }
  }
  std::string SubmitSliceShare(const std::string& memory, int compute) {
    return SubmitAccepted(
        {{"image", image_},
         {"tenancy", "slices"},
         {"share", {{"mig", "3g.40gb"}, {"memory", memory}, {"compute", compute}}},
         {"command",
          {"/bin/sh", "-c",
           "for n in /dev/nvidia[0-9]* /dev/nvidia-caps/*; do [ -e \"$n\" ] && echo \"$n\"; "
           "done; echo \"env $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT "
           "$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE\"; echo listed; exec sleep 600"}}});
  }
  std::unique_ptr<FakeMps> mps_;
  std::string mps_root_;
};

TEST_F(MigSliceShares, TwoSharesRunOnOneSliceWithItsDeviceNodesAndTheirOwnLimits) {
  // No slice is made by demand: the whole-slice request below waits for the shared one.
  StartServe({"--nvml", FAKE_NVML, "--mps-root", mps_root_, "--mps-control", FakeMps::Binary(),
              "--nvidia-smi", FakeMps::NvidiaSmi(), "--mps-shm-mib", "4", "--share-check-interval",
              "200ms", "--mig-by-demand", "off"});
  const std::string slice = "MIG-8e2c3d4b-0001-4000-8000-000000000000";
  const std::string a = SubmitSliceShare("10Gi", 50);
  const std::string b = SubmitSliceShare("4Gi", 20);
  for (const auto& id : {a, b}) {
    EXPECT_EQ(WaitFor(id, {"running", "exited", "failed"})["state"], "running") << id;
    EXPECT_EQ(Get("/v1/containers/" + id)["mig_devices"], json::array({slice})) << id;
  }
  // The slice's device nodes only (GI 1: capability minors 12 and 13), and each container's own
  // limits, as a share of a whole GPU gets them.
  EXPECT_EQ(Listed(a), (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12",
                                                 "/dev/nvidia-caps/nvidia-cap13",
                                                 "env /run/tessera/mps 0=10240M 50"}));
  EXPECT_EQ(Listed(b), (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12",
                                                 "/dev/nvidia-caps/nvidia-cap13",
                                                 "env /run/tessera/mps 0=4096M 20"}));
  // One daemon, the slice's.
  EXPECT_EQ(mps_->Lines("nvidia-cuda-mps-control " + slice + " -f").size(), 1u)
      << mps_->Transcript();
  // A whole-slice request waits while the shares hold it.
  std::string whole = SubmitMig("3g.40gb", 1);
  json waiting = WaitFirstInQueue(whole);
  EXPECT_NE(waiting["reason"].get<std::string>().find("1 free MIG slice(s) wanted, 0 free"),
            std::string::npos)
      << waiting;
  Stop(a);
  Stop(b);
  EXPECT_EQ(WaitFor(whole, {"running", "exited", "failed"})["state"], "running");
  Stop(whole);
}

}  // namespace
}  // namespace tessera::testing
