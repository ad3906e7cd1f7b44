// The Hyper-V GPU chain's pure logic: MMIO sizing, choosing the GPU, what the plan holds, and the
// preflight against each fixture host and against single facts changed.
#include "windows/hyperv.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "windows/fixture.h"

namespace tessera::windows {
namespace {

using testing::LoadFixture;

constexpr uint64_t kMiB = 1ull << 20;

HyperVGpuPlan PlanFor(const Snapshot& s, const std::string& gpu,
                      const HyperVGpuOptions& options = {}) {
  auto plan = PlanHyperVGpu(s, gpu, options);
  EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
  return plan.ok() ? *plan : HyperVGpuPlan{};
}

// status per check ID, in order
std::vector<std::pair<std::string, CheckStatus>> Statuses(const HyperVGpuPreflight& p) {
  std::vector<std::pair<std::string, CheckStatus>> out;
  for (const PreflightCheck& c : p.checks)
    out.emplace_back(c.id, c.status);
  return out;
}

std::vector<std::string> Failing(const HyperVGpuPreflight& p) {
  std::vector<std::string> out;
  for (const PreflightCheck& c : p.checks) {
    if (c.status == CheckStatus::kFail) out.push_back(c.id);
  }
  return out;
}

HyperVGpuPreflight PreflightOf(const Snapshot& s, const std::string& gpu = "1",
                               const HyperVGpuOptions& options = {}) {
  HyperVGpuPlan plan = PlanFor(s, gpu, options);
  return CheckHyperVGpu(s, plan, *ParseImageReference(plan.image));
}

TEST(HyperVMmio, SizesTheGapsFromTheBarsPlusMicrosoftsDefaultBuffers) {
  // A Tesla T4: a 16 MiB 32-bit BAR below 4 GiB, 256 MiB and 32 MiB 64-bit BARs above.
  std::vector<MemoryRange> t4 = {
      {0xfa000000, 0xfaffffff}, {0x38bf0000000, 0x38bffffffff}, {0x38c00000000, 0x38c01ffffff}};
  auto plan = PlanMmio(t4, 4096);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->below_4g_bytes, 16 * kMiB);
  EXPECT_EQ(plan->above_4g_bytes, 288 * kMiB);
  EXPECT_EQ(plan->low_gap_mb, 128u + 16);
  EXPECT_EQ(plan->high_gap_mb, 512u + 288);
  // 4096 MB of memory: 3952 MB below the 144 MB low gap, 144 MB above 4 GiB, so memory ends at
  // 4240 MB; the high gap starts at the next multiple of the largest high BAR (256 MB).
  EXPECT_EQ(plan->high_base_mb, 4352u);
}

TEST(HyperVMmio, AlignsTheHighGapToTheLargestBarAndRoundsPartialMegabytesUp) {
  // A 16 GiB BAR: the gap starts at a 16 GiB boundary above the VM's memory.
  auto big = PlanMmio({{0x38800000000, 0x38bffffffff}, {0xf9000000, 0xf9000fff}}, 20000);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->low_gap_mb, 129u);  // 4 KiB below 4 GiB still takes a whole MB
  EXPECT_EQ(big->high_gap_mb, 512u + 16384);
  EXPECT_EQ(big->high_base_mb, 32768u);  // memory ends at 4096 + 20000 - 3967 = 20129 MB
  // Memory that fits below the low gap leaves the high gap free to start at 4 GiB.
  auto small = PlanMmio({{0x100000000, 0x10fffffff}}, 1024);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->low_gap_mb, 128u);
  EXPECT_EQ(small->high_base_mb, 4096u);
}

TEST(HyperVMmio, RefusesWhatCannotBeSized) {
  EXPECT_FALSE(PlanMmio({}, 4096).ok());
  EXPECT_FALSE(PlanMmio({{0x1000, 0xfff}}, 4096).ok());
  EXPECT_FALSE(PlanMmio({{0, UINT64_MAX}}, 4096).ok());
  EXPECT_FALSE(PlanMmio({{0x1000, 0x1fff}}, 0).ok());
  // Below 4 GiB there is room for at most 4 GiB of gap.
  EXPECT_FALSE(PlanMmio({{0, 0xfeffffff}}, 4096).ok());
}

