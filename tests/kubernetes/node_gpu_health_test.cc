// Each GPU's health as the node agent publishes it with its node's GPUs: the annotation's health
// field (bounded, unknown steps refused) and the control plane's Node watch handing a published
// fault on to the service.
#include <gtest/gtest.h>

#include <mutex>

#include "backends/kubernetes/kubernetes_backend.h"
#include "backends/kubernetes/node_gpus.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/plain_config.h"
#include "support/wait.h"

namespace tessera::k8s {
namespace {

health::FaultEntry Xid79(int64_t at_ms) {
  return {at_ms, "xid",      79,
          "gpu", "stop-gpu", "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:18:00.0"};
}

health::GpuHealth Faulted() {
  health::GpuHealth health;
  health.step = health::RecoveryStep::kDraining;
  health.reason = "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:18:00.0";
  health.attempts = 1;
  health.step_since_ms = 1700000000500;
  health.faulted_ms = 1700000000000;
  health.history = {Xid79(1700000000000)};
  return health;
}

NodeGpus TwoGpus() {
  NodeGpus gpus;
  gpus.gpus.push_back({"0000:18:00.0", "GPU-aaaa", "H100", 0, {}, {}});
  gpus.gpus.push_back({"0000:2a:00.0", "GPU-bbbb", "H100", 0, {}, {}});
  return gpus;
}

TEST(NodeGpuHealth, AFaultRoundTripsAndAHealthyGpuPublishesNoHealth) {
  NodeGpus gpus = TwoGpus();
  const std::string healthy_text = NodeGpusAnnotation(gpus);
  EXPECT_EQ(healthy_text.find("health"), std::string::npos);
  gpus.gpus[0].health = Faulted();
  const std::string text = NodeGpusAnnotation(gpus);
  EXPECT_NE(text.find("\"step\":\"draining\""), std::string::npos) << text;
  auto parsed = ParseNodeGpusAnnotation(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, gpus);
  EXPECT_TRUE(parsed->gpus[1].health.in_service());
}

TEST(NodeGpuHealth, PublishedHealthIsBoundedAndUnknownStepsAreRefused) {
  NodeGpus gpus = TwoGpus();
  gpus.gpus[0].health = Faulted();
  gpus.gpus[0].health.reason = std::string(2000, 'r');
  for (int i = 0; i < 40; ++i)
    gpus.gpus[0].health.history.push_back(Xid79(1700000000001 + i));
  auto parsed = ParseNodeGpusAnnotation(NodeGpusAnnotation(gpus));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const auto& published = parsed->gpus[0].health;
  EXPECT_LE(published.reason.size(), kMaxHealthReasonBytes);
  ASSERT_EQ(published.history.size(), health::kMaxHistory);  // the newest
  EXPECT_EQ(published.history.back().at_ms, 1700000000040);

  auto annotation_with = [](const Json& health) {
    Json doc = {{"version", 1}, {"gpus", {{{"pci", "0000:18:00.0"}, {"health", health}}}}};
    return ParseNodeGpusAnnotation(doc.dump());
  };
  Json health = GpuHealthJson(Faulted());
  auto refused = [&](const char* field, const Json& value, const std::string& names) {
    Json bad = health;
    bad[field] = value;
    auto result = annotation_with(bad);
    EXPECT_FALSE(result.ok()) << field;
    if (!result.ok()) {
      EXPECT_NE(result.error().message.find(names), std::string::npos) << result.error().message;
    }
  };
  refused("step", "rebooting", "gpus[0].health: step: unknown");
  refused("reason", std::string(kMaxHealthReasonBytes + 1, 'r'), "reason: longer than");
  refused("attempts", -1, "attempts");
  refused("faultedMs", 1e300, "faultedMs");
  refused("history", Json::array({Json::object({{"reason", 7}})}), "history[0].reason");
  Json many = Json::array();
  for (size_t i = 0; i <= health::kMaxHistory; ++i)
    many.push_back(GpuHealthJson(Faulted())["history"][0]);
  refused("history", many, "history: more than");
  Json no_step = health;
  no_step.erase("step");
  EXPECT_FALSE(annotation_with(no_step).ok());
}

// The control plane's Node watch (what tessera serve turns into its node inventory) carries a
// GPU's published fault, and its return to service.
TEST(NodeGpuHealth, APublishedFaultReachesTheControlPlanesNodeList) {
  testing::FakeApiServer server;
  server.SetWatchSeconds(0.5);
  Client client(testing::PlainConfig(server));
  NodeGpus gpus = TwoGpus();
  ASSERT_TRUE(client
                  .Create(Resource::Nodes(), "",
                          {{"apiVersion", "v1"},
                           {"kind", "Node"},
                           {"metadata",
                            {{"name", "node-1"},
                             {"annotations", {{kNodeGpusAnnotation, NodeGpusAnnotation(gpus)}}}}}})
                  .ok());
  std::mutex mu;
  std::vector<NodeGpus> seen;
  auto watch = backends::StartNodeGpuWatch(testing::PlainConfig(server),
                                           [&](const std::vector<NodeGpus>& nodes) {
                                             std::lock_guard lock(mu);
                                             seen = nodes;
                                           });
  auto health_of = [&](size_t gpu) -> std::optional<health::GpuHealth> {
    std::lock_guard lock(mu);
    if (seen.size() != 1 || seen[0].gpus.size() != 2) return std::nullopt;
    return seen[0].gpus[gpu].health;
  };
  ASSERT_TRUE(testing::WaitUntil([&] { return health_of(0).has_value(); }));
  EXPECT_TRUE(health_of(0)->in_service());

  gpus.gpus[0].health = Faulted();
  ASSERT_TRUE(
      client.Patch(Resource::Nodes(), "", "node-1", NodeGpusPatch(NodeGpusAnnotation(gpus))).ok());
  ASSERT_TRUE(testing::WaitUntil([&] {
    auto health = health_of(0);
    return health && health->step == health::RecoveryStep::kDraining;
  }));
  EXPECT_EQ(*health_of(0), Faulted());
  EXPECT_TRUE(health_of(1)->in_service());

  gpus.gpus[0].health.step = health::RecoveryStep::kHealthy;
  gpus.gpus[0].health.faulted_ms = 0;
  ASSERT_TRUE(
      client.Patch(Resource::Nodes(), "", "node-1", NodeGpusPatch(NodeGpusAnnotation(gpus))).ok());
  ASSERT_TRUE(testing::WaitUntil([&] {
    auto health = health_of(0);
    return health && health->in_service() && health->history.size() == 1;
  }));
}

}  // namespace
}  // namespace tessera::k8s
