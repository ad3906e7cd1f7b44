// The PodResources reader: a List answer as values within bounds, over bytes and over kubelet's
// real socket protocol (the emulator in this directory).
#include "podresources/podresources.h"

#include <gtest/gtest.h>

#include "podresources/podresources_kubelet.h"
#include "podresources/v1/api.pb.h"
#include "support/fixture_host.h"

namespace tessera::podresources {
namespace {

::v1::ListPodResourcesResponse TwoPods() {
  ::v1::ListPodResourcesResponse response;
  auto* pod = response.add_pod_resources();
  pod->set_name("job-1");
  pod->set_namespace_("tenant-a");
  auto* main_container = pod->add_containers();
  main_container->set_name("main");
  auto* gpus = main_container->add_devices();
  gpus->set_resource_name("nvidia.com/gpu");
  gpus->add_device_ids("GPU-b");
  gpus->add_device_ids("GPU-a");
  auto* nics = main_container->add_devices();
  nics->set_resource_name("example.com/nic");
  nics->add_device_ids("nic-0");
  auto* side = pod->add_containers();
  side->set_name("side");
  auto* more = side->add_devices();
  more->set_resource_name("nvidia.com/gpu");
  more->add_device_ids("GPU-a");
  auto* other = response.add_pod_resources();
  other->set_name("web");
  other->set_namespace_("default");
  return response;
}

TEST(PodResources, ListAnswerBecomesPodsWithTheirDeviceIdsPerResource) {
  auto list = ParseListResponse(TwoPods().SerializeAsString());
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->pods.size(), 2u);
  const PodDevices* pod = list->Find("tenant-a", "job-1");
  ASSERT_NE(pod, nullptr);
  // Both containers' GPUs, sorted, once each; another resource's IDs are not GPUs.
  EXPECT_EQ(DeviceIds(*pod, "nvidia.com/gpu"), (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(DeviceIds(*pod, "example.com/nic"), (std::vector<std::string>{"nic-0"}));
  EXPECT_TRUE(DeviceIds(*list->Find("default", "web"), "nvidia.com/gpu").empty());
  EXPECT_EQ(list->Find("tenant-a", "web"), nullptr);
  EXPECT_TRUE(list->warnings.empty());
}

TEST(PodResources, OversizedEntriesAreLeftOutWithAWarningAndGarbageIsRefused) {
  auto response = TwoPods();
  auto* bad = response.add_pod_resources();
  bad->set_name(std::string(300, 'x'));
  bad->set_namespace_("tenant-a");
  auto* devices = response.mutable_pod_resources(0)->mutable_containers(0)->add_devices();
  devices->set_resource_name("nvidia.com/gpu");
  for (int i = 0; i < 300; ++i)
    devices->add_device_ids("GPU-" + std::to_string(i));
  auto list = ParseListResponse(response.SerializeAsString());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->pods.size(), 2u);
  EXPECT_EQ(list->warnings.size(), 2u);
  for (const auto& warning : list->warnings)
    EXPECT_LT(warning.size(), 200u) << "a warning must not echo the whole input";
  EXPECT_EQ(DeviceIds(*list->Find("tenant-a", "job-1"), "nvidia.com/gpu").size(), 2u);
  EXPECT_FALSE(ParseListResponse("\xff\xff\xff\xff not protobuf").ok());
}

TEST(PodResources, DraClaimsBecomeTheContainersClaimDevicesOversizedOnesLeftOut) {
  auto response = TwoPods();
  auto* container = response.mutable_pod_resources(0)->mutable_containers(0);
  auto* claim = container->add_dynamic_resources();
  claim->set_claim_name("train-gpus");
  claim->set_claim_namespace("tenant-a");
  auto* resource = claim->add_claim_resources();
  resource->set_driver_name("gpu.tessera.dev");
  resource->set_pool_name("node-a");
  resource->set_device_name("gpu-0000-18-00-0");
  resource->add_cdi_devices()->set_name("k8s.gpu.tessera.dev/claim=uid-gpu-0000-18-00-0");
  auto* oversized = claim->add_claim_resources();
  oversized->set_driver_name("gpu.tessera.dev");
  oversized->set_device_name(std::string(300, 'g'));
  auto list = ParseListResponse(response.SerializeAsString());
  ASSERT_TRUE(list.ok()) << list.error().message;
  const PodDevices* pod = list->Find("tenant-a", "job-1");
  ASSERT_NE(pod, nullptr);
  ASSERT_EQ(pod->claim_devices.size(), 1u);
  EXPECT_EQ(pod->claim_devices[0], (ClaimDevice{container->name(), "tenant-a", "train-gpus",
                                                "gpu.tessera.dev", "node-a", "gpu-0000-18-00-0"}));
  ASSERT_EQ(list->warnings.size(), 1u);
  EXPECT_LT(list->warnings[0].size(), 200u);
  // Its device-plugin devices are as before.
  EXPECT_EQ(DeviceIds(*pod, "nvidia.com/gpu"), (std::vector<std::string>{"GPU-a", "GPU-b"}));
}

TEST(PodResources, ListOverKubeletsSocket) {
  testing::TempDir dir;
  testing::PodResourcesKubelet kubelet(dir.path() + "/kubelet.sock");
  ASSERT_TRUE(kubelet.ok());
  kubelet.SetPods({{"tenant-a", "job-1", {{"main", "nvidia.com/gpu", {"GPU-1", "GPU-0"}}}}});
  auto list = List(kubelet.socket_path(), std::chrono::seconds(30));
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->pods.size(), 1u);
  EXPECT_EQ(DeviceIds(list->pods[0], "nvidia.com/gpu"),
            (std::vector<std::string>{"GPU-0", "GPU-1"}));
  EXPECT_EQ(kubelet.ListCalls(), 1);
  // No kubelet: Unavailable, not a hang.
  auto missing = List(dir.path() + "/absent.sock", std::chrono::seconds(5));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().category, ErrorCategory::kUnavailable);
}

}  // namespace
}  // namespace tessera::podresources
