// The real tessera-dra-plugin process on a fixture host, the DRA kubelet emulator over real unix
// sockets, and the scripted API server holding ResourceClaims and the ResourceSlice.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "backends/kubernetes/kubernetes.h"
#include "common/atomic_file.h"
#include "deviceplugin/plugin_process.h"
#include "dra/dra_kubelet.h"
#include "kubernetes/fake_apiserver.h"
#include "support/fixture_host.h"

namespace tessera::dra {
namespace {

namespace fs = std::filesystem;
using k8s::Json;
using testing::DraKubelet;
using testing::FakeApiServer;
using testing::PluginProcess;
using testing::TempDir;

const k8s::Resource kClaims{"/apis/resource.k8s.io/v1", "resourceclaims", true};
const k8s::Resource kSlices{"/apis/resource.k8s.io/v1", "resourceslices", false};

// Polls `ready` every 50 ms for up to 20 s: a generous bound on an event, not a timing test.
bool WaitUntil(const std::function<bool()>& ready) {
  for (int i = 0; i < 400; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class DraPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::MaterializeHost("hgx-h100-dgx");
    std::ofstream(dir_.path() + "/kubeconfig")
        << "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
           "    server: "
        << server_.url() << "\ncontexts:\n- name: t\n  context: {cluster: c}\n";
    k8s::ClientConfig config;
    config.server = server_.url();
    client_ = std::make_unique<k8s::Client>(config);
    inventory::ReadOptions read;
    read.root = root_;
    auto inv = inventory::ReadInventory(read);
    ASSERT_TRUE(inv.ok());
    auto node = DescribeNode(*inv, {});
    ASSERT_TRUE(node.ok());
    node_ = *node;
    ASSERT_EQ(node_.devices.size(), 8u);
  }

  std::string Registry() const { return dir_.path() + "/registry"; }
  std::string PluginDir() const { return dir_.path() + "/plugin"; }
  std::string CdiDir() const { return dir_.path() + "/cdi"; }
  std::string LeaseFile() const { return dir_.path() + "/leases.json"; }

  void StartPlugin(const std::string& root = "") {
    if (!root.empty()) root_ = root;
    plugin_ = std::make_unique<PluginProcess>(
        testing::DraPluginBinary(),
        std::vector<std::string>{"--node-name", "node-a", "--root", root_, "--kubeconfig",
                                 dir_.path() + "/kubeconfig", "--registry-dir", Registry(),
                                 "--plugin-dir", PluginDir(), "--cdi-dir", CdiDir(), "--lease-file",
                                 LeaseFile(), "--poll-ms", "100"},
        dir_.path() + "/plugin.log");
  }

  void Register(DraKubelet& kubelet) {
    std::string problem = kubelet.Register(std::chrono::seconds(20));
    ASSERT_EQ(problem, "") << plugin_->Log();
  }

  // Creates a claim allocated to devices `indexes` of this node (status written directly, as
  // the scheduler would), returns its reference with the server-assigned UID.
  ClaimRef CreateClaim(const std::string& name, const std::vector<size_t>& indexes,
                       bool allocated = true, const std::string& pool = "node-a") {
    Json results = Json::array();
    for (size_t i : indexes) {
      results.push_back({{"request", "gpus"},
                         {"driver", "gpu.tessera.dev"},
                         {"pool", pool},
                         {"device", i < 100 ? node_.devices[i].name : "gpu-0000-ff-00-0"}});
    }
    Json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", "team"}}},
                  {"spec", {{"devices", {{"requests", Json::array()}}}}}};
    if (allocated) claim["status"] = {{"allocation", {{"devices", {{"results", results}}}}}};
    auto created = client_->Create(kClaims, "team", claim);
    EXPECT_TRUE(created.ok());
    return ClaimRef{"team", name, (*created)["metadata"]["uid"]};
  }

  Json Slice() {
    auto slice = client_->Get(kSlices, "", SliceName("gpu.tessera.dev", "node-a"));
    return slice ? *slice : Json();
  }
  size_t SliceDevices() {
    Json slice = Slice();
    return slice.is_object() ? slice["spec"]["devices"].size() : 0;
  }
  int ClaimGets(const std::string& name) {
    int gets = 0;
    for (const auto& entry : server_.Log()) {
      if (entry["method"] == "GET" &&
          entry["path"] == "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/" + name) {
        ++gets;
      }
    }
    return gets;
  }
  bool SpecExists(const ClaimRef& ref) const {
    return fs::exists(ClaimSpecPath(CdiDir(), ref.uid));
  }

