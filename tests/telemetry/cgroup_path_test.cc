// Which container a process is in, from the cgroup paths the kernel reports: every form podman,
// docker, containerd, CRI-O and kubelet write (cgroup v1 and v2, systemd and cgroupfs drivers),
// and the paths that must name no container or must not move a process to another container.
#include <gtest/gtest.h>

#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

const std::string kId = "3f9a1c0d5b7e42a8b6c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9";
const std::string kOther = "aaaaaaaabbbbbbbbccccccccddddddddeeeeeeeeffffffff0000000011111111";
const std::string kPod = "0d9f2c3b-7e4a-4b1c-9d8e-6f5a4b3c2d1e";
const std::string kPodUnderscores = "0d9f2c3b_7e4a_4b1c_9d8e_6f5a4b3c2d1e";

std::optional<CgroupContainer> Of(const std::string& path) {
  return ContainerOfCgroupPath(path);
}

TEST(CgroupPath, PodmanSystemdScope) {
  auto c = Of("/machine.slice/libpod-" + kId + ".scope");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->runtime, Runtime::kPodman);
  EXPECT_EQ(c->container_id, kId);
  EXPECT_EQ(c->pod_uid, "");
  // podman's "container" sub-cgroup (cgroup v2 with systemd inside) is the same container.
  EXPECT_EQ(Of("/machine.slice/libpod-" + kId + ".scope/container"), c);
}

TEST(CgroupPath, PodmanCgroupfsDriverAndPodSlice) {
  auto c = Of("/libpod_parent/libpod-" + kId);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->container_id, kId);
  auto in_pod = Of("/machine.slice/machine-libpod_pod_1234abcd.slice/libpod-" + kId + ".scope");
  ASSERT_TRUE(in_pod);
  EXPECT_EQ(in_pod->container_id, kId);
}

TEST(CgroupPath, ConmonIsNoContainer) {
  EXPECT_FALSE(Of("/machine.slice/libpod-conmon-" + kId + ".scope"));
  EXPECT_FALSE(Of("/system.slice/crio-conmon-" + kId + ".scope"));
}

TEST(CgroupPath, DockerBothDrivers) {
  auto systemd = Of("/system.slice/docker-" + kId + ".scope");
  ASSERT_TRUE(systemd);
  EXPECT_EQ(systemd->runtime, Runtime::kDocker);
  auto cgroupfs = Of("/docker/" + kId);
  ASSERT_TRUE(cgroupfs);
  EXPECT_EQ(cgroupfs->runtime, Runtime::kDocker);
  EXPECT_EQ(cgroupfs->container_id, kId);
}

TEST(CgroupPath, KubernetesSystemdDriverEveryRuntimeAndQosClass) {
  const std::string burstable = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                                kPodUnderscores + ".slice/";
  auto containerd = Of(burstable + "cri-containerd-" + kId + ".scope");
  ASSERT_TRUE(containerd);
  EXPECT_EQ(containerd->runtime, Runtime::kContainerd);
  EXPECT_EQ(containerd->container_id, kId);
  EXPECT_EQ(containerd->pod_uid, kPod);
  auto crio = Of("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
                 kPodUnderscores + ".slice/crio-" + kId + ".scope");
  ASSERT_TRUE(crio);
  EXPECT_EQ(crio->runtime, Runtime::kCrio);
  EXPECT_EQ(crio->pod_uid, kPod);
  // Guaranteed Pods sit right under kubepods.slice.
  auto guaranteed =
      Of("/kubepods.slice/kubepods-pod" + kPodUnderscores + ".slice/docker-" + kId + ".scope");
  ASSERT_TRUE(guaranteed);
  EXPECT_EQ(guaranteed->runtime, Runtime::kDocker);
  EXPECT_EQ(guaranteed->pod_uid, kPod);
}

TEST(CgroupPath, KubernetesCgroupfsDriver) {
  auto c = Of("/kubepods/burstable/pod" + kPod + "/" + kId);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->runtime, Runtime::kKubepods);
  EXPECT_EQ(c->container_id, kId);
  EXPECT_EQ(c->pod_uid, kPod);
  auto guaranteed = Of("/kubepods/pod" + kPod + "/" + kId);
  ASSERT_TRUE(guaranteed);
  EXPECT_EQ(guaranteed->pod_uid, kPod);
  // A static Pod's UID is a 32-digit hash.
  auto static_pod = Of("/kubepods/besteffort/pod0123456789abcdef0123456789abcdef/" + kId);
  ASSERT_TRUE(static_pod);
  EXPECT_EQ(static_pod->pod_uid, "0123456789abcdef0123456789abcdef");
  // The Pod's own cgroup: the Pod is known, no container.
  auto pod_only = Of("/kubepods/burstable/pod" + kPod);
  ASSERT_TRUE(pod_only);
  EXPECT_EQ(pod_only->container_id, "");
  EXPECT_EQ(pod_only->pod_uid, kPod);
}

