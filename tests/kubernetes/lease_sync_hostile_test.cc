// tessera-lease-sync against hostile input. From the API server: GpuLeases whose gpuIds are
// paths, lines, numbers, upper-case or a bare string, with unknown states and huge reasons;
// nothing but canonical PCI addresses (and GPUs the node knows by UUID) reaches the lease
// file, which the device plugin must still read, and each refusal is a warning naming its
// lease. From the operator: /dev/zero, a symlink to it, a FIFO, a 2 GiB sparse file and a
// billion-laughs YAML as --kubeconfig and --partition-table, refused at once by name.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/pci_address.h"
#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/plugin_process.h"
#include "inventory/inventory.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/plain_config.h"
#include "support/fixture_host.h"
#include "support/hostile_files.h"
#include "support/wait.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;
using testing::TempDir;

std::string LeaseSyncBinary() {
  return std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-lease-sync";
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Json Lease(const std::string& name, Json gpu_ids) {
  return {{"apiVersion", "tessera.dev/v1alpha1"},
          {"kind", "GpuLease"},
          {"metadata", {{"name", name}}},
          {"spec", {{"tenancy", "t"}, {"node", "node-1"}, {"gpuIds", std::move(gpu_ids)}}}};
}

// The scripted API server, a kubeconfig naming it, and a client of the test's own.
class LeaseSyncHostile : public ::testing::Test {
 protected:
  LeaseSyncHostile() {
    server.SetWatchSeconds(0.5);
    testing::WriteKubeconfigFile(kubeconfig, server.url());
  }
  static ClientConfig ConfigFor(const FakeApiServer& server) {
    return testing::PlainConfig(server);
  }

  FakeApiServer server;
  TempDir dir;
  const std::string kubeconfig = dir.path() + "/kubeconfig";
  Client client{ConfigFor(server)};
};

TEST_F(LeaseSyncHostile, OnlyCanonicalPciAddressesReachTheLeaseFile) {
  const std::string root = testing::MaterializeHost("hgx-h100-dgx");
  inventory::ReadOptions read;
  read.root = root;
  auto inv = inventory::ReadInventory(read);
  ASSERT_TRUE(inv.ok());
  const auto* by_uuid = inv->Gpus()[1];
  ASSERT_TRUE(by_uuid->gpu_uuid.has_value());

  auto create = [&](const Json& lease, const Json& status) {
    ASSERT_TRUE(client.Create(Resource::GpuLeases(), "", lease).ok());
    ASSERT_TRUE(client
                    .Patch(Resource::GpuLeases(), "", lease["metadata"]["name"],
                           {{"status", status}}, PatchType::kMerge, "status")
                    .ok());
  };
  const std::string huge_reason(100000, 'r');
  create(Lease("paths", {"../../../../etc/passwd", "0000:18:00.0\n", "0000:2A:00.0", 7, nullptr,
                         "0000:3a:00.0"}),
         {{"state", "quarantined"}, {"reason", huge_reason}, {"claim", {{"uid", 5}}}});
  create(Lease("a-string", "0000:5d:00.0"), {{"state", "checking"}});
  create(Lease("by-uuid", {*by_uuid->gpu_uuid, "GPU-not-on-this-node"}), {{"state", "draining"}});
  create(Lease("bad-state", {"0000:9a:00.0"}), {{"state", "owned\nby me"}});

  const std::string file = dir.path() + "/leases.json";
  testing::PluginProcess sync(LeaseSyncBinary(),
                              {"--kubeconfig", kubeconfig, "--node", "node-1", "--lease-file", file,
                               "--root", root, "--pod-resources-interval-ms", "0"},
                              dir.path() + "/log");
  Json leases;
  ASSERT_TRUE(testing::WaitUntil([&] {
    leases = Json::parse(ReadText(file), nullptr, false);
    return leases.is_object() && leases["gpus"].size() == 2;
  })) << ReadText(file)
      << sync.Log();
  // Exactly the canonical address of "paths" and the GPU "by-uuid" names by its UUID.
  EXPECT_EQ(leases["gpus"]["0000:3a:00.0"]["state"], "quarantined");
  EXPECT_EQ(leases["gpus"][by_uuid->pci_address]["state"], "draining");
  EXPECT_LT(leases["gpus"]["0000:3a:00.0"]["reason"].get<std::string>().size(), 300u);
  EXPECT_FALSE(leases["gpus"]["0000:3a:00.0"].contains("claim"));  // not a string
  for (const auto& [pci, entry] : leases["gpus"].items())
    EXPECT_TRUE(IsPciAddress(pci)) << pci;
  EXPECT_EQ(ReadText(file).find("passwd"), std::string::npos);
  // What lease-sync writes, the device plugin reads.
  auto parsed = deviceplugin::ParseLeaseFile(ReadText(file));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_TRUE(parsed->at("0000:3a:00.0").blocks_allocation());

  const std::string log = sync.Log();
  for (const char* warning :
       {"GpuLease a-string: spec.gpuIds is not a list; left out",
        "GpuLease paths: spec.gpuIds[0] \"../../../../etc/passwd\" is neither",
        "GpuLease paths: spec.gpuIds[1] \"0000:18:00.0?\" is neither",
        "GpuLease paths: spec.gpuIds[2] \"0000:2A:00.0\" is neither",
        "GpuLease paths: spec.gpuIds[3] a number is neither",
        "GpuLease by-uuid: spec.gpuIds[1] \"GPU-not-on-this-node\" is neither",
        "GpuLease bad-state: status.state \"owned?by me\" is not a lease state; left out"}) {
    EXPECT_NE(log.find(warning), std::string::npos) << warning << "\n" << log;
  }
  // Each refusal once, not on every event.
  EXPECT_EQ(log.find("GpuLease a-string", log.find("GpuLease a-string") + 1), std::string::npos);
}

TEST_F(LeaseSyncHostile, HostileKubeconfigAndPartitionTableAreRefusedAtOnceNamingThem) {
  auto args = [&](const std::string& config, const std::string& table) {
    std::vector<std::string> out = {
        LeaseSyncBinary(),          "--kubeconfig", config, "--node", "node-1", "--lease-file",
        dir.path() + "/leases.json"};
    if (!table.empty()) {
      out.push_back("--partition-table");
      out.push_back(table);
    }
    return out;
  };
  testing::HostileFiles yaml(".yaml");
  for (const auto& file : yaml.all()) {
    auto run = testing::RunUnderLimits(args(file.path, ""));
    EXPECT_EQ(testing::RefusalProblem(run, file.path, testing::ReasonFor(file)), "") << file.kind;
    run = testing::RunUnderLimits(args(kubeconfig, file.path));
    EXPECT_EQ(testing::RefusalProblem(run, file.path, testing::ReasonFor(file)), "") << file.kind;
    EXPECT_EQ(run.exit_code, 2) << file.kind;
  }
  const std::string bomb_config = dir.path() + "/bomb.kubeconfig";
  std::ofstream(bomb_config) << testing::AliasBomb("apiVersion: v1\ncurrent-context: t\n",
                                                   "clusters");
  const std::string bomb_table = dir.path() + "/bomb.yaml";
  std::ofstream(bomb_table) << testing::AliasBomb("board: hgx\nmodules: 8\n", "partitions");
  const std::string reason = "more than 100000 nodes with its aliases expanded";
  EXPECT_EQ(
      testing::RefusalProblem(testing::RunUnderLimits(args(bomb_config, "")), bomb_config, reason),
      "");
  EXPECT_EQ(testing::RefusalProblem(testing::RunUnderLimits(args(kubeconfig, bomb_table)),
                                    bomb_table, reason),
            "");
}

}  // namespace
}  // namespace tessera::k8s