  FakeApiServer server_;
  TempDir dir_;
  std::string root_;
  std::unique_ptr<k8s::Client> client_;
  NodeDevices node_;
  std::unique_ptr<PluginProcess> plugin_;
};

TEST_F(DraPlugin, RegistersAndPublishesOnePoolWithEveryGpu) {
  StartPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  EXPECT_EQ(kubelet.version(), "v1.DRAPlugin");
  EXPECT_EQ(kubelet.endpoint(), PluginDir() + "/dra.sock");
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  Json slice = Slice();
  EXPECT_EQ(slice["spec"]["nodeName"], "node-a");
  EXPECT_EQ(slice["spec"]["pool"]["name"], "node-a");
  EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(slice["spec"]["devices"][0]["name"], node_.devices[0].name);
  // An older kubelet that speaks only v1beta1 registers too.
  DraKubelet old_kubelet(Registry(), "gpu.tessera.dev", {"v1beta1.DRAPlugin"});
  Register(old_kubelet);
  EXPECT_EQ(old_kubelet.version(), "v1beta1.DRAPlugin");
}

TEST_F(DraPlugin, PreparesOneTwoAndEightGpusOverBothVersions) {
  StartPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  int n = 0;
  for (const char* version : {"v1.DRAPlugin", "v1beta1.DRAPlugin"}) {
    kubelet.UseVersion(version);
    for (size_t count : {1u, 2u, 8u}) {
      std::vector<size_t> indexes;
      for (size_t i = 0; i < count; ++i)
        indexes.push_back(i);
      ClaimRef ref = CreateClaim("claim-" + std::to_string(n++), indexes);
      std::string rpc_error;
      auto results = kubelet.Prepare({ref}, &rpc_error);
      ASSERT_EQ(rpc_error, "");
      ASSERT_EQ(results.count(ref.uid), 1u);
      const auto& result = results[ref.uid];
      ASSERT_EQ(result.error, "") << version;
      ASSERT_EQ(result.devices.size(), count);
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(result.devices[i].device_name, node_.devices[i].name);
        EXPECT_EQ(result.devices[i].pool_name, "node-a");
        EXPECT_EQ(result.devices[i].cdi_device_ids[0], ClaimCdiId(ref.uid, node_.devices[i].name));
      }
      auto text = ReadWholeFile(ClaimSpecPath(CdiDir(), ref.uid));
      ASSERT_TRUE(text.ok());
      EXPECT_TRUE(cdi::CheckSpecText(*text).empty());
      auto spec = cdi::ParseSpec(*text).spec;
      EXPECT_EQ(spec.kind, "gpu.tessera.dev/claim");
      EXPECT_EQ(spec.devices.size(), count);
      auto done = kubelet.Unprepare({ref});
      EXPECT_EQ(done[ref.uid], "");
      EXPECT_FALSE(SpecExists(ref));
    }
  }
}

TEST_F(DraPlugin, RetriedPrepareAnswersTheSameWithoutAnotherGet) {
  StartPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  ClaimRef ref = CreateClaim("retry", {2, 3});
  auto first = kubelet.Prepare({ref});
  ASSERT_EQ(first[ref.uid].error, "");
  auto second = kubelet.Prepare({ref});
  ASSERT_EQ(second[ref.uid].error, "");
  EXPECT_EQ(second[ref.uid].devices, first[ref.uid].devices);
  EXPECT_EQ(ClaimGets("retry"), 1);
}

TEST_F(DraPlugin, RefusesReplacedUnallocatedForeignAndQuarantinedClaimsWritingNothing) {
  ASSERT_TRUE(WriteFileAtomically(LeaseFile(), R"({"version":1,"gpus":{")" +
                                                   node_.devices[5].pci_address +
                                                   R"(":{"state":"quarantined","reason":"xid"}}})")
                  .ok());
  StartPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  ClaimRef replaced = CreateClaim("replaced", {0});
  replaced.uid = "00000000-0000-4000-8000-000000000000";  // kubelet's claim was deleted
  ClaimRef pending = CreateClaim("pending", {}, /*allocated=*/false);
  ClaimRef foreign = CreateClaim("foreign", {999});
  ClaimRef quarantined = CreateClaim("quarantined", {4, 5});
  ClaimRef missing{"team", "missing", "11111111-0000-4000-8000-000000000000"};
  auto results = kubelet.Prepare({replaced, pending, foreign, quarantined, missing});
  ASSERT_EQ(results.size(), 5u);
  EXPECT_NE(results[replaced.uid].error.find("UID"), std::string::npos);
  EXPECT_NE(results[pending.uid].error.find("not allocated"), std::string::npos);
  EXPECT_NE(results[foreign.uid].error.find("not published"), std::string::npos);
  EXPECT_NE(results[quarantined.uid].error.find("quarantined"), std::string::npos);
  EXPECT_NE(results[missing.uid].error, "");
  for (const auto& ref : {replaced, pending, foreign, quarantined, missing}) {
    EXPECT_TRUE(results[ref.uid].devices.empty());
    EXPECT_FALSE(SpecExists(ref));
  }
  // The quarantined GPU is not in the slice either.
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 7; })) << plugin_->Log();
}

