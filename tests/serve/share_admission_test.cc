// Share admission whose cost follows what can change: a real tessera-serve (null backend, the
// 8-GPU HGX fixture with the stand-in NVML's memory, every GPU drained so no share can start)
// flooded with shares by one tenancy. Scheduling passes are counted (/metrics), not timed;
// positions read as before the flood; the queue's totals count the pending shares.
#include <gtest/gtest.h>

#include "serve/serve_process.h"
#include "serve/submission_flood.h"
#include "support/fake_nvml_state.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class ShareAdmission : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus_ = WriteGpuRoms(host_.root());
    ASSERT_EQ(gpus_.size(), 8u);
    // Each GPU's memory is what makes it shareable.
    for (size_t i = 0; i < gpus_.size(); ++i)
      nvml_.Append("gpu " + gpus_[i] + " board=h100-80gb uuid=GPU-5e4b7c1" + std::to_string(i) +
                   "-3c2a-4d8e-9f10-a1b2c3d4e5f" + std::to_string(i));
    serve_ = std::make_unique<ServeProcess>(
        dir_.path(), NullBackendFlags(host_.root(), dir_.path(),
                                      {"--nvml", FAKE_NVML, "--mps-root", dir_.path() + "/mps"}));
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  static std::string Share(const std::string& tenancy) {
    return json{{"image", "busybox"},
                {"tenancy", tenancy},
                {"share", {{"memory", "10Gi"}, {"compute", 10}, {"mode", "timeslice"}}}}
        .dump();
  }

  // The queue's share entries as the admin reads them: id -> position.
  std::vector<std::pair<std::string, int>> Positions(const json& queue) {
    std::vector<std::pair<std::string, int>> out;
    for (const auto& entry : queue["queue"])
      out.emplace_back(entry["id"].get<std::string>(), entry["queue_position"].get<int>());
    return out;
  }

  TempHost host_{"hgx-h100-dgx"};
  FakeNvmlState nvml_{""};
  TempDir dir_;
  std::vector<std::string> gpus_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

TEST_F(ShareAdmission, AShareFloodRunsBoundedPassesAndMovesNoOneElsesPosition) {
  for (const auto& pci : gpus_) {
    int status = 0;
    CallJson(*admin_, "POST", "/v1/gpus/" + pci + "/drain", "", &status);
    ASSERT_EQ(status, 200) << pci;
  }
  // Three tenancies wait first, three shares each; then the flood's tenancy comes.
  std::vector<std::string> early;
  for (const std::string tenancy : {"alpha", "beta", "gamma"}) {
    int status = 0;
    CallJson(*admin_, "PUT", "/v1/tenancies/" + tenancy, "{}", &status);
    ASSERT_EQ(status, 200);
    for (int i = 0; i < 3; ++i) {
      auto answer = CallJson(*admin_, "POST", "/v1/containers", Share(tenancy), &status);
      ASSERT_EQ(status, 202) << answer;
      early.push_back(answer["id"].get<std::string>());
    }
  }
  // Nothing waiting can start, so none of them needed a pass; what the queue says is the fair
  // order: nobody has used anything, so tenancy by tenancy in the order they came.
  json queue;
  ASSERT_TRUE(WaitUntil([&] {
    queue = CallJson(*admin_, "GET", "/v1/queue");
    return queue["queue"].size() == early.size();
  })) << queue;
  const auto before = Positions(queue);
  for (size_t i = 0; i < early.size(); ++i)
    EXPECT_EQ(before[i], std::make_pair(early[i], static_cast<int>(i) + 1)) << queue;
  EXPECT_NE(queue["queue"][0]["reason"].get<std::string>().find("waiting: room on a GPU: "),
            std::string::npos)
      << queue["queue"][0];

  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/flood", "{}", &status);
  ASSERT_EQ(status, 200);
  const uint64_t passes_before = MetricCounter(*serve_, "tessera_scheduling_passes_total");
  constexpr int kFlood = 2000, kThreads = 4;
  const FloodCounts flood = FloodSubmissions(*serve_, Share("flood"), kFlood, kThreads);
  ASSERT_EQ(flood.accepted, kFlood);
  ASSERT_EQ(flood.other, 0);
  // No share of the flood could start anywhere: no pass ran for them (a few at most, for
  // something else that changed), never one per share.
  const uint64_t passes = MetricCounter(*serve_, "tessera_scheduling_passes_total") - passes_before;
  EXPECT_LE(passes, 3u) << "passes for " << kFlood << " shares that fit nowhere";

  // The earlier shares keep their places; the flood's come after them (the first 1,000 entries
  // are listed).
  ASSERT_TRUE(WaitUntil([&] {
    queue = CallJson(*admin_, "GET", "/v1/queue");
    return queue["queue_total"] == static_cast<int>(early.size()) + kFlood &&
           queue["queue"].size() == 1000u && queue["queue"][999]["tenancy"] == "flood";
  })) << queue["queue"].size();
  const auto after = Positions(queue);
  for (size_t i = 0; i < early.size(); ++i)
    EXPECT_EQ(after[i], before[i]);
  for (size_t i = early.size(); i < after.size(); ++i)
    ASSERT_EQ(after[i].second, static_cast<int>(i) + 1);
  // The totals count the shares that wait (queue_total, and the dashboard's count).
  EXPECT_EQ(queue["queue_total"], static_cast<int>(early.size()) + kFlood);
  auto dashboard = CallJson(*admin_, "GET", "/v1/dashboard");
  EXPECT_EQ(dashboard["counts"]["queue"], static_cast<int>(early.size()) + kFlood) << dashboard;
  // A tenant's own total counts its own shares.
  auto tenant = serve_->Connect(TenancyToken(*admin_, "beta"));
  EXPECT_EQ(CallJson(*tenant, "GET", "/v1/queue")["queue_total"], 3);

  // A GPU opens: a pass runs and places by the same order, the first tenancy's shares first.
  CallJson(*admin_, "POST", "/v1/gpus/" + gpus_[0] + "/undrain", "", &status);
  ASSERT_EQ(status, 200);
  json first;
  ASSERT_TRUE(WaitUntil([&] {
    first = CallJson(*admin_, "GET", "/v1/containers/" + early[0]);
    return first.value("state", "") != "pending";
  })) << first;
  EXPECT_EQ(first["gpus"], json::array({gpus_[0]})) << first;
  EXPECT_GT(MetricCounter(*serve_, "tessera_scheduling_passes_total"), passes_before + passes);
}

}  // namespace
}  // namespace tessera::testing
