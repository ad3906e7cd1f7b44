// The end-to-end fixture of the DRA plugin tests: the real tessera-dra-plugin process on a
// fixture host, the DRA kubelet emulator over real unix sockets, and the scripted API server
// holding ResourceClaims and the ResourceSlice.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "common/atomic_file.h"
#include "deviceplugin/plugin_process.h"
#include "dra/dra_kubelet.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "support/fixture_host.h"

namespace tessera::dra::e2e {

namespace fs = std::filesystem;
using k8s::Json;
using testing::DraKubelet;
using testing::FakeApiServer;
using testing::PluginProcess;
using testing::TempDir;

const k8s::Resource kClaims{"/apis/resource.k8s.io/v1", "resourceclaims", true};
const k8s::Resource kSlices{"/apis/resource.k8s.io/v1", "resourceslices", false};

// Polls `ready` every 50 ms for up to 60 s: a generous bound on an event (the plugin starts on
// busy shared cores), not a timing test.
inline bool WaitUntil(const std::function<bool()>& ready) {
  for (int i = 0; i < 1200; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class DraPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::MaterializeHost("hgx-h100-dgx");
    testing::WriteKubeconfigFile(dir_.path() + "/kubeconfig", server_.url());
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
  // Where the plugin writes claim specs; a test may point it elsewhere before StartPlugin.
  std::string CdiDir() const { return cdi_dir_.empty() ? dir_.path() + "/cdi" : cdi_dir_; }
  std::string LeaseFile() const { return dir_.path() + "/leases.json"; }

  // `extra` flags go after the fixture's own.
  void StartPlugin(const std::string& root = "", const std::vector<std::string>& extra = {}) {
    if (!root.empty()) root_ = root;
    std::vector<std::string> args = {"--node-name",    "node-a",
                                     "--root",         root_,
                                     "--kubeconfig",   dir_.path() + "/kubeconfig",
                                     "--registry-dir", Registry(),
                                     "--plugin-dir",   PluginDir(),
                                     "--cdi-dir",      CdiDir(),
                                     "--lease-file",   LeaseFile(),
                                     "--poll-ms",      "100"};
    args.insert(args.end(), extra.begin(), extra.end());
    plugin_ = std::make_unique<PluginProcess>(testing::DraPluginBinary(), args,
                                              dir_.path() + "/plugin.log");
  }

  void Register(DraKubelet& kubelet) {
    std::string problem = kubelet.Register(std::chrono::seconds(60));
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
    auto created = client_->Create(kClaims, "team", claim);
    EXPECT_TRUE(created.ok());
    if (allocated) {
      // The allocation goes through /status, as the scheduler writes it.
      EXPECT_TRUE(client_
                      ->Patch(kClaims, "team", name,
                              {{"status", {{"allocation", {{"devices", {{"results", results}}}}}}}},
                              k8s::PatchType::kMerge, "status")
                      .ok());
    }
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
  std::string cdi_dir_;
};

}  // namespace tessera::dra::e2e