TEST(HyperVSelect, ByIndexOrAnyLocationPath) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  EXPECT_EQ(*FindPciAdapter(s, "1"), 1u);
  EXPECT_EQ(*FindPciAdapter(s, "PCIROOT(0)#PCI(0300)#PCI(0000)"), 1u);
  EXPECT_EQ(*FindPciAdapter(s, "ACPI(_SB_)#ACPI(PCI0)#ACPI(RP03)#PCI(0000)"), 1u);
  EXPECT_EQ(FindPciAdapter(s, "2").error().category, ErrorCategory::kNotFound);
  EXPECT_EQ(FindPciAdapter(s, "PCIROOT(9)").error().category, ErrorCategory::kNotFound);
  // The dismounted GPU is the only candidate; the ASPEED display is a GPU class too but mounted.
  EXPECT_EQ(*SoleGpuCandidate(s), 1u);
  Snapshot v1 = LoadFixture("ws2022-aws-4xt4.json");
  EXPECT_EQ(FindPciAdapter(v1, "0").error().category, ErrorCategory::kFailedPrecondition);
}

TEST(HyperVPlan, DismountedGpuNeedsNoStepsAndKeepsItsInstanceId) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  HyperVGpuPlan plan = PlanFor(s, "1");
  EXPECT_EQ(plan.assigned_instance_id, s.hyperv_facts->pci_adapters[1].instance_id);
  EXPECT_EQ(plan.device_string,
            "vpci-instance-id://PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018");
  EXPECT_TRUE(plan.dismount_steps.empty());
  EXPECT_EQ(plan.give_back_steps,
            (std::vector<std::string>{
                "Mount-VMHostAssignableDevice -LocationPath 'PCIROOT(0)#PCI(0300)#PCI(0000)'",
                "Enable-PnpDevice -InstanceId "
                "'PCI\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018' "
                "-Confirm:$false"}));
  EXPECT_EQ(plan.image, "mcr.microsoft.com/windows/servercore:ltsc2022");
  EXPECT_EQ(plan.device_util_host_path, "C:\\Program Files\\containerd\\bin\\device-util.exe");
  EXPECT_EQ(plan.pod_annotations,
            (std::map<std::string, std::string>{
                {kAnnotationFullyPhysicallyBacked, "true"},
                {kAnnotationMemorySizeInMb, "4096"},
                {kAnnotationLowMmioGapInMb, "144"},
                {kAnnotationHighMmioBaseInMb, "4352"},
                {kAnnotationHighMmioGapInMb, "800"},
                {kAnnotationKernelDrivers,
                 "C:\\Windows\\System32\\DriverStore\\FileRepository\\nvgridsw.inf_amd64_"
                 "3b8b6f4e2c1d0a97"}}));
}

TEST(HyperVPlan, MountedGpuGetsItsPcipIdPredictedAndTheDismountSteps) {
  Snapshot s = LoadFixture("ws2022-t4-not-dismounted.json");
  HyperVGpuPlan plan = PlanFor(s, "PCIROOT(0)#PCI(0300)#PCI(0000)");
  EXPECT_EQ(plan.assigned_instance_id,
            "PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018");
  ASSERT_EQ(plan.dismount_steps.size(), 3u);
  EXPECT_EQ(plan.dismount_steps[0],
            "Disable-PnpDevice -InstanceId "
            "'PCI\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018' -Confirm:$false");
  EXPECT_EQ(plan.dismount_steps[2],
            "Dismount-VMHostAssignableDevice -Force -LocationPath "
            "'PCIROOT(0)#PCI(0300)#PCI(0000)'");
}

