// A real container consumes a prepared claim: the DRA kubelet emulator prepares a claim against
// the real tessera-dra-plugin on a fixture host, and podman (runc) runs busybox with the CDI
// device IDs the plugin answered, as kubelet hands them to the runtime.
//
// podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi, so the plugin's --cdi-dir is
// /var/run/cdi here; its files are named after claim UIDs, unique per test run, and unprepare
// removes them.
#include <cstdio>

#include "dra/plugin_fixture.h"
#include "support/podman_harness.h"

namespace tessera::dra {
namespace {

using namespace e2e;
using testing::Podman;

class DraPodman : public DraPlugin {
 protected:
  void SetUp() override {
    DraPlugin::SetUp();
    const Podman& podman = Podman::Get();
    ASSERT_TRUE(podman.ready()) << podman.setup_error();
    cdi_dir_ = "/var/run/cdi";
  }

  // Runs busybox with `cdi_ids` as --device arguments.
  testing::CommandResult RunWith(const std::vector<std::string>& cdi_ids,
                                 const std::string& script) {
    std::vector<std::string> args;
    for (const auto& id : cdi_ids)
      args.insert(args.end(), {"--device", id});
    return Podman::Get().RunShell(args, script);
  }
};

// The per-GPU node of a published device, e.g. "nvidia3".
std::string GpuNodeName(const NodeDevice& device) {
  EXPECT_EQ(device.edits.device_nodes.size(), 1u);
  const std::string& path = device.edits.device_nodes.at(0).path;
  return path.substr(path.rfind('/') + 1);
}

TEST_F(DraPodman, ContainerSeesExactlyTheClaimedGpusNodes) {
  StartPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  ClaimRef ref = CreateClaim("podman", {2, 5});
  std::string rpc_error;
  auto prepared = kubelet.Prepare({ref}, &rpc_error);
  ASSERT_EQ(rpc_error, "");
  const testing::DraPrepareResult& result = prepared[ref.uid];
  ASSERT_EQ(result.error, "") << plugin_->Log();
  ASSERT_EQ(result.devices.size(), 2u);
  std::vector<std::string> ids;
  for (const auto& device : result.devices) {
    ASSERT_EQ(device.cdi_device_ids.size(), 1u);
    ids.push_back(device.cdi_device_ids[0]);
  }
  ASSERT_TRUE(SpecExists(ref));

  auto run = RunWith(ids,
                     "ls /dev | grep -E '^nvidia[0-9]+$'; "
                     "for n in /dev/nvidia[0-9]* /dev/nvidiactl; do "
                     "echo \"$n $(stat -c '%t:%T' $n)\"; done");
  ASSERT_EQ(run.status, 0) << run.output;
  std::string first = GpuNodeName(node_.devices[2]), second = GpuNodeName(node_.devices[5]);
  // Exactly the claimed GPUs' nodes, none of the six others.
  EXPECT_EQ(run.output.substr(0, run.output.find("/dev/")), first + "\n" + second + "\n")
      << run.output;
  char expected[64];
  for (const NodeDevice* device : {&node_.devices[2], &node_.devices[5]}) {
    const auto& node = device->edits.device_nodes[0];
    std::snprintf(expected, sizeof expected, "%s %lx:%lx\n", node.path.c_str(),
                  static_cast<unsigned long>(node.major), static_cast<unsigned long>(node.minor));
    EXPECT_NE(run.output.find(expected), std::string::npos) << run.output;
  }
  // The shared control node comes from the claim spec's spec-level edits.
  EXPECT_NE(run.output.find("/dev/nvidiactl c3:ff\n"), std::string::npos) << run.output;

  // Once unprepared, the IDs no longer resolve: the runtime refuses rather than running
  // without the devices.
  EXPECT_EQ(kubelet.Unprepare({ref})[ref.uid], "");
  EXPECT_FALSE(SpecExists(ref));
  auto after = RunWith(ids, "true");
  EXPECT_NE(after.status, 0) << after.output;
}

}  // namespace
}  // namespace tessera::dra
