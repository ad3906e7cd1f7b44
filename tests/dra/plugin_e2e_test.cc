// The real tessera-dra-plugin process on a fixture host, the DRA kubelet emulator over real unix
// sockets, and the scripted API server holding ResourceClaims and the ResourceSlice.
#include "dra/plugin_fixture.h"

namespace tessera::dra {
namespace {

using namespace e2e;

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
  EXPECT_EQ(slice["spec"]["devices"][0]["capacity"]["memory"]["value"], "80Gi");
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

TEST_F(DraPlugin, HealthStreamReportsAVanishedGpuUnhealthyAndItsReturn) {
  testing::TempHost host("hgx-h100-dgx");
  StartPlugin(host.root());
  DraKubelet kubelet(Registry(), "gpu.tessera.dev");
  Register(kubelet);
  testing::DraHealthWatch watch(kubelet.endpoint());
  const std::string gpu0 = node_.devices[0].name, gpu1 = node_.devices[1].name;
  auto health_of = [&](const std::string& device) {
    auto latest = watch.Latest();
    return latest.count(device) ? latest[device].health : -1;
  };
  ASSERT_TRUE(WaitUntil([&] { return health_of(gpu0) == 1; })) << watch.Ended() << plugin_->Log();
  auto first = watch.Latest();
  EXPECT_EQ(first.size(), 8u);
  EXPECT_EQ(first[gpu0].pool, "node-a");
  EXPECT_GT(first[gpu0].last_updated_time, 0);
  EXPECT_GT(first[gpu0].health_check_timeout_seconds, 0);

  std::string node = host.root() + "/dev/nvidia0";
  std::string moved = host.root() + "/dev/nvidia0.away";
  ASSERT_EQ(::rename(node.c_str(), moved.c_str()), 0);
  ASSERT_TRUE(WaitUntil([&] { return health_of(gpu0) == 2; })) << plugin_->Log();
  EXPECT_EQ(health_of(gpu1), 1);  // only the vanished GPU
  EXPECT_GE(watch.Latest()[gpu0].last_updated_time, first[gpu0].last_updated_time);
  ASSERT_EQ(::rename(moved.c_str(), node.c_str()), 0);
  ASSERT_TRUE(WaitUntil([&] { return health_of(gpu0) == 1; })) << plugin_->Log();
  // A lease is not a health problem: a quarantined GPU leaves the slice but stays HEALTHY.
  ASSERT_TRUE(WriteFileAtomically(LeaseFile(), R"({"version":1,"gpus":{")" +
                                                   node_.devices[1].pci_address +
                                                   R"(":{"state":"quarantined"}}})")
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return SliceDevices() == 7; })) << plugin_->Log();
  EXPECT_EQ(health_of(gpu1), 1);
  EXPECT_EQ(watch.Ended(), "");  // the stream is still open
  // An open stream does not hold the plugin up when it is told to stop.
  EXPECT_EQ(plugin_->Stop(), 0);
  ASSERT_TRUE(WaitUntil([&] { return !watch.Ended().empty(); }));
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
      kubelet.Register(std::chrono::seconds(60), /*refuse=*/true, "driver name already in use");
  EXPECT_EQ(problem, "driver name already in use");
  ASSERT_TRUE(WaitUntil([&] {
    return plugin_->Log().find("kubelet refused the registration: driver name already in use") !=
           std::string::npos;
  })) << plugin_->Log();
}

}  // namespace
}  // namespace tessera::dra
