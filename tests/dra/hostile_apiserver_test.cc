// The real tessera-dra-plugin against a hostile API server (the scripted one, answering some
// claims with a 100,000-deep object, a 200 MB body, or one byte a second): each such claim gets
// its own error, the plugin stays up and small, and a claim that is answered normally prepares
// while the slow one still hangs.
#include <signal.h>

#include <atomic>
#include <future>

#include "dra/plugin_fixture.h"

namespace tessera::dra {
namespace {

using namespace e2e;
using Clock = std::chrono::steady_clock;

constexpr long kMaxPeakRssKb = 50 * 1024;

class HostileApiServer : public DraPlugin {
 protected:
  void SetUp() override {
    DraPlugin::SetUp();
    StartPlugin();
    Register(kubelet_);
  }

  // Answers GETs of claim `name` with `rule` ("deep", "huge_bytes", "trickle_interval"...),
  // every time.
  void Hostile(const std::string& name, Json rule) {
    rule["method"] = "GET";
    rule["path"] = "/resourceclaims/" + name + "$";
    rule["times"] = 1000;
    server_.Script(Json::array({rule}));
  }
  bool ClaimGetSeen(const std::string& name) { return ClaimGets(name) > 0; }
  bool PluginAlive() { return ::kill(plugin_->pid(), 0) == 0; }

  DraKubelet kubelet_{Registry(), "gpu.tessera.dev"};
};

TEST_F(HostileApiServer, DeepAndHugeClaimsAreRefusedPerClaimAndThePluginStaysSmall) {
  ClaimRef deep = CreateClaim("deep", {0});
  ClaimRef huge = CreateClaim("huge", {1});
  ClaimRef chunked = CreateClaim("chunked", {2});
  ClaimRef fine = CreateClaim("fine", {3});
  Hostile("deep", {{"deep", 100000}});
  Hostile("huge", {{"huge_bytes", 200 << 20}});
  // No Content-Length: only counting while reading stops it.
  Hostile("chunked", {{"huge_bytes", 200 << 20}, {"chunked", true}});

  std::string rpc_error;
  auto results = kubelet_.Prepare({deep, huge, chunked, fine}, &rpc_error);
  ASSERT_EQ(rpc_error, "") << plugin_->Log();
  ASSERT_EQ(results.size(), 4u);
  EXPECT_NE(results[deep.uid].error.find("nested deeper than"), std::string::npos)
      << results[deep.uid].error;
  EXPECT_NE(results[huge.uid].error.find("response body larger than 1048576 bytes"),
            std::string::npos)
      << results[huge.uid].error;
  EXPECT_NE(results[chunked.uid].error.find("response body larger than 1048576 bytes"),
            std::string::npos)
      << results[chunked.uid].error;
  EXPECT_EQ(results[fine.uid].error, "");
  EXPECT_EQ(results[fine.uid].devices.size(), 1u);
  for (const auto& ref : {deep, huge, chunked}) {
    EXPECT_TRUE(results[ref.uid].devices.empty());
    EXPECT_FALSE(SpecExists(ref));
    // The error is an excerpt, not the claim.
    EXPECT_LT(results[ref.uid].error.size(), 1000u);
  }
  // kubelet retries: the same claims again, and the plugin is still there to refuse them.
  results = kubelet_.Prepare({deep, huge, chunked}, &rpc_error);
  ASSERT_EQ(rpc_error, "") << plugin_->Log();
  EXPECT_NE(results[deep.uid].error, "");
  EXPECT_NE(results[huge.uid].error, "");
  EXPECT_TRUE(PluginAlive());
  const long peak = plugin_->PeakRssKb();
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, kMaxPeakRssKb) << "peak RSS " << peak << " kB";
  EXPECT_EQ(plugin_->Stop(), 0) << plugin_->Log();
}

TEST_F(HostileApiServer, ATricklingClaimDelaysNoOtherAndFailsWithinKubeletsCall) {
  ClaimRef slow = CreateClaim("slow", {0});
  ClaimRef fast = CreateClaim("fast", {1});
  Hostile("slow", {{"trickle_interval", 1.0}});

  std::atomic<bool> slow_done{false};
  auto slow_call = std::async(std::launch::async, [&] {
    std::string rpc_error;
    auto results = kubelet_.Prepare({slow}, &rpc_error);
    slow_done = true;
    return std::make_pair(rpc_error, results[slow.uid].error);
  });
  ASSERT_TRUE(WaitUntil([&] { return ClaimGetSeen("slow"); })) << plugin_->Log();

  // The slow claim's GET is in flight. Another claim is fetched on a connection of its own.
  const auto start = Clock::now();
  std::string rpc_error;
  auto results = kubelet_.Prepare({fast}, &rpc_error);
  const auto took = Clock::now() - start;
  ASSERT_EQ(rpc_error, "") << plugin_->Log();
  EXPECT_EQ(results[fast.uid].error, "");
  EXPECT_EQ(results[fast.uid].devices.size(), 1u);
  // Not serialised behind the slow claim, which the plugin gives 20 s: the fast one was done
  // while the slow one still hung, in well under that.
  EXPECT_FALSE(slow_done.load());
  EXPECT_LT(took, std::chrono::seconds(5))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";

  // The slow claim fails on its own deadline, inside kubelet's 45 s call (the emulator's
  // deadline: a miss would be an RPC error).
  auto [slow_rpc_error, slow_error] = slow_call.get();
  EXPECT_EQ(slow_rpc_error, "");
  EXPECT_NE(slow_error.find("timed out"), std::string::npos) << slow_error;
  EXPECT_FALSE(SpecExists(slow));
  EXPECT_TRUE(PluginAlive());
  EXPECT_LT(plugin_->PeakRssKb(), kMaxPeakRssKb);
}

}  // namespace
}  // namespace tessera::dra
