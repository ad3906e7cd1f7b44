// The native backend's text-level Hyper-V helpers, which also compile here.
#include "inventory/windows/native_hyperv.h"

#include <gtest/gtest.h>

namespace tessera::windows::native {
namespace {

TEST(NativeHyperV, VersionsFromContainerdAndShimOutput) {
  EXPECT_EQ(VersionFromOutput("containerd github.com/containerd/containerd v1.7.20 "
                              "8fc6bcff51318944179630522a095cc9dbf9f353\r\n"),
            "1.7.20");
  EXPECT_EQ(VersionFromOutput("containerd github.com/containerd/containerd/v2 v2.0.0 "
                              "207ad711eabd375a01713109a8a197d197ff6542\n"),
            "2.0.0");
  EXPECT_EQ(VersionFromOutput("containerd-shim-runhcs-v1 version v0.12.9\ncommit: "
                              "e3d3a4a0\nspec: 1.1.0\n"),
            "0.12.9");
  // A shim built without a version prints its commit where the version goes.
  EXPECT_EQ(VersionFromOutput("containerd-shim-runhcs-v1 version commit: e3d3a4a0\nspec: 1.1.0"),
            "");
  EXPECT_EQ(VersionFromOutput("spec 1.1.0 on the second line\n1.2.3"), "1.1.0");
  EXPECT_EQ(VersionFromOutput("v1 v.1 1. ..1 1..2"), "");
  EXPECT_EQ(VersionFromOutput(""), "");
}

TEST(NativeHyperV, ConfigFlagFromAServiceCommandLine) {
  EXPECT_EQ(ConfigFlag({"C:\\Program Files\\containerd\\bin\\containerd.exe", "--config",
                        "D:\\ctr\\config.toml", "--run-service"}),
            "D:\\ctr\\config.toml");
  EXPECT_EQ(ConfigFlag({"containerd.exe", "--config=C:\\c.toml"}), "C:\\c.toml");
  EXPECT_EQ(ConfigFlag({"containerd.exe", "-c", "C:\\c.toml"}), "C:\\c.toml");
  EXPECT_EQ(ConfigFlag({"containerd.exe", "--run-service", "--config"}), "");
  EXPECT_EQ(ConfigFlag({"--config", "x"}), "");  // argv[0] is the program
}

TEST(NativeHyperV, RuntimeTablesOfEveryConfigVersion) {
  auto v2 = ContainerdRuntimesFromConfig(R"(version = 2
[plugins."io.containerd.grpc.v1.cri".registry.configs."r.example.com".auth]
  username = "robot"
  password = "s3cret"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runhcs-wcow-process]
  runtime_type = "io.containerd.runhcs.v1"
  container_annotations = ["io.microsoft.container.*"]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runhcs-wcow-hypervisor]
  runtime_type = "io.containerd.runhcs.v1"
  pod_annotations = ["io.microsoft.virtualmachine.*"]
  container_annotations = ["io.microsoft.container.*"]
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runhcs-wcow-hypervisor.options]
    SandboxIsolation = 1
    ScaleCpuLimitsToSandbox = true
)");
  ASSERT_TRUE(v2.ok()) << v2.error().message;
  ASSERT_EQ(v2->size(), 2u);  // toml++ keeps a table's keys sorted
  EXPECT_EQ((*v2)[1].name, "runhcs-wcow-process");
  EXPECT_EQ((*v2)[1].sandbox_isolation, std::nullopt);
  EXPECT_TRUE((*v2)[1].pod_annotations.empty());
  EXPECT_EQ((*v2)[0].name, "runhcs-wcow-hypervisor");
  EXPECT_EQ((*v2)[0].runtime_type, "io.containerd.runhcs.v1");
  EXPECT_EQ((*v2)[0].sandbox_isolation, 1);
  EXPECT_EQ((*v2)[0].pod_annotations, (std::vector<std::string>{"io.microsoft.virtualmachine.*"}));
  EXPECT_EQ((*v2)[0].container_annotations, (std::vector<std::string>{"io.microsoft.container.*"}));

  auto v3 = ContainerdRuntimesFromConfig(R"(version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpu-hyperv]
  runtime_type = 'io.containerd.runhcs.v1'
  pod_annotations = ['io.microsoft.virtualmachine.*']
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.gpu-hyperv.options]
    SandboxIsolation = 1
)");
  ASSERT_TRUE(v3.ok());
  ASSERT_EQ(v3->size(), 1u);
  EXPECT_EQ((*v3)[0].name, "gpu-hyperv");
  EXPECT_EQ((*v3)[0].sandbox_isolation, 1);

  auto v1 = ContainerdRuntimesFromConfig(
      "[plugins.cri.containerd.runtimes.runhcs-wcow-hypervisor]\nruntime_type = "
      "\"io.containerd.runhcs.v1\"\n");
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->size(), 1u);
}

TEST(NativeHyperV, OddConfigsStayBounded) {
  EXPECT_TRUE(ContainerdRuntimesFromConfig("").ok());
  EXPECT_TRUE(ContainerdRuntimesFromConfig("")->empty());
  auto invalid = ContainerdRuntimesFromConfig("[plugins\nnot toml = = =");
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.error().category, ErrorCategory::kInvalidArgument);
  // Non-ASCII (which toml++ 3.3.0 mishandles outside strings) and a byte-order mark.
  auto unicode = ContainerdRuntimesFromConfig(
      "\xEF\xBB\xBF# caf\xC3\xA9\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.x]\n"
      "runtime_type = \"t\xE2\xBA\xBF\"\n");
  ASSERT_TRUE(unicode.ok()) << unicode.error().message;
  EXPECT_EQ((*unicode)[0].runtime_type, "t?");
  // Out-of-range SandboxIsolation and non-string patterns are dropped, not kept wrong.
  auto odd = ContainerdRuntimesFromConfig(
      "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.x]\n"
      "pod_annotations = [1, \"a.*\"]\n[plugins.\"io.containerd.grpc.v1.cri\".containerd."
      "runtimes.x.options]\nSandboxIsolation = -1\n");
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ((*odd)[0].pod_annotations, (std::vector<std::string>{"a.*"}));
  EXPECT_EQ((*odd)[0].sandbox_isolation, std::nullopt);
  std::string many = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes]\n";
  for (int i = 0; i < 100; ++i)
    many += "r" + std::to_string(i) + " = {runtime_type = \"t\"}\n";
  EXPECT_EQ(ContainerdRuntimesFromConfig(many)->size(), 64u);
}

TEST(NativeHyperV, InterruptAndClassRules) {
  EXPECT_TRUE(IsMessageSignaledIrq(4294967294u));  // -2 as a signed number
  EXPECT_TRUE(IsMessageSignaledIrq(4294900000u));
  EXPECT_FALSE(IsMessageSignaledIrq(4294899999u));
  EXPECT_FALSE(IsMessageSignaledIrq(16));
  EXPECT_TRUE(IsGpuClass(0x030000));
  EXPECT_TRUE(IsGpuClass(0x030200));
  EXPECT_TRUE(IsGpuClass(0x120000));
  EXPECT_FALSE(IsGpuClass(0x040300));  // the GPU's HD audio function
  EXPECT_FALSE(IsGpuClass(std::nullopt));
}

}  // namespace
}  // namespace tessera::windows::native