TEST(HyperVPlan, OptionsOverrideTheSnapshotAndBadOnesAreRefused) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  HyperVGpuOptions options;
  options.kernel_drivers = "D:\\drivers\\t4";
  options.memory_mb = 8192;
  options.image = "mcr.microsoft.com/windows/nanoserver:ltsc2022";
  HyperVGpuPlan plan = PlanFor(s, "1", options);
  EXPECT_EQ(plan.pod_annotations[kAnnotationKernelDrivers], "D:\\drivers\\t4");
  EXPECT_EQ(plan.pod_annotations[kAnnotationMemorySizeInMb], "8192");
  EXPECT_EQ(plan.image, "mcr.microsoft.com/windows/nanoserver:ltsc2022");
  options.memory_mb = 100;
  EXPECT_EQ(PlanHyperVGpu(s, "1", options).error().category, ErrorCategory::kInvalidArgument);
  options.memory_mb = 4096;
  options.image = "example.com/app:latest";
  EXPECT_EQ(PlanHyperVGpu(s, "1", options).error().category, ErrorCategory::kInvalidArgument);
  // A location path that would not survive PowerShell or the device-string rules is refused.
  s.hyperv_facts->pci_adapters[1].location_paths[0] = "PCIROOT(0)#PCI(0300)';calc;'";
  EXPECT_FALSE(PlanHyperVGpu(s, "1", {}).ok());
  // A last path element hcsshim would read as a virtual function index.
  s = LoadFixture("ws2022-dda-t4.json");
  s.hyperv_facts->pci_adapters[1].instance_id = "PCIP\\VEN_10DE&DEV_1EB8\\0";
  EXPECT_EQ(PlanHyperVGpu(s, "1", {}).error().category, ErrorCategory::kFailedPrecondition);
}

TEST(HyperVPreflight, EveryCheckPassesOnTheDismountedT4) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  HyperVGpuPreflight p = PreflightOf(s);
  using S = CheckStatus;
  EXPECT_EQ(Statuses(p), (std::vector<std::pair<std::string, CheckStatus>>{
                             {"host.build", S::kPass},
                             {"host.hyperv", S::kPass},
                             {"host.containers", S::kPass},
                             {"host.iommu", S::kPass},
                             {"device.type", S::kPass},
                             {"device.reserved_memory", S::kPass},
                             {"device.acs", S::kPass},
                             {"device.interrupts", S::kPass},
                             {"device.mmio", S::kPass},
                             {"device.dismounted", S::kPass},
                             {"driver.kernel_drivers", S::kPass},
                             {"containerd.version", S::kPass},
                             {"containerd.runtime", S::kPass},
                             {"containerd.pod_annotations", S::kPass},
                             {"hcsshim.version", S::kPass},
                             {"hcsshim.device_util", S::kPass},
                             {"image.build", S::kPass}}));
  EXPECT_TRUE(p.Passes());
  ASSERT_EQ(p.notes.size(), 3u);  // dismounted already: no note about taking it from the host
  EXPECT_NE(p.notes[0].find("does not support"), std::string::npos);
  EXPECT_NE(p.notes[1].find("user-mode driver"), std::string::npos);
}

TEST(HyperVPreflight, EachFailingFixtureFailsExactlyItsOwnChecks) {
  EXPECT_EQ(Failing(PreflightOf(LoadFixture("ws2022-dda-rmrr.json"))),
            (std::vector<std::string>{"device.reserved_memory"}));
  EXPECT_EQ(Failing(PreflightOf(LoadFixture("ws2022-no-acs.json"), "0")),
            (std::vector<std::string>{"host.iommu", "device.acs"}));
  EXPECT_EQ(Failing(PreflightOf(LoadFixture("ws2019-17763-dda.json"))),
            (std::vector<std::string>{"host.build"}));
  HyperVGpuPreflight mounted = PreflightOf(LoadFixture("ws2022-t4-not-dismounted.json"));
  EXPECT_TRUE(mounted.Passes());
  EXPECT_EQ(mounted.notes.size(), 4u);  // the note that the host loses the GPU
}

