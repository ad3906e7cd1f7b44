// Admission whose cost follows what can change: a real tessera-serve (null backend, the 8-GPU HGX
// fixture with every GPU drained, so nothing can start) flooded by one tenancy. Scheduling passes
// are counted (/metrics), not timed; positions and reasons read as before; another tenancy is
// served beside the flood; the default pending quota stops the flood with 429; a reservation of
// another tenancy is named as such only.
#include <gtest/gtest.h>

#include "serve/null_serve_fixture.h"
#include "serve/submission_flood.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class Admission : public NullServeTest {
 protected:
  // Drains `count` GPUs (the highest PCI addresses first is not needed: any `count` of them).
  void Drain(size_t count) {
    auto gpus = CallJson(*admin_, "GET", "/v1/gpus")["gpus"];
    ASSERT_GE(gpus.size(), count);
    for (size_t i = 0; i < count; ++i) {
      int status = 0;
      CallJson(*admin_, "POST",
               "/v1/gpus/" + gpus[gpus.size() - 1 - i]["id"].get<std::string>() + "/drain", "",
               &status);
      ASSERT_EQ(status, 200);
    }
  }

  std::unique_ptr<client::Connection> TokenFor(const std::string& tenancy) {
    const std::string token = TenancyToken(*admin_, tenancy);
    EXPECT_FALSE(token.empty()) << tenancy;
    return serve_->Connect(token);
  }

  static std::string Submission(const std::string& tenancy, int gpus) {
    return R"({"image":"busybox","tenancy":")" + tenancy + R"(","gpus":)" + std::to_string(gpus) +
           "}";
  }
};

TEST_F(Admission, AFloodRunsBoundedPassesStopsAtTheDefaultQuotaAndLetsOthersThrough) {
  ASSERT_NO_FATAL_FAILURE(StartServe());
  Drain(8);
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/flood", "{}", &status);
  ASSERT_EQ(status, 200);
  const uint64_t passes_before = MetricCounter(*serve_, "tessera_scheduling_passes_total");
  // 10,000 requests that cannot be placed, from four connections at once.
  constexpr int kFlood = 10000, kThreads = 4;
  const FloodCounts flood = FloodSubmissions(*serve_, Submission("flood", 1), kFlood, kThreads);
  ASSERT_EQ(flood.accepted, kFlood);
  ASSERT_EQ(flood.other, 0);
  // Passes ran for what could change (the first requests took the reservations), not once per
  // request: at most a few dozen for ten thousand arrivals.
  const uint64_t passes = MetricCounter(*serve_, "tessera_scheduling_passes_total") - passes_before;
  EXPECT_GE(passes, 1u);
  EXPECT_LE(passes, 50u) << "passes for " << kFlood << " unplaceable requests";

  // The tenancy is at the default pending quota: 429, naming it.
  auto refused = CallJson(*admin_, "POST", "/v1/containers", Submission("flood", 1), &status);
  EXPECT_EQ(status, 429) << refused;
  EXPECT_EQ(refused["error"]["message"], "tenancy quota: 10000/10000 requests pending");

  // Another tenancy still gets in, and comes right after the flood's first request in the fair
  // order (both have used nothing; the flood's tenancy is older).
  auto tenant = TokenFor("victim");
  auto mine = CallJson(*tenant, "POST", "/v1/containers", Submission("victim", 1), &status);
  ASSERT_EQ(status, 202) << mine;
  json queue;
  ASSERT_TRUE(WaitUntil([&] {
    queue = CallJson(*tenant, "GET", "/v1/queue");
    return queue["queue"].size() == 1u && queue["queue"][0]["queue_position"] == 2;
  })) << queue;
  EXPECT_EQ(queue["queue_total"], 1);

  // Positions and reasons, read when asked, are what a pass says.
  ASSERT_TRUE(WaitUntil([&] {
    queue = CallJson(*admin_, "GET", "/v1/queue");
    return queue["queue"].size() == 1000u && queue["queue"][1]["id"] == mine["id"];
  })) << queue["queue"].size();
  EXPECT_EQ(queue["queue_total"], kFlood + 1);
  const auto& entries = queue["queue"];
  ASSERT_EQ(entries.size(), 1000u);
  for (size_t i = 0; i < entries.size(); ++i)
    ASSERT_EQ(entries[i]["queue_position"], static_cast<int>(i) + 1);
  // The flood's first eight requests hold the eight reservations (one drained GPU each).
  const std::string reserved =
      "waiting: next to start, 1 GPUs reserved on this host (free when their work ends)";
  const std::string no_capacity = "waiting: no capacity: needs 1 GPUs together, 0 free";
  EXPECT_EQ(entries[0]["reason"], reserved);
  EXPECT_EQ(entries[1]["id"], mine["id"]);
  EXPECT_EQ(entries[1]["reason"], no_capacity);
  EXPECT_EQ(entries[8]["reason"], reserved);
  EXPECT_EQ(entries[9]["reason"], no_capacity);
  // A container's own answer agrees with the queue.
  auto tenth = CallJson(*admin_, "GET", "/v1/containers/" + entries[9]["id"].get<std::string>());
  EXPECT_EQ(tenth["queue_position"], 10);
  EXPECT_EQ(tenth["reason"], entries[9]["reason"]);
  EXPECT_GE(MetricCounter(*serve_, "tessera_queue_reports_total"), 1u);
}

