// Shares of a MIG slice through a real tessera-serve with the null backend (nothing runs) on the
// materialized H100 MIG fixture, the stand-in NVML's MIG layout and the stand-in
// nvidia-cuda-mps-control: two shares of one tenancy join one slice, whose own daemon is named by
// the MIG device and given the limits a whole GPU's would get, the GPU's compute mode untouched;
// a whole-slice request waits while shares hold the slice and takes it once they are gone; and
// the requests the service refuses, hostile `share.mig` values among them.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>

#include "mps/mps.h"
#include "serve/serve_process.h"
#include "support/fake_mps.h"
#include "support/fake_nvml_state.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

// The fixture's MIG devices on GPU 0000:18:00.0: a 3g.40gb, a 2g.20gb and a 1g.10gb.
constexpr char kParent[] = "0000:18:00.0";
constexpr char kSlice3g[] = "MIG-8e2c3d4b-0001-4000-8000-000000000000";

class MigShareServe : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus_ = WriteGpuRoms(host_.root());
    mps_ = std::make_unique<FakeMps>();  // after the NVML state: it takes over the call log
    mps_root_ = dir_.path() + "/mps";
    mps_->Watch(mps_root_ + "/{uuid}/ready");
  }

  void TearDown() override {
    serve_.reset();
    for (const auto& daemon : mps::InspectDaemons(mps_root_)) {
      (void)mps::UnmountShm(daemon.paths.shm);
      (void)mps::UnmountShm(daemon.paths.pipe);
      if (daemon.control_pid) ::kill(static_cast<pid_t>(*daemon.control_pid), SIGKILL);
    }
  }

  // `mig_by_demand`: whether serve may make the MIG slices shares wait for.
  void Start(const std::string& mig_by_demand = "instances") {
    serve_ = std::make_unique<ServeProcess>(
        dir_.path(),
        NullBackendFlags(
            host_.root(), dir_.path(),
            {"--nvml", FAKE_NVML, "--mps-root", mps_root_, "--mps-control", FakeMps::Binary(),
             "--nvidia-smi", FakeMps::NvidiaSmi(), "--mps-shm-mib", "4", "--share-check-interval",
             "200ms", "--mig-by-demand", mig_by_demand}));
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  json Post(const json& body, int* status) {
    return CallJson(*admin_, "POST", "/v1/containers", body.dump(), status);
  }

  json Get(const std::string& path) {
    int status = 0;
    auto doc = CallJson(*admin_, "GET", path, "", &status);
    EXPECT_EQ(status, 200) << path << " -> " << doc;
    return doc;
  }

  std::string SubmitShare(const std::string& memory, int compute) {
    int status = 0;
    auto answer = Post({{"image", "busybox"},
                        {"tenancy", "slices"},
                        {"share", {{"mig", "3g.40gb"}, {"memory", memory}, {"compute", compute}}}},
                       &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  // The container once `done` holds for it.
  json WaitContainer(const std::string& id, const std::function<bool(const json&)>& done) {
    json container;
    EXPECT_TRUE(WaitUntil(
        [&] {
          container = Get("/v1/containers/" + id);
          return done(container);
        },
        std::chrono::seconds(90)))
        << container;
    return container;
  }

  json Slice(const std::string& id) {
    const json listed = Get("/v1/gpus");
    for (const auto& gpu : listed["gpus"])
      if (gpu["pci_address"] == kParent)
        for (const auto& slice : gpu["mig"]["slices"])
          if (slice["id"] == id) return slice;
    ADD_FAILURE() << "no MIG device " << id;
    return json();
  }

  TempHost host_{"h100-mig-mixed"};
  FakeNvmlState nvml_{"h100-mig-mixed"};
  std::unique_ptr<FakeMps> mps_;
  TempDir dir_;
  std::string mps_root_;
  std::vector<std::string> gpus_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

TEST_F(MigShareServe, TwoSharesJoinOneSliceWhoseOwnDaemonIsNamedByTheMigDevice) {
  // The slice's daemon is slow to come up: both shares hold the slice meanwhile. No slice is
  // made by demand: the whole-slice request below waits for this one.
  mps_->SetStartDelayMs(kSlice3g, 20000);
  Start("off");
  const std::string a = SubmitShare("10Gi", 50);
  const std::string b = SubmitShare("8Gi", 25);
  const auto on_slice = [](const json& c) {
    return c.value("mig_devices", json::array()) == json::array({kSlice3g});
  };
  json first = WaitContainer(a, on_slice);
  json second = WaitContainer(b, on_slice);
  EXPECT_EQ(first["gpus"], json::array({kParent})) << first;
  EXPECT_EQ(first["share"]["mig"], "3g.40gb") << first;
  EXPECT_EQ(first["enforcement"], "driver") << first;
  // Its fraction of the slice (compute 50 % over memory 10Gi of 40 GB) times 3/7 of the GPU.
  EXPECT_NEAR(first["share_gpus"].get<double>(), 0.5 * 3.0 / 7.0, 1e-9) << first;
  json slice = Slice(kSlice3g);
  EXPECT_EQ(slice["shared"], true) << slice;

  // A request for the whole slice never takes a shared one: it waits for a free 3g.40gb.
  int status = 0;
  auto whole = Post({{"image", "busybox"},
                     {"tenancy", "slices"},
                     {"mig", {{"profile", "3g.40gb"}, {"count", 1}}}},
                    &status);
  ASSERT_EQ(status, 202) << whole;
  const std::string c = whole["id"];
  json waiting = WaitContainer(c, [](const json& x) { return x.value("queue_position", 0) == 1; });
  EXPECT_EQ(waiting["state"], "pending") << waiting;
  EXPECT_NE(waiting["reason"].get<std::string>().find("1 free MIG slice(s) wanted, 0 free"),
            std::string::npos)
      << waiting;
  // Both shares were still on the slice while the request waited.
  EXPECT_EQ(Get("/v1/containers/" + a)["mig_devices"], json::array({kSlice3g}));

  // The shares end (nothing runs); the slice's daemon goes, and the whole-slice request gets it.
  const auto ended = [](const json& x) { return x["state"] == "exited" || x["state"] == "failed"; };
  EXPECT_EQ(WaitContainer(a, ended)["state"], "exited");
  EXPECT_EQ(WaitContainer(b, ended)["state"], "exited");
  json took = WaitContainer(c, ended);
  EXPECT_EQ(took["state"], "exited") << took;
  EXPECT_EQ(took["mig_devices"], json::array({kSlice3g})) << took;

  const std::string transcript = mps_->Transcript();
  // One daemon, for the MIG device (its CUDA_VISIBLE_DEVICES), under a directory of its own.
  EXPECT_NE(transcript.find(std::string("nvidia-cuda-mps-control ") + kSlice3g + " -f"),
            std::string::npos)
      << transcript;
  EXPECT_EQ(transcript.find("nvidia-cuda-mps-control GPU-"), std::string::npos) << transcript;
  // The limits a whole GPU's daemon gets: the largest share's memory and compute, device 0.
  EXPECT_NE(
      transcript.find(std::string(kSlice3g) + " cmd set_default_device_pinned_mem_limit 0 10240M"),
      std::string::npos)
      << transcript;
  EXPECT_NE(transcript.find(std::string(kSlice3g) + " cmd set_default_active_thread_percentage 50"),
            std::string::npos)
      << transcript;
  // The GPU's compute mode is never touched, and the daemon was torn down before the slice went
  // whole.
  EXPECT_EQ(transcript.find("nvmlDeviceSetComputeMode"), std::string::npos) << transcript;
  EXPECT_NE(transcript.find(std::string(kSlice3g) + " cmd quit"), std::string::npos) << transcript;
}

TEST_F(MigShareServe, AShareOfAProfileNoSliceHasGetsASliceMadeForIt) {
  // The fixture has a 3g.40gb, a 2g.20gb and a 1g.10gb, none held: a share of a 1g.20gb makes
  // one from idle instances, and its MPS daemon is the new MIG device's.
  nvml_.MirrorCapabilitiesUnder(host_.root());
  Start();
  int status = 0;
  auto answer = Post({{"image", "busybox"},
                      {"tenancy", "slices"},
                      {"share", {{"mig", "1g.20gb"}, {"memory", "4Gi"}, {"compute", 50}}}},
                     &status);
  ASSERT_EQ(status, 202) << answer;
  const std::string id = answer.value("id", "");
  json placed = WaitContainer(
      id, [](const json& c) { return !c.value("mig_devices", json::array()).empty(); });
  ASSERT_EQ(placed["mig_devices"].size(), 1u) << placed << serve_->log();
  const std::string device = placed["mig_devices"][0];
  EXPECT_EQ(device.rfind("MIG-", 0), 0u) << placed;
  EXPECT_NE(device, kSlice3g) << placed;
  EXPECT_EQ(placed["share"]["mig"], "1g.20gb") << placed;
  json slice = Slice(device);
  EXPECT_EQ(slice["profile"], "1g.20gb") << slice;
  // NVML made a 1g.20gb (profile 15), and the daemon runs on it.
  std::string transcript;
  ASSERT_TRUE(WaitUntil(
      [&] {
        transcript = mps_->Transcript();
        return transcript.find("nvidia-cuda-mps-control " + device + " -f") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << transcript;
  EXPECT_NE(transcript.find("nvmlDeviceCreateGpuInstanceWithPlacement 0000:18:00.0 profile=15 "),
            std::string::npos)
      << transcript;
}

TEST_F(MigShareServe, RefusesMigSharesThatCannotBeHeldAndEchoesNoHostileValue) {
  Start();
  const std::string long_value = "1g." + std::string(5000, 'A') + "gb";
  struct Case {
    json share;
    int status;
    const char* says;
  } cases[] = {
      {{{"mig", 3}, {"memory", "1Gi"}, {"compute", 10}}, 400, "share.mig"},
      {{{"mig", {{"profile", "3g.40gb"}}}, {"memory", "1Gi"}, {"compute", 10}}, 400, "share.mig"},
      {{{"mig", ""}, {"memory", "1Gi"}, {"compute", 10}}, 400, "MIG profile"},
      {{{"mig", "../../etc/passwd"}, {"memory", "1Gi"}, {"compute", 10}}, 400, "not a MIG profile"},
      {{{"mig", "3g.40gb\n"}, {"memory", "1Gi"}, {"compute", 10}}, 400, "not a MIG profile"},
      {{{"mig", "3g.40gb\"}"}, {"memory", "1Gi"}, {"compute", 10}}, 400, "not a MIG profile"},
      {{{"mig", long_value}, {"memory", "1Gi"}, {"compute", 10}}, 400, "longer than 32"},
      {{{"mig", "3g.40gb"}, {"memory", "1Gi"}, {"compute", 10}, {"mode", "timeslice"}}, 400, "MPS"},
      // Well formed, but no board here offers it (a profile the H100 offers could be made).
      {{{"mig", "5g.50gb"}, {"memory", "1Gi"}, {"compute", 10}}, 409, "no MIG device of 5g.50gb"},
      {{{"mig", "1g.10gb"}, {"memory", "9Gi"}, {"compute", 10}},
       409,
       "more than a MIG device of 1g.10gb"},
      {{{"mig", "3g.40gb"}, {"memory", "40Gi"}, {"compute", 10}},
       409,
       "more than a MIG device of 3g.40gb"},
  };
  for (const auto& c : cases) {
    json body = {{"image", "busybox"}, {"tenancy", "no"}, {"share", c.share}};
    int status = 0;
    auto answer = Post(body, &status);
    const std::string text = answer.dump();
    EXPECT_EQ(status, c.status) << c.share << " -> " << text.substr(0, 300);
    EXPECT_NE(text.find(c.says), std::string::npos) << c.share << " -> " << text.substr(0, 300);
    EXPECT_EQ(text.find(std::string(64, 'A')), std::string::npos) << text.substr(0, 300);
    EXPECT_LT(text.size(), 1000u) << text.substr(0, 300);
  }
  // Nothing was accepted.
  EXPECT_TRUE(Get("/v1/containers")["containers"].empty());
}

}  // namespace
}  // namespace tessera::testing