TEST(HyperVPreflight, TheAllowListDecidesWhichAnnotationsReachHcsshim) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  auto& runtime = s.hyperv_facts->containerd->runtimes[0];
  runtime.pod_annotations = {"io.microsoft.virtualmachine.computetopology.*"};
  HyperVGpuPreflight p = PreflightOf(s);
  EXPECT_EQ(Failing(p), (std::vector<std::string>{"containerd.pod_annotations"}));
  const PreflightCheck& c = p.checks[13];
  EXPECT_EQ(c.id, "containerd.pod_annotations");
  EXPECT_NE(c.detail.find("io.microsoft.virtualmachine.fullyphysicallybacked"), std::string::npos);
  EXPECT_NE(c.detail.find("io.microsoft.virtualmachine.kerneldrivers"), std::string::npos);
  // '*' does not cross '/' (Go's path.Match), but the keys have none: patterns match as
  // containerd's.
  runtime.pod_annotations = {"io.microsoft.*"};
  EXPECT_TRUE(PreflightOf(s).Passes());
  runtime.pod_annotations = {};
  EXPECT_EQ(Failing(PreflightOf(s)), (std::vector<std::string>{"containerd.pod_annotations"}));
}

TEST(HyperVPreflight, RuntimeTablesVersionsAndMissingFacts) {
  Snapshot base = LoadFixture("ws2022-dda-t4.json");
  Snapshot s = base;
  s.hyperv_facts->containerd->runtimes[0].sandbox_isolation = 0;
  EXPECT_EQ(Failing(PreflightOf(s)), (std::vector<std::string>{"containerd.runtime"}));

  // A custom handler must be declared; the built-in default covers only runhcs-wcow-hypervisor.
  HyperVGpuOptions custom;
  custom.runtime_handler = "gpu-hyperv";
  EXPECT_EQ(Failing(PreflightOf(base, "1", custom)),
            (std::vector<std::string>{"containerd.runtime", "containerd.pod_annotations"}));

  s = base;
  s.hyperv_facts->containerd->config_state = ConfigState::kAbsent;
  s.hyperv_facts->containerd->runtimes.clear();
  EXPECT_TRUE(PreflightOf(s).Passes());  // containerd 1.7's built-in runtime
  s.hyperv_facts->containerd->version = "1.6.24";
  EXPECT_EQ(Failing(PreflightOf(s)),
            (std::vector<std::string>{"containerd.version", "containerd.runtime",
                                      "containerd.pod_annotations"}));

  s = base;
  s.hyperv_facts->containerd->config_state = ConfigState::kUnreadable;
  s.hyperv_facts->containerd->runtimes.clear();
  EXPECT_EQ(Failing(PreflightOf(s)),
            (std::vector<std::string>{"containerd.runtime", "containerd.pod_annotations"}));

  s = base;
  s.hyperv_facts->containerd->hcsshim_version = "0.8.23";
  s.hyperv_facts->containerd->device_util_beside_shim = false;
  EXPECT_EQ(Failing(PreflightOf(s)),
            (std::vector<std::string>{"hcsshim.version", "hcsshim.device_util"}));

  s = base;
  s.hyperv_facts->containerd.reset();
  EXPECT_EQ(Failing(PreflightOf(s)),
            (std::vector<std::string>{"containerd.version", "containerd.runtime",
                                      "containerd.pod_annotations", "hcsshim.version",
                                      "hcsshim.device_util"}));

  // A device whose facts were not recorded (disabled when discovery ran) fails what needs them.
  s = base;
  PciAdapter& gpu = s.hyperv_facts->pci_adapters[1];
  gpu.interrupts.reset();
  gpu.memory_ranges.reset();
  gpu.dda = {};
  gpu.driver_store_path.clear();
  s.hyperv_facts->hyperv.iov_support.reset();
  EXPECT_EQ(
      Failing(PreflightOf(s)),
      (std::vector<std::string>{"host.iommu", "device.type", "device.reserved_memory", "device.acs",
                                "device.interrupts", "device.mmio", "driver.kernel_drivers"}));

  s = base;
  s.hyperv_facts->pci_adapters[1].interrupts = InterruptCounts{0, 2};
  s.hyperv_facts->pci_adapters[1].dda.device_type = 4;
  s.hyperv_facts->pci_adapters[1].problem_code = 43;
  s.hyperv_facts->hyperv.vmms = ServiceState::kStopped;
  EXPECT_EQ(Failing(PreflightOf(s)),
            (std::vector<std::string>{"host.hyperv", "device.interrupts", "device.dismounted"}));
}

