// GPU faults with DRA, end to end: the real tessera-dra-plugin watching the stand-in NVML's Xid
// events, the kubelet emulator (DRAPlugin and DRAResourceHealth), and the scripted API server
// holding the ResourceSlice. Xid 79 taints the device NoExecute and reports it unhealthy; once
// no claim holds the GPU the stand-in reset runs, the GPU is verified, and the taint goes; Xid 13
// taints nothing. The tainted slice validates against the Kubernetes API schema.
#include <csignal>
#include <cstdlib>

#include "backends/kubernetes/node_gpus.h"
#include "dra/fault_state.h"
#include "dra/plugin_fixture.h"
#include "support/fake_nvml_state.h"

namespace tessera::dra {
namespace {

using namespace e2e;

class DraFaults : public DraPlugin {
 protected:
  // The stand-in `nvidia-smi -r` resets the stand-in NVML's GPU, refused while a process holds
  // the GPU or another process holds NVML, as the real one is.
  void StartFaultPlugin(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--nvml", FAKE_NVML, "--gpu-reset-command",
                                     std::string(FAKE_NVIDIA_SMI) + " -r -i {pci}"};
    args.insert(args.end(), extra.begin(), extra.end());
    StartPlugin("", args);
  }
  // The slice's taints of device `i` (null when it has none or is not published).
  Json TaintsOf(size_t i) {
    Json slice = Slice();
    if (!slice.is_object()) return nullptr;
    for (const auto& device : slice["spec"]["devices"])
      if (device["name"] == node_.devices[i].name)
        return device.contains("taints") ? device["taints"] : Json(nullptr);
    return nullptr;
  }

  testing::FakeNvmlState nvml_{"hgx-h100-dgx"};
  testing::FakeNvmlFaults faults_;
};

// The published slice against kubernetes-models' resource.k8s.io/v1 schema
// (tests/tools/k8s-schema/validate.mjs): "" when valid, else the validator's answer.
std::string SchemaProblem(const Json& slice, const std::string& dir) {
  std::string path = dir + "/slice.json";
  if (!WriteFileAtomically(path, slice.dump()).ok()) return "cannot write " + path;
  std::string command = std::string("node ") + TESSERA_SOURCE_DIR +
                        "/tests/tools/k8s-schema/validate.mjs " + path + " > " + path + ".out 2>&1";
  int status = std::system(command.c_str());
  auto out = ReadWholeFile(path + ".out");
  return status == 0 ? "" : (out ? *out : "validator failed");
}

TEST_F(DraFaults, Xid79TaintsTheDeviceUntilTheGpuIsResetAndVerifiedXid13TaintsNothing) {
  StartFaultPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  testing::DraHealthWatch watch(kubelet.endpoint());
  const std::string gpu3 = node_.devices[3].name;
  auto health_of = [&](const std::string& device) {
    auto latest = watch.Latest();
    return latest.count(device) ? latest[device].health : -1;
  };
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8 && health_of(gpu3) == 1; }))
      << plugin_->Log();
  // A Pod's claim holds GPU 3: the GPU is not reset under it.
  ClaimRef held = CreateClaim("held", {3});
  ASSERT_EQ(kubelet.Prepare({held})[held.uid].error, "") << plugin_->Log();

  const std::string pci2 = node_.devices[2].pci_address, pci3 = node_.devices[3].pci_address;
  faults_.AddEvent(pci2 + " 13");
  faults_.AddEvent(pci3 + " 79");
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(3).is_array(); })) << plugin_->Log();
  Json taint = TaintsOf(3)[0];
  EXPECT_EQ(taint["key"], "gpu.tessera.dev/fault");
  EXPECT_EQ(taint["value"], "xid-79");
  EXPECT_EQ(taint["effect"], "NoExecute");
  EXPECT_TRUE(taint["timeAdded"].is_string());
  EXPECT_EQ(SliceDevices(), 8u);  // still published
  // The log names the claim whose Pod the taint evicts.
  EXPECT_NE(plugin_->Log().find("claims holding it: " + held.uid), std::string::npos)
      << plugin_->Log();
  ASSERT_TRUE(WaitUntil([&] { return health_of(gpu3) == 2; })) << plugin_->Log();
  // Xid 13 came first: an application's fault, no taint and still healthy.
  EXPECT_TRUE(TaintsOf(2).is_null());
  EXPECT_EQ(health_of(node_.devices[2].name), 1);
  EXPECT_EQ(SchemaProblem(Slice(), dir_.path()), "");
  // No new claim is prepared on the faulted GPU; the held one answers as before.
  ClaimRef late = CreateClaim("late", {3});
  EXPECT_NE(kubelet.Prepare({late})[late.uid].error.find("xid-79"), std::string::npos);
  EXPECT_EQ(kubelet.Prepare({held})[held.uid].error, "");
  EXPECT_EQ(faults_.ResetLog(), "");

  // The Pod is gone but a process still runs on the GPU: no reset yet. Then it ends: the GPU is
  // reset (with NVML let go, or the stand-in refuses), verified and untainted.
  faults_.SetFaults(pci3 + " processes=1\n");
  EXPECT_EQ(kubelet.Unprepare({held})[held.uid], "");
  std::this_thread::sleep_for(std::chrono::seconds(2));  // recovery passes run every second
  EXPECT_EQ(faults_.ResetLog(), "");
  EXPECT_TRUE(TaintsOf(3).is_array());
  faults_.SetFaults(pci3 + " processes=0\n");
  ASSERT_TRUE(WaitUntil([&] { return faults_.ResetLog() != ""; })) << plugin_->Log();
  EXPECT_EQ(faults_.ResetLog(), "reset " + pci3 + " " + pci3 + " -> 0\n") << plugin_->Log();
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(3).is_null() && SliceDevices() == 8; }))
      << plugin_->Log();
  ASSERT_TRUE(WaitUntil([&] { return health_of(gpu3) == 1; })) << plugin_->Log();
  EXPECT_EQ(kubelet.Prepare({late})[late.uid].error, "");
  EXPECT_EQ(SchemaProblem(Slice(), dir_.path()), "");
}