TEST_F(DraPlugin, BlockedDeviceIsWithdrawnFromTheSliceAndComesBack) {
  StartPlugin();
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  int64_t generation = Slice()["spec"]["pool"]["generation"];
  ASSERT_TRUE(WriteFileAtomically(LeaseFile(), R"({"version":1,"gpus":{")" +
                                                   node_.devices[0].pci_address +
                                                   R"(":{"state":"checking"}}})")
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 7; })) << plugin_->Log();
  EXPECT_GT(Slice()["spec"]["pool"]["generation"].get<int64_t>(), generation);
  EXPECT_NE(Slice()["spec"]["devices"][0]["name"], node_.devices[0].name);
  ASSERT_TRUE(WriteFileAtomically(LeaseFile(), R"({"version":1,"gpus":{}})").ok());
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
}

TEST_F(DraPlugin, VanishedGpuIsWithdrawnAndRestored) {
  testing::TempHost host("hgx-h100-dgx");
  StartPlugin(host.root());
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  std::string node = host.root() + "/dev/nvidia0";
  std::string moved = host.root() + "/dev/nvidia0.away";
  ASSERT_EQ(::rename(node.c_str(), moved.c_str()), 0);
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 7; })) << plugin_->Log();
  EXPECT_NE(Slice()["spec"]["devices"][0]["name"], node_.devices[0].name);
  ClaimRef ref = CreateClaim("vanished", {0});
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  EXPECT_NE(kubelet.Prepare({ref})[ref.uid].error.find("unhealthy"), std::string::npos);
  ASSERT_EQ(::rename(moved.c_str(), node.c_str()), 0);
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  EXPECT_EQ(kubelet.Prepare({ref})[ref.uid].error, "");
}

TEST_F(DraPlugin, SliceConflictIsReReadAndRetried) {
  StartPlugin();
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 8; })) << plugin_->Log();
  // Someone else wrote the slice between our read and our update: 409 Conflict once.
  server_.Script({{{"method", "PUT"},
                   {"path", "resourceslices/"},
                   {"status", 409},
                   {"reason", "Conflict"},
                   {"times", 1}}});
  server_.ClearLog();
  ASSERT_TRUE(WriteFileAtomically(LeaseFile(), R"({"version":1,"gpus":{")" +
                                                   node_.devices[7].pci_address +
                                                   R"(":{"state":"draining"}}})")
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 7; })) << plugin_->Log();
  int puts = 0;
  for (const auto& entry : server_.Log())
    puts += entry["method"] == "PUT";
  EXPECT_EQ(puts, 2);
  EXPECT_NE(plugin_->Log().find("conflict, re-reading"), std::string::npos);
}

TEST_F(DraPlugin, RestartBetweenPrepareAndUnprepareKeepsTheClaim) {
  StartPlugin();
  ClaimRef ref;
  {
    DraKubelet kubelet(Registry(), "gpu.tessera.dev");
    Register(kubelet);
    ref = CreateClaim("restart", {1});
    auto prepared = kubelet.Prepare({ref});
    ASSERT_EQ(prepared[ref.uid].error, "");
  }
  EXPECT_EQ(plugin_->Stop(), 0);
  ASSERT_TRUE(SpecExists(ref));
  // The claim object is gone by the time kubelet unprepares: unprepare must not need it.
  ASSERT_TRUE(client_->Delete(kClaims, "team", "restart").ok());
  StartPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  auto again = kubelet.Prepare({ref});
  EXPECT_EQ(again[ref.uid].error, "");  // answered from the checkpoint
  auto done = kubelet.Unprepare({ref});
  EXPECT_EQ(done[ref.uid], "");
  EXPECT_FALSE(SpecExists(ref));
  // Unknown claims unprepare successfully.
  ClaimRef unknown{"team", "never", "22222222-0000-4000-8000-000000000000"};
  EXPECT_EQ(kubelet.Unprepare({unknown})[unknown.uid], "");
}

TEST_F(DraPlugin, DeletedSocketsAreServedAgain) {
  StartPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  std::string reg = Registry() + "/gpu.tessera.dev-reg.sock";
  std::string dra = PluginDir() + "/dra.sock";
  ASSERT_EQ(::unlink(reg.c_str()), 0);
  ASSERT_EQ(::unlink(dra.c_str()), 0);
  // Both paths were gone after unlink; a socket there now is a new one (inode numbers may be
  // reused, so they prove nothing).
  auto present = [](const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  };
  ASSERT_TRUE(WaitUntil([&] { return present(reg) && present(dra); })) << plugin_->Log();
  DraKubelet again(Registry(), "gpu.tessera.dev");
  Register(again);
  ClaimRef ref = CreateClaim("after-delete", {0});
  EXPECT_EQ(again.Prepare({ref})[ref.uid].error, "");
}

TEST_F(DraPlugin, RefusedRegistrationIsLoggedWithKubeletsReason) {
  StartPlugin();
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  std::string problem =
      kubelet.Register(std::chrono::seconds(20), /*refuse=*/true, "driver name already in use");
  EXPECT_EQ(problem, "driver name already in use");
  ASSERT_TRUE(WaitUntil([&] {
    return plugin_->Log().find("kubelet refused the registration: driver name already in use") !=
           std::string::npos;
  })) << plugin_->Log();
}

}  // namespace
}  // namespace tessera::dra