TEST(HyperVPreflight, TheImageMustBeABuildHyperVIsolationRuns) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  HyperVGpuPlan plan = PlanFor(s, "1");
  ImageInfo newer{26100, "servercore"};
  EXPECT_EQ(Failing(CheckHyperVGpu(s, plan, newer)), (std::vector<std::string>{"image.build"}));
  ImageInfo older{17763, "servercore"};
  EXPECT_TRUE(CheckHyperVGpu(s, plan, older).Passes());
}

TEST(HyperVPreflight, CheckImageTakesThePreflightsVerdict) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  HyperVGpuPlan plan = PlanFor(s, "1");
  CompatibilityRequest request{20348, {20348, "servercore"}, Isolation::kHyperV, true, nullptr};
  EXPECT_FALSE(CheckCompatibility(request).ok);  // no facts: the refusal stands
  HyperVGpuPreflight passing = CheckHyperVGpu(s, plan, request.image);
  request.hyperv_gpu_preflight = &passing;
  CompatibilityVerdict ok = CheckCompatibility(request);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.details.size(), passing.checks.size() + passing.notes.size());
  Snapshot rmrr = LoadFixture("ws2022-dda-rmrr.json");
  HyperVGpuPreflight failing = CheckHyperVGpu(rmrr, PlanFor(rmrr, "1"), request.image);
  request.hyperv_gpu_preflight = &failing;
  CompatibilityVerdict refused = CheckCompatibility(request);
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.summary,
            "GPU with Hyper-V isolation is refused: 1 of 17 preflight checks fail");
}

TEST(HyperVHcs, GatedBySchemaAndPropagatesNumaAffinityFrom26100) {
  Snapshot s = LoadFixture("ws2019-17763-dda.json");
  auto refused = HcsDocumentsJson(s, PlanFor(s, "1"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("needs HCS schema 2.3"), std::string::npos);

  s = LoadFixture("ws2022-dda-t4.json");
  auto docs = nlohmann::json::parse(*HcsDocumentsJson(s, PlanFor(s, "1")));
  EXPECT_FALSE(docs["assign_device"]["Settings"].contains("PropagateNumaAffinity"));
  EXPECT_EQ(docs["assign_device"]["Settings"]["Functions"][0]["DeviceInstancePath"],
            s.hyperv_facts->pci_adapters[1].instance_id);
  s.os.build = 26100;
  docs = nlohmann::json::parse(*HcsDocumentsJson(s, PlanFor(s, "1")));
  EXPECT_EQ(docs["assign_device"]["Settings"]["PropagateNumaAffinity"], true);
}

TEST(HyperVHcs, VmBusGuidIsAStableVersion8Guid) {
  std::string a = VmBusGuidFor("PCIP\\VEN_10DE&DEV_1EB8\\4&1");
  EXPECT_EQ(a, VmBusGuidFor("PCIP\\VEN_10DE&DEV_1EB8\\4&1"));
  EXPECT_NE(a, VmBusGuidFor("PCIP\\VEN_10DE&DEV_1EB8\\4&2"));
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a[14], '8');                                          // version
  EXPECT_NE(std::string("89ab").find(a[19]), std::string::npos);  // RFC 9562 variant
  for (size_t i : {8u, 13u, 18u, 23u})
    EXPECT_EQ(a[i], '-');
}

TEST(HyperVOutputs, PowerShellLiteralsExpandNothing) {
  EXPECT_EQ(PowerShellLiteral("PCI\\VEN_10DE&DEV_1EB8"), "'PCI\\VEN_10DE&DEV_1EB8'");
  EXPECT_EQ(PowerShellLiteral("it's $env:x"), "'it''s $env:x'");
}

}  // namespace
}  // namespace tessera::windows