TEST(CgroupPath, UnderACgroupNamespaceOtherPathsStartWithDotDot) {
  auto c = Of("/../../kubepods.slice/kubepods-pod" + kPodUnderscores + ".slice/cri-containerd-" +
              kId + ".scope");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->container_id, kId);
}

TEST(CgroupPath, HostProcessesNameNoContainer) {
  EXPECT_FALSE(Of("/"));
  EXPECT_FALSE(Of("/user.slice/user-0.slice/session-3.scope"));
  EXPECT_FALSE(Of("/system.slice/nvidia-persistenced.service"));
  EXPECT_FALSE(Of("/process_api/130c53e13d4846fa135db0d8fbc5472d"));
  // A bare ID is a container only where a runtime puts one.
  EXPECT_FALSE(Of("/system.slice/" + kId));
  EXPECT_FALSE(Of("/pod" + kPod + "/" + kId));  // "pod…" outside kubepods is not a Pod
  // Near misses: wrong length, upper case.
  EXPECT_FALSE(Of("/machine.slice/libpod-" + kId.substr(1) + ".scope"));
  std::string upper = kId;
  upper[0] = 'A';
  EXPECT_FALSE(Of("/machine.slice/libpod-" + upper + ".scope"));
  EXPECT_FALSE(Of("/kubepods/burstable/podnot-a-uid/" + kId));
}

TEST(CgroupPath, ACgroupNamedInsideAContainerNeverMovesItsProcesses) {
  // A container that can write its own cgroupfs may create cgroups below its own, named after
  // anything; the outermost container decides.
  auto nested = Of("/machine.slice/libpod-" + kId + ".scope/libpod-" + kOther + ".scope");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->container_id, kId);
  auto fake_pod = Of("/machine.slice/libpod-" + kId + ".scope/kubepods/pod" + kPod + "/" + kOther);
  ASSERT_TRUE(fake_pod);
  EXPECT_EQ(fake_pod->container_id, kId);
  EXPECT_EQ(fake_pod->pod_uid, "");
  auto in_pod = Of("/kubepods/burstable/pod" + kPod + "/" + kId + "/docker/" + kOther);
  ASSERT_TRUE(in_pod);
  EXPECT_EQ(in_pod->container_id, kId);
}

TEST(ProcCgroup, CgroupV2OneLine) {
  auto c = ContainerOfProcCgroup("0::/machine.slice/libpod-" + kId + ".scope\n");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->container_id, kId);
}

TEST(ProcCgroup, CgroupV1EveryHierarchyAgrees) {
  const std::string path = "/kubepods/burstable/pod" + kPod + "/" + kId;
  std::string text;
  for (const char* controllers :
       {"12:memory", "11:cpu,cpuacct", "10:pids", "9:devices", "1:name=systemd"})
    text += std::string(controllers) + ":" + path + "\n";
  text += "0::/\n";  // hybrid: the unified hierarchy says nothing
  auto c = ContainerOfProcCgroup(text);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->container_id, kId);
  EXPECT_EQ(c->pod_uid, kPod);
}

TEST(ProcCgroup, HierarchiesThatDisagreeAreNotGuessed) {
  std::string text = "4:memory:/machine.slice/libpod-" + kId +
                     ".scope\n1:name=systemd:/machine.slice/libpod-" + kOther + ".scope\n";
  EXPECT_FALSE(ContainerOfProcCgroup(text));
  // A Pod-only line agrees with a line naming a container of that Pod.
  std::string pod = "3:pids:/kubepods/burstable/pod" + kPod + "\n2:memory:/kubepods/burstable/pod" +
                    kPod + "/" + kId + "\n";
  auto c = ContainerOfProcCgroup(pod);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->container_id, kId);
}

TEST(ProcCgroup, HostProcessAndGarbage) {
  EXPECT_FALSE(ContainerOfProcCgroup("0::/user.slice/user-0.slice/session-1.scope\n"));
  EXPECT_FALSE(ContainerOfProcCgroup(""));
  EXPECT_FALSE(ContainerOfProcCgroup("no colons here\n::\n"));
  // A deleted cgroup keeps its name.
  auto c = ContainerOfProcCgroup("0::/machine.slice/libpod-" + kId + ".scope (deleted)\n");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->container_id, kId);
}

}  // namespace
}  // namespace tessera::telemetry