TEST_F(Admission, AReservationOfAnotherTenancyIsNamedOnlyAsSuch) {
  ASSERT_NO_FATAL_FAILURE(StartServe());
  // Four GPUs drained: an 8-GPU request reserves the host; the four free ones wait for it.
  Drain(4);
  auto first = TokenFor("first");
  auto second = TokenFor("second");
  int status = 0;
  auto big = CallJson(*first, "POST", "/v1/containers", Submission("first", 8), &status);
  ASSERT_EQ(status, 202) << big;
  json holder;
  ASSERT_TRUE(WaitUntil([&] {
    holder = CallJson(*first, "GET", "/v1/containers/" + big["id"].get<std::string>());
    return holder.value("queue_position", 0) == 1;
  })) << holder;
  auto small = CallJson(*second, "POST", "/v1/containers", Submission("second", 4), &status);
  ASSERT_EQ(status, 202) << small;
  const std::string path = "/v1/containers/" + small["id"].get<std::string>();
  const std::string full =
      "waiting: reserved for " + big["id"].get<std::string>() + " (8 GPUs on this host)";
  json seen_by_admin;
  ASSERT_TRUE(WaitUntil([&] {
    seen_by_admin = CallJson(*admin_, "GET", path);
    return seen_by_admin.value("reason", "") == full;
  })) << seen_by_admin;
  // The tenant waiting learns neither whose request it is nor its size.
  auto seen_by_owner = CallJson(*second, "GET", path);
  EXPECT_EQ(seen_by_owner["reason"], "waiting: reserved for another tenancy's request");
  EXPECT_EQ(seen_by_owner["queue_position"], 2);
  auto queue = CallJson(*second, "GET", "/v1/queue");
  ASSERT_EQ(queue["queue"].size(), 1u) << queue;
  EXPECT_EQ(queue["queue"][0]["reason"], "waiting: reserved for another tenancy's request");
  // The holder's own tenancy sees its own request named.
  auto own = CallJson(*first, "POST", "/v1/containers", Submission("first", 4), &status);
  ASSERT_EQ(status, 202);
  json own_seen;
  ASSERT_TRUE(WaitUntil([&] {
    own_seen = CallJson(*first, "GET", "/v1/containers/" + own["id"].get<std::string>());
    return own_seen.value("reason", "") == full;
  })) << own_seen;
}

}  // namespace
}  // namespace tessera::testing
