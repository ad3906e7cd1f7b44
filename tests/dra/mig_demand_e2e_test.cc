// MIG by demand end to end: the real tessera-dra-plugin with --mig-by-demand on a fixture host
// whose GPU 2a:00.0 is in MIG mode without instances (18:00.0 holds three instances someone else
// made), the kubelet emulator and the stand-in NVML, whose call log says what was made and
// destroyed. A claimed placement's instance is made at prepare, exactly once, and destroyed at
// unprepare, also after a restart; a busy instance stays; a GPU prepared whole is not partitioned.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "common/bounded_file.h"
#include "dra/plugin_fixture.h"
#include "support/fake_nvml_state.h"

namespace tessera::dra::e2e {
namespace {

const std::string kGpu = "0000:2a:00.0";
const std::string kWhole = "gpu-0000-2a-00-0";

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// The line of the state file that starts with `prefix`, or "".
std::string StateLine(const std::string& state, const std::string& prefix) {
  for (size_t at = 0; at < state.size();) {
    size_t end = state.find('\n', at);
    std::string line = state.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.rfind(prefix, 0) == 0) return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

class DraMigDemand : public DraPlugin {
 protected:
  void SetUp() override {
    DraPlugin::SetUp();
    nvml_.Replace("mig=0 pending=0", "mig=1 pending=0");  // 2a:00.0: MIG on, no instances
    nvml_.MirrorCapabilitiesUnder(host_.root());
  }

  void StartByDemand() {
    StartPlugin(host_.root(), {"--nvml", FAKE_NVML, "--mig-by-demand", "true"});
  }

  // A claim allocated to the named devices of this node, as the scheduler writes it.
  ClaimRef Claim(const std::string& name, const std::string& device) {
    Json results = Json::array({{{"request", "gpu"},
                                 {"driver", "gpu.tessera.dev"},
                                 {"pool", "node-a"},
                                 {"device", device}}});
    Json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", "team"}}},
                  {"spec", {{"devices", {{"requests", Json::array()}}}}}};
    auto created = client_->Create(kClaims, "team", claim);
    EXPECT_TRUE(created.ok());
    EXPECT_TRUE(client_
                    ->Patch(kClaims, "team", name,
                            {{"status", {{"allocation", {{"devices", {{"results", results}}}}}}}},
                            k8s::PatchType::kMerge, "status")
                    .ok());
    return ClaimRef{"team", name, created.ok() ? (*created)["metadata"]["uid"] : Json("")};
  }

  // The names of the devices in the pool's device slices.
  std::vector<std::string> PoolDevices() {
    std::vector<std::string> names;
    for (size_t i = 0; i < 4; ++i) {
      auto slice = client_->Get(kSlices, "", PoolSliceName("gpu.tessera.dev", "node-a", i));
      if (!slice || !(*slice)["spec"].contains("devices")) continue;
      for (const auto& device : (*slice)["spec"]["devices"])
        names.push_back(device["name"]);
    }
    return names;
  }
  bool Offered(const std::string& device) {
    auto names = PoolDevices();
    return std::find(names.begin(), names.end(), device) != names.end();
  }

  // "id=<g>" of the GPU instance of 2a:00.0 at `start`, or "".
  std::string InstanceAt(uint32_t start) {
    std::regex gi("gi " + kGpu + " id=([0-9]+) profile=[0-9]+ start=" + std::to_string(start));
    std::smatch match;
    std::string state = nvml_.State();
    return std::regex_search(state, match, gi) ? match[1].str() : "";
  }

  std::string CreatesOn() {
    return std::to_string(Count(nvml_.Log(), "nvmlDeviceCreateGpuInstanceWithPlacement " + kGpu));
  }

  void Restart(std::unique_ptr<DraKubelet>& kubelet) {
    kubelet.reset();
    EXPECT_EQ(plugin_->Stop(), 0);
    StartByDemand();
    kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
    Register(*kubelet);
  }

  testing::FakeNvmlState nvml_{"h100-mig-mixed"};
  testing::TempHost host_{"h100-mig-mixed"};
};

TEST_F(DraMigDemand, APlacementsInstanceIsMadeAtPrepareOnceAndDestroyedAtUnprepareAfterARestart) {
  StartByDemand();
  auto kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
  Register(*kubelet);
  const std::string placement = kWhole + "-mig-3g-40gb-4";
  ASSERT_TRUE(WaitUntil([&] { return Offered(placement); })) << plugin_->Log();
  auto offered = PoolDevices();
  // The other GPU's instances are someone else's: offered as they are, their slices taken.
  EXPECT_TRUE(Offered("gpu-0000-18-00-0-mig-5-0"));
  EXPECT_FALSE(Offered("gpu-0000-18-00-0"));
  EXPECT_TRUE(Offered(kWhole));
  EXPECT_EQ(offered.size(), 3u + 1u + 25u);
  auto counters = client_->Get(kSlices, "", PoolSliceName("gpu.tessera.dev", "node-a", 0));
  ASSERT_TRUE(counters.ok());
  EXPECT_EQ((*counters)["spec"]["sharedCounters"].size(), 2u) << counters->dump();

  ClaimRef ref = Claim("slice", placement);
  auto prepared = kubelet->Prepare({ref});
  ASSERT_EQ(prepared[ref.uid].error, "") << plugin_->Log();
  ASSERT_EQ(prepared[ref.uid].devices.size(), 1u);
  EXPECT_EQ(prepared[ref.uid].devices[0].device_name, placement);
  EXPECT_EQ(CreatesOn(), "1") << nvml_.Log();
  EXPECT_NE(nvml_.Log().find("nvmlGpuInstanceCreateComputeInstance " + kGpu), std::string::npos);
  const std::string gi = InstanceAt(4);
  ASSERT_NE(gi, "") << nvml_.State();
  // The claim's CDI device: the parent's node and the instance's two capability nodes, which
  // exist on the host (made as nvidia-modprobe -f makes them).
  auto spec = ReadBoundedFile(ClaimSpecPath(CdiDir(), ref.uid), 1 << 20);
  ASSERT_TRUE(spec.ok());
  Json cdi = Json::parse(*spec);
  std::vector<std::string> nodes;
  for (const auto& node : cdi["devices"][0]["containerEdits"]["deviceNodes"]) {
    nodes.push_back(node["path"]);
    std::string host = node.value("hostPath", node["path"].get<std::string>());
    struct stat st;
    EXPECT_EQ(::stat(host.c_str(), &st), 0) << host;
  }
  ASSERT_EQ(nodes.size(), 3u) << *spec;
  EXPECT_EQ(nodes[0].rfind("/dev/nvidia-caps/nvidia-cap", 0), 0u);
  EXPECT_EQ(nodes[1].rfind("/dev/nvidia-caps/nvidia-cap", 0), 0u);
  EXPECT_NE(nodes[0], nodes[1]);
  EXPECT_EQ(nodes[2], "/dev/nvidia1");

  // kubelet retries: the same instance, nothing made twice.
  ASSERT_EQ(kubelet->Prepare({ref})[ref.uid].error, "");
  EXPECT_EQ(CreatesOn(), "1");

  // A restart between prepare and unprepare: the instance is this plugin's, not someone else's.
  Restart(kubelet);
  ASSERT_TRUE(WaitUntil([&] { return Offered(placement); })) << plugin_->Log();
  EXPECT_FALSE(Offered(kWhole + "-mig-" + gi + "-0"));
  ASSERT_EQ(kubelet->Prepare({ref})[ref.uid].error, "");
  EXPECT_EQ(CreatesOn(), "1");
  ASSERT_EQ(kubelet->Unprepare({ref})[ref.uid], "") << plugin_->Log();
  EXPECT_EQ(InstanceAt(4), "");
  EXPECT_EQ(Count(nvml_.Log(), "nvmlGpuInstanceDestroy " + kGpu + " gi=" + gi + " -> 0"), 1u)
      << nvml_.Log();
  EXPECT_FALSE(SpecExists(ref));
  // Nothing of the other GPU was touched.
  EXPECT_EQ(Count(nvml_.Log(), "0000:18:00.0"), 0u) << nvml_.Log();
  // A second unprepare finds nothing to destroy.
  EXPECT_EQ(kubelet->Unprepare({ref})[ref.uid], "");
  EXPECT_EQ(Count(nvml_.Log(), "nvmlGpuInstanceDestroy"), 1u);
}

TEST_F(DraMigDemand, AWholeGpuClaimBlocksPartitioningAndABusyInstanceStays) {
  StartByDemand();
  auto kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
  Register(*kubelet);
  const std::string placement = kWhole + "-mig-1g-10gb-0";
  ClaimRef whole = Claim("whole", kWhole);
  ASSERT_EQ(kubelet->Prepare({whole})[whole.uid].error, "") << plugin_->Log();
  ClaimRef slice = Claim("slice", placement);
  std::string refused = kubelet->Prepare({slice})[slice.uid].error;
  EXPECT_NE(refused.find("prepared whole"), std::string::npos) << refused;
  EXPECT_EQ(CreatesOn(), "0");
  ASSERT_EQ(kubelet->Unprepare({whole})[whole.uid], "");
  ASSERT_EQ(kubelet->Prepare({slice})[slice.uid].error, "") << plugin_->Log();
  EXPECT_EQ(CreatesOn(), "1");
  ASSERT_NE(InstanceAt(0), "");

  // A process runs on the instance (the stand-in reads its state when NVML starts).
  kubelet.reset();
  EXPECT_EQ(plugin_->Stop(), 0);
  std::string ci = StateLine(nvml_.State(), "ci " + kGpu + " gi=" + InstanceAt(0) + " ");
  ASSERT_NE(ci, "") << nvml_.State();
  nvml_.Replace(ci, ci + " processes=1");
  StartByDemand();
  kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
  Register(*kubelet);
  std::string busy = kubelet->Unprepare({slice})[slice.uid];
  EXPECT_NE(busy.find("in use"), std::string::npos) << busy;
  EXPECT_NE(busy.find("kubelet retries"), std::string::npos) << busy;
  EXPECT_NE(nvml_.Log().find("nvmlComputeInstanceDestroy " + kGpu), std::string::npos);
  EXPECT_NE(InstanceAt(0), "");
  EXPECT_TRUE(SpecExists(slice));

  // The process ends; kubelet's retry destroys it.
  kubelet.reset();
  EXPECT_EQ(plugin_->Stop(), 0);
  nvml_.Replace(ci + " processes=1", ci);
  StartByDemand();
  kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
  Register(*kubelet);
  ASSERT_EQ(kubelet->Unprepare({slice})[slice.uid], "") << plugin_->Log();
  EXPECT_EQ(InstanceAt(0), "");
  EXPECT_FALSE(SpecExists(slice));
}

TEST_F(DraMigDemand, AnInstanceMadeBeforeAPrepareWasCutShortIsAdoptedAfterARestart) {
  // After the create, the MIG device's lookup fails and so does the undo's destroy: the instance
  // exists and the claim's file holds only its intent, as when the plugin is killed there.
  nvml_.Append("fail nvmlDeviceGetUUID 999");
  nvml_.Append("fail nvmlComputeInstanceDestroy 999");
  StartByDemand();
  auto kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
  Register(*kubelet);
  const std::string placement = kWhole + "-mig-3g-40gb-4";
  ASSERT_TRUE(WaitUntil([&] { return Offered(placement); })) << plugin_->Log();
  ClaimRef ref = Claim("slice", placement);
  std::string failed = kubelet->Prepare({ref})[ref.uid].error;
  EXPECT_NE(failed.find("999"), std::string::npos) << failed;
  EXPECT_EQ(CreatesOn(), "1") << nvml_.Log();
  const std::string gi = InstanceAt(4);
  ASSERT_NE(gi, "") << nvml_.State();
  EXPECT_FALSE(SpecExists(ref));
  auto file = ReadBoundedFile(PreparedClaimPath(PluginDir() + "/prepared", ref.uid), 1 << 20);
  ASSERT_TRUE(file.ok());
  EXPECT_NE(file->find("\"pending\": true"), std::string::npos) << *file;
  EXPECT_NE(file->find("\"migIntent\""), std::string::npos) << *file;

  // A restart with NVML answering again: the instance is the claim's, not someone else's.
  kubelet.reset();
  EXPECT_EQ(plugin_->Stop(), 0);
  nvml_.Replace("fail nvmlDeviceGetUUID 999\n", "");
  nvml_.Replace("fail nvmlComputeInstanceDestroy 999\n", "");
  StartByDemand();
  kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
  Register(*kubelet);
  ASSERT_TRUE(WaitUntil([&] { return Offered(placement); })) << plugin_->Log();
  EXPECT_FALSE(Offered(kWhole + "-mig-" + gi + "-0"));
  EXPECT_NE(plugin_->Log().find("adopted"), std::string::npos) << plugin_->Log();
  auto prepared = kubelet->Prepare({ref});
  ASSERT_EQ(prepared[ref.uid].error, "") << plugin_->Log();
  ASSERT_EQ(prepared[ref.uid].devices.size(), 1u);
  EXPECT_EQ(CreatesOn(), "1") << nvml_.Log();  // adopted, not made twice
  EXPECT_EQ(InstanceAt(4), gi);
  EXPECT_TRUE(SpecExists(ref));
  ASSERT_EQ(kubelet->Unprepare({ref})[ref.uid], "") << plugin_->Log();
  EXPECT_EQ(InstanceAt(4), "");
  EXPECT_EQ(Count(nvml_.Log(), "nvmlGpuInstanceDestroy " + kGpu + " gi=" + gi + " -> 0"), 1u)
      << nvml_.Log();
  EXPECT_FALSE(SpecExists(ref));
}

TEST_F(DraMigDemand, AClaimCutShortIsUnpreparedByDestroyingTheInstanceAtItsPlace) {
  nvml_.Append("fail nvmlDeviceGetUUID 999");
  nvml_.Append("fail nvmlComputeInstanceDestroy 999");
  StartByDemand();
  auto kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
  Register(*kubelet);
  const std::string placement = kWhole + "-mig-1g-10gb-6";
  ASSERT_TRUE(WaitUntil([&] { return Offered(placement); })) << plugin_->Log();
  ClaimRef ref = Claim("slice", placement);
  EXPECT_NE(kubelet->Prepare({ref})[ref.uid].error, "");
  const std::string gi = InstanceAt(6);
  ASSERT_NE(gi, "") << nvml_.State();
  kubelet.reset();
  EXPECT_EQ(plugin_->Stop(), 0);
  nvml_.Replace("fail nvmlDeviceGetUUID 999\n", "");
  nvml_.Replace("fail nvmlComputeInstanceDestroy 999\n", "");
  StartByDemand();
  kubelet = std::make_unique<DraKubelet>(Registry(), "gpu.tessera.dev");
  Register(*kubelet);
  // The pod went away: kubelet unprepares the claim it never got prepared.
  ASSERT_EQ(kubelet->Unprepare({ref})[ref.uid], "") << plugin_->Log();
  EXPECT_EQ(InstanceAt(6), "");
  EXPECT_EQ(Count(nvml_.Log(), "nvmlGpuInstanceDestroy " + kGpu + " gi=" + gi + " -> 0"), 1u)
      << nvml_.Log();
  EXPECT_FALSE(std::filesystem::exists(PreparedClaimPath(PluginDir() + "/prepared", ref.uid)));
  EXPECT_EQ(CreatesOn(), "1");
}

}  // namespace
}  // namespace tessera::dra::e2e
