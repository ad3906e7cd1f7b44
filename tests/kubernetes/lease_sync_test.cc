// tessera-lease-sync as a process against the scripted API server: the lease file follows this
// node's GpuLeases (created, checked, quarantined, deleted) and ignores other nodes'; the node's
// GPUs (inventory of a fixture host) are published on its Node, patched only when they change.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "backends/kubernetes/node_gpus.h"
#include "backends/kubernetes/objects.h"
#include "inventory/inventory.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/plain_config.h"
#include "support/fixture_host.h"
#include "support/wait.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;
using testing::TempDir;

Json ReadLeaseFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str(), nullptr, false);
}

bool WaitFor(const std::string& path, const std::function<bool(const Json&)>& ready) {
  return testing::WaitUntil([&] {
    Json file = ReadLeaseFile(path);
    return file.is_object() && ready(file);
  });
}

TEST(LeaseSync, LeaseFileFollowsThisNodesLeases) {
  FakeApiServer server;
  server.SetWatchSeconds(0.5);
  TempDir dir;
  testing::WriteKubeconfigFile(dir.path() + "/kubeconfig", server.url());
  Client client(testing::PlainConfig(server));
  ASSERT_TRUE(client
                  .Create(Resource::GpuLeases(), "",
                          BuildGpuLease({"a", "team-a", "node-1", {"0000:18:00.0"}}))
                  .ok());
  ASSERT_TRUE(client
                  .Create(Resource::GpuLeases(), "",
                          BuildGpuLease({"b", "team-b", "node-2", {"0000:2a:00.0"}}))
                  .ok());

  const std::string file = dir.path() + "/leases.json";
  std::string binary = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-lease-sync";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(binary.c_str(), binary.c_str(), "--kubeconfig", (dir.path() + "/kubeconfig").c_str(),
            "--node", "node-1", "--lease-file", file.c_str(), nullptr);
    ::_exit(127);
  }
  EXPECT_TRUE(WaitFor(file, [](const Json& f) {
    return f["gpus"].size() == 1 && f["gpus"].contains("0000:18:00.0");
  }));
  ASSERT_TRUE(client
                  .Patch(Resource::GpuLeases(), "", "a",
                         {{"status", {{"state", "quarantined"}, {"reason", "check failed"}}}},
                         PatchType::kMerge, "status")
                  .ok());
  EXPECT_TRUE(WaitFor(file, [](const Json& f) {
    return f["gpus"]["0000:18:00.0"].value("state", "") == "quarantined";
  }));
  ASSERT_TRUE(client
                  .Create(Resource::GpuLeases(), "",
                          BuildGpuLease({"c", "team-a", "node-1", {"0000:3a:00.0"}}))
                  .ok());
  EXPECT_TRUE(WaitFor(file, [](const Json& f) { return f["gpus"].size() == 2; }));
  ASSERT_TRUE(client.Delete(Resource::GpuLeases(), "", "a").ok());
  EXPECT_TRUE(WaitFor(file, [](const Json& f) {
    return f["gpus"].size() == 1 && f["gpus"].contains("0000:3a:00.0");
  }));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