TEST_F(DraFaults, WithoutRecoveryTheTaintStays) {
  StartFaultPlugin({"--recover=false"});
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  faults_.AddEvent(node_.devices[5].pci_address + " 79");
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(5).is_array(); })) << plugin_->Log();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // a recovery pass would have run
  EXPECT_TRUE(TaintsOf(5).is_array());
  EXPECT_NE(plugin_->Log().find("recovery off"), std::string::npos) << plugin_->Log();
  EXPECT_EQ(faults_.ResetLog(), "");
}

// The node agent's view of this node's GPUs, as it publishes it on the Node: every GPU as the
// fixture's node has it, `health` by PCI address for those that differ from a healthy GPU.
Json NodeWithHealth(const NodeDevices& node,
                    const std::map<std::string, health::GpuHealth>& health) {
  k8s::NodeGpus gpus;
  gpus.node = "node-a";
  for (const auto& device : node.devices) {
    k8s::NodeGpu gpu;
    gpu.pci_address = device.pci_address;
    gpu.model = "H100";
    if (auto it = health.find(device.pci_address); it != health.end()) gpu.health = it->second;
    gpus.gpus.push_back(std::move(gpu));
  }
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", "node-a"},
            {"annotations", {{k8s::kNodeGpusAnnotation, k8s::NodeGpusAnnotation(gpus)}}}}}};
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// With --recover=false the node agent recovers the GPUs: the taint goes once it publishes the
// GPU healthy again (since after the fault), and a fault it publishes first taints the GPU here.
TEST_F(DraFaults, WithoutRecoveryTheTaintFollowsTheNodeAgent) {
  const k8s::Resource nodes{"/api/v1", "nodes", false};
  const std::string pci5 = node_.devices[5].pci_address, pci6 = node_.devices[6].pci_address;
  ASSERT_TRUE(client_->Create(nodes, "", NodeWithHealth(node_, {})).ok());
  auto publish = [&](const std::map<std::string, health::GpuHealth>& health) {
    auto live = client_->Get(nodes, "", "node-a");
    ASSERT_TRUE(live.ok());
    Json node = NodeWithHealth(node_, health);
    node["metadata"]["resourceVersion"] = (*live)["metadata"]["resourceVersion"];
    ASSERT_TRUE(client_->Replace(nodes, "", "node-a", node).ok());
  };
  StartFaultPlugin({"--recover=false"});
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  faults_.AddEvent(pci5 + " 79");
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(5).is_array(); })) << plugin_->Log();
  // The Node still says healthy, but since before the fault: the taint stays.
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the Node is read every second
  EXPECT_TRUE(TaintsOf(5).is_array());

  // The node agent drains the GPU: still tainted. Then it is reset and verified: untainted.
  health::GpuHealth draining;
  draining.step = health::RecoveryStep::kDraining;
  draining.reason = "Xid 79 (GPU has fallen off the bus)";
  draining.faulted_ms = draining.step_since_ms = UnixMs();
  draining.history.push_back({UnixMs(), "xid", 79, "gpu", "stop-gpu", draining.reason});
  publish({{pci5, draining}});
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_TRUE(TaintsOf(5).is_array());
  health::GpuHealth healthy;
  healthy.step_since_ms = UnixMs() + 1;
  healthy.history = draining.history;
  publish({{pci5, healthy}});
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(5).is_null() && SliceDevices() == 8; }))
      << plugin_->Log();
  // The taint's removal is durable: the fault state file says GPU 5 is in service.
  auto state = ReadFaultStateFile(PluginDir() + "/gpu-faults.json");
  ASSERT_TRUE(state.ok()) << state.error().message;
  EXPECT_TRUE(!state->count(pci5) || (*state)[pci5].health.in_service());

  // A fault the node agent saw first (Xid 48 on GPU 6) taints GPU 6 here as well.
  health::GpuHealth out = draining;
  out.reason = "Xid 48 (double-bit ECC error)";
  out.history = {{UnixMs(), "xid", 48, "gpu", "stop-gpu", out.reason}};
  publish({{pci5, healthy}, {pci6, out}});
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(6).is_array(); })) << plugin_->Log();
  EXPECT_EQ(TaintsOf(6)[0]["value"], "xid-48");
  EXPECT_EQ(TaintsOf(6)[0]["effect"], "NoExecute");
  EXPECT_TRUE(TaintsOf(5).is_null());
  EXPECT_EQ(faults_.ResetLog(), "");  // nothing reset here
}