struct LeaseSync {
  LeaseSync(const std::string& kubeconfig, const std::string& root, const std::string& lease_file) {
    std::string binary = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-lease-sync";
    pid = ::fork();
    if (pid == 0) {
      ::execl(binary.c_str(), binary.c_str(), "--kubeconfig", kubeconfig.c_str(), "--node",
              "node-1", "--lease-file", lease_file.c_str(), "--root", root.c_str(),
              "--inventory-interval-ms", "200", nullptr);
      ::_exit(127);
    }
  }
  ~LeaseSync() {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
  pid_t pid;
};

TEST(LeaseSync, PublishesTheNodesGpusOnceAndAgainOnlyWhenTheyChange) {
  FakeApiServer server;
  server.SetWatchSeconds(0.5);
  TempDir dir;
  testing::WriteKubeconfigFile(dir.path() + "/kubeconfig", server.url());
  Client client(testing::PlainConfig(server));
  ASSERT_TRUE(client
                  .Create(Resource::Nodes(), "",
                          {{"apiVersion", "v1"},
                           {"kind", "Node"},
                           {"metadata", {{"name", "node-1"}, {"labels", {{"a", "b"}}}}}})
                  .ok());
  const std::string root = testing::MaterializeHost("hgx-h100-dgx");
  inventory::ReadOptions read;
  read.root = root;
  auto inv = inventory::ReadInventory(read);
  ASSERT_TRUE(inv.ok());
  ASSERT_FALSE(inv->Gpus().empty());

  auto annotation = [&]() -> std::optional<NodeGpus> {
    auto node = client.Get(Resource::Nodes(), "", "node-1");
    if (!node) return std::nullopt;
    auto gpus = NodeGpusOf(*node);
    if (!gpus.ok()) return std::nullopt;
    return *gpus;
  };
  auto patches = [&] {
    int n = 0;
    for (const auto& entry : server.Log())
      if (entry["method"] == "PATCH" && entry["path"] == "/api/v1/nodes/node-1") ++n;
    return n;
  };
  {
    LeaseSync sync(dir.path() + "/kubeconfig", root, dir.path() + "/leases.json");
    std::optional<NodeGpus> published;
    testing::WaitUntil([&] { return (published = annotation()).has_value(); });
    ASSERT_TRUE(published.has_value());
    EXPECT_EQ(published->node, "node-1");
    ASSERT_EQ(published->gpus.size(), inv->Gpus().size());
    for (size_t i = 0; i < inv->Gpus().size(); ++i) {
      const auto* gpu = inv->Gpus()[i];
      EXPECT_EQ(published->gpus[i].pci_address, gpu->pci_address);
      EXPECT_EQ(published->gpus[i].uuid, gpu->gpu_uuid.value_or(""));
      EXPECT_EQ(published->gpus[i].model, gpu->model);
      EXPECT_EQ(published->gpus[i].numa_node, gpu->numa_node);
      EXPECT_EQ(published->gpus[i].upstream_bridges, gpu->upstream_bridges);
    }
    EXPECT_TRUE(published->partition_table.is_null());
    // The merge patch left the Node's other metadata alone.
    EXPECT_EQ((*client.Get(Resource::Nodes(), "", "node-1"))["metadata"]["labels"]["a"], "b");
    // Several inventory rounds later: the same GPUs, no second patch.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    EXPECT_EQ(patches(), 1);
  }
  {
    // A restarted agent finds its annotation current and leaves it.
    LeaseSync sync(dir.path() + "/kubeconfig", root, dir.path() + "/leases.json");
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    EXPECT_EQ(patches(), 1);
    // Someone else changes the annotation: the next round puts the inventory back.
    ASSERT_TRUE(
        client.Patch(Resource::Nodes(), "", "node-1", NodeGpusPatch(NodeGpusAnnotation(NodeGpus{})))
            .ok());
    EXPECT_TRUE(testing::WaitUntil([&] {
      auto now = annotation();
      return now && now->gpus.size() == inv->Gpus().size();
    }));
    EXPECT_EQ(patches(), 3);  // ours, the other writer's, and the repair
  }
}

TEST(NodeGpus, AnnotationRoundTripsAndNamesBadFields) {
  NodeGpus gpus;
  gpus.gpus = {{"0000:18:00.0", "GPU-1", "H100", 0, {"0000:17:00.0", "0000:16:00.0"}},
               {"0000:2a:00.0", "", "H100", 1, {}}};
  gpus.partition_table = {{"board", "hgx-h100-8gpu"}};
  auto parsed = ParseNodeGpusAnnotation(NodeGpusAnnotation(gpus));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, gpus);
  auto bad =
      ParseNodeGpusAnnotation(R"({"version":1,"gpus":[{"pci":"0000:18:00.0"},{"model":"x"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("gpus[1].pci"), std::string::npos) << bad.error().message;
  auto twice = ParseNodeGpusAnnotation(R"({"version":1,"gpus":[{"pci":"a"},{"pci":"a"}]})");
  ASSERT_FALSE(twice.ok());
  Json node = {{"metadata", {{"name", "n1"}, {"annotations", {{kNodeGpusAnnotation, "{"}}}}}};
  auto of = NodeGpusOf(node);
  ASSERT_FALSE(of.ok());
  EXPECT_NE(of.error().message.find("node n1"), std::string::npos);
  EXPECT_FALSE(NodeGpusOf(Json{{"metadata", {{"name", "n2"}}}})->has_value());
  // Wrong types are errors naming the field, never exceptions (inputs found by fuzzing).
  for (const char* text : {R"({"version":[1],"gpus":[]})", R"({"version":1e300,"gpus":[]})",
                           R"({"version":"1","gpus":[]})"}) {
    auto wrong = ParseNodeGpusAnnotation(text);
    ASSERT_FALSE(wrong.ok()) << text;
    EXPECT_NE(wrong.error().message.find("version"), std::string::npos) << text;
  }
  auto numa = ParseNodeGpusAnnotation(R"({"version":1,"gpus":[{"pci":"a","numa":1e9}]})");
  ASSERT_FALSE(numa.ok());
  EXPECT_NE(numa.error().message.find("gpus[0].numa"), std::string::npos);
  EXPECT_FALSE(NodeGpusOf(Json::array()).ok());
  auto unnamed = NodeGpusOf(Json{{"metadata", {{"name", 7}}}});  // no annotation: nothing
  ASSERT_TRUE(unnamed.ok());
  EXPECT_FALSE(unnamed->has_value());
}

}  // namespace
}  // namespace tessera::k8s