// A restart forgets no fault: the GPU's record and taint are in <plugin-dir>/gpu-faults.json,
// so the restarted plugin publishes the same taint (same timeAdded) at once and resumes the
// recovery where it stopped.
TEST_F(DraFaults, AKilledPluginRestartsWithItsFaultsAndGoesOnRecovering) {
  StartFaultPlugin();
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  const std::string pci4 = node_.devices[4].pci_address;
  faults_.SetFaults(pci4 + " processes=1\n");  // keeps it draining across the restart
  faults_.AddEvent(pci4 + " 79");
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(4).is_array(); })) << plugin_->Log();
  Json before = TaintsOf(4)[0];
  EXPECT_TRUE(fs::exists(PluginDir() + "/gpu-faults.json"));

  plugin_->Signal(SIGKILL);
  plugin_.reset();
  // The slice goes too, so what is published next is the new plugin's own.
  ASSERT_TRUE(client_->Delete(kSlices, "", SliceName("gpu.tessera.dev", "node-a")).ok());
  // A new NVML event set starts at the events file's first line: no Xid 79 comes again.
  ASSERT_TRUE(WriteFileAtomically(faults_.events_path(), "").ok());
  StartFaultPlugin();
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  ASSERT_TRUE(TaintsOf(4).is_array()) << plugin_->Log();
  EXPECT_EQ(TaintsOf(4)[0], before);
  EXPECT_NE(plugin_->Log().find("GPU " + pci4 + ": restored draining"), std::string::npos)
      << plugin_->Log();
  EXPECT_EQ(faults_.ResetLog(), "");

  faults_.SetFaults(pci4 + " processes=0\n");
  ASSERT_TRUE(WaitUntil([&] { return faults_.ResetLog() != ""; })) << plugin_->Log();
  EXPECT_EQ(faults_.ResetLog(), "reset " + pci4 + " " + pci4 + " -> 0\n") << plugin_->Log();
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(4).is_null() && SliceDevices() == 8; }))
      << plugin_->Log();
  auto saved = ReadFaultStateFile(PluginDir() + "/gpu-faults.json");
  ASSERT_TRUE(saved.ok());
  EXPECT_TRUE(saved->at(pci4).health.in_service());
}

// NVML failing to start (as a GPU off the bus can make it) watches nothing: the restored taint
// stays all the same.
TEST_F(DraFaults, ARestoredTaintStaysWhenNothingCanWatch) {
  StartFaultPlugin();
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  const std::string pci6 = node_.devices[6].pci_address;
  faults_.SetFaults(pci6 + " processes=1\n");
  faults_.AddEvent(pci6 + " 79");
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(6).is_array(); })) << plugin_->Log();
  plugin_.reset();
  ASSERT_TRUE(client_->Delete(kSlices, "", SliceName("gpu.tessera.dev", "node-a")).ok());
  StartPlugin("", {"--nvml", ""});  // no NVML: nothing watches these GPUs
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  EXPECT_TRUE(TaintsOf(6).is_array()) << plugin_->Log();
  EXPECT_NE(plugin_->Log().find("restored faulted GPU(s) keep their taint"), std::string::npos)
      << plugin_->Log();
}

// A fault state that cannot be read stops the start, naming the file: a plugin that went on
// would publish a faulted GPU untainted.
TEST_F(DraFaults, AnUnreadableFaultStateFailsTheStart) {
  fs::create_directories(PluginDir());
  ASSERT_TRUE(WriteFileAtomically(PluginDir() + "/gpu-faults.json",
                                  R"({"version":1,"gpus":{"0000:9d:00.0":{"step":"rebooting"}}})")
                  .ok());
  StartFaultPlugin();
  ASSERT_TRUE(WaitUntil([&] {
    return plugin_->Log().find("gpu-faults.json") != std::string::npos;
  })) << plugin_->Log();
  EXPECT_NE(plugin_->Log().find("recovery step"), std::string::npos) << plugin_->Log();
  EXPECT_NE(plugin_->Stop(), 0) << plugin_->Log();  // it had ended on its own
  EXPECT_EQ(SliceDevices(), 0u);
}

// A MIG-enabled GPU published as its slices: a contained error (Xid 94) of one GPU instance
// taints that instance's device only; the reset waits for the other instances' claims.
class DraMigFaults : public DraFaults {
 protected:
  void SetUp() override {
    DraFaults::SetUp();
    root_ = testing::MaterializeHost("h100-mig-mixed");
    inventory::ReadOptions read;
    read.root = root_;
    read.nvml_library = FAKE_NVML;
    auto inv = inventory::ReadInventory(read);
    ASSERT_TRUE(inv.ok());
    auto node = DescribeNode(*inv, {});
    ASSERT_TRUE(node.ok());
    node_ = *node;
    ASSERT_EQ(node_.devices.size(), 4u);  // three slices of 0000:18:00.0, one whole GPU
  }
  size_t Index(const std::string& name) const {
    for (size_t i = 0; i < node_.devices.size(); ++i)
      if (node_.devices[i].name == name) return i;
    return 999;
  }
  testing::FakeNvmlState mig_nvml_{"h100-mig-mixed"};
};

TEST_F(DraMigFaults, AContainedErrorTaintsOnlyItsInstancesSlice) {
  StartFaultPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 4; })) << plugin_->Log();
  const size_t gi1 = Index("gpu-0000-18-00-0-mig-1-0"), gi5 = Index("gpu-0000-18-00-0-mig-5-0");
  ASSERT_LT(gi5, 4u);
  // Another instance's Pod holds the GPU: it is not reset under that Pod.
  ClaimRef other = CreateClaim("other", {gi1});
  ASSERT_EQ(kubelet.Prepare({other})[other.uid].error, "") << plugin_->Log();
  faults_.AddEvent("0000:18:00.0 94 gi=5 ci=0");
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(gi5).is_array(); })) << plugin_->Log();
  EXPECT_EQ(TaintsOf(gi5)[0]["effect"], "NoExecute");
  EXPECT_EQ(TaintsOf(gi5)[0]["value"], "xid-94");
  for (size_t i = 0; i < node_.devices.size(); ++i) {
    EXPECT_EQ(TaintsOf(i).is_null(), i != gi5) << node_.devices[i].name;
  }
  EXPECT_EQ(SchemaProblem(Slice(), dir_.path()), "");
  EXPECT_EQ(faults_.ResetLog(), "");
  EXPECT_EQ(kubelet.Unprepare({other})[other.uid], "");
  ASSERT_TRUE(WaitUntil([&] { return faults_.ResetLog() != ""; })) << plugin_->Log();
  ASSERT_TRUE(WaitUntil([&] { return TaintsOf(gi5).is_null() && SliceDevices() == 4; }))
      << plugin_->Log();
}

}  // namespace
}  // namespace tessera::dra
