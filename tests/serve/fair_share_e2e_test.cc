// End to end with real podman containers through a real tessera-serve on the materialized HGX
// host (8 GPUs): fair share between tenancies against a flood, a GPU quota under concurrent
// submissions, the duration limit, and metered GPU time against the lease records (the service's
// own log of every GPU's lease transitions) across a kill -9.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "serve/container_wait.h"
#include "serve/podman_serve_fixture.h"
#include "serve/serve_process.h"
#include "support/podman_harness.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class FairShareE2e : public PodmanServeTest {
 protected:
  FairShareE2e() : PodmanServeTest("fair") {}

  std::string Submit(const std::string& tenancy, int gpus, const std::string& script,
                     const json& extra = json::object(), client::Connection* as = nullptr) {
    json body = {{"image", image_},
                 {"tenancy", tenancy},
                 {"gpus", gpus},
                 {"command", {"/bin/sh", "-c", script}}};
    body.update(extra);
    int status = 0;
    auto answer = CallJson(as ? *as : *admin_, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  json WaitFor(const std::string& id, const std::set<std::string>& states) {
    return WaitForContainerState(*admin_, *serve_, id, states, std::chrono::seconds(240));
  }

  json Get(const std::string& id) { return CallJson(*admin_, "GET", "/v1/containers/" + id); }

  // Waits until no GPU is leased any more (every check done).
  void WaitSettled() {
    ASSERT_TRUE(WaitUntil(
        [&] {
          // Only a real listing counts: a failed call lists no GPUs, and none busy is not all
          // free (it once let the test read the log before the release had happened).
          int status = 0;
          const auto listing = CallJson(*admin_, "GET", "/v1/gpus", "", &status);
          if (status != 200 || !listing.contains("gpus") || listing["gpus"].empty()) return false;
          for (const auto& gpu : listing["gpus"])
            if (gpu["state"] != "free") return false;
          return true;
        },
        std::chrono::seconds(120)))
        << serve_->log();
  }

  // Flood: 12 containers of 2 GPUs (4 fit at a time), then one of another tenancy. Returns how
  // many of the flood's containers were placed after it (in the order the service logged its
  // placements: starts themselves race on the pool), and the first place in the queue it was
  // told.
  std::pair<int, int> FloodThenOne(const std::string& flood_script) {
    std::vector<std::string> flood;
    for (int i = 0; i < 12; ++i)
      flood.push_back(Submit("flood", 2, flood_script));
    const std::string second = Submit("second", 2, "echo second");
    int told_position = 0;
    WaitUntil(
        [&] {
          auto container = Get(second);
          if (container.value("state", "") != "pending") return true;
          told_position = container.value("queue_position", 0);
          return told_position > 0;
        },
        std::chrono::seconds(120));
    EXPECT_EQ(WaitFor(second, {"exited", "failed"})["state"], "exited");
    for (const auto& id : flood)
      WaitFor(id, {"exited", "failed"});
    std::vector<std::string> placed;
    std::istringstream lines(serve_->log());
    std::string line;
    while (std::getline(lines, line)) {
      auto doc = json::parse(line, nullptr, false);
      if (!doc.is_object()) continue;
      const std::string msg = doc.value("msg", "");
      if (msg.rfind("container c-", 0) == 0 && msg.find(": placed (") != std::string::npos)
        placed.push_back(msg.substr(10, msg.find(':') - 10));
    }
    EXPECT_EQ(placed.size(), 13u) << serve_->log();
    const auto at = std::find(placed.begin(), placed.end(), second);
    EXPECT_NE(at, placed.end());
    int after = 0;
    for (auto it = at; it != placed.end(); ++it)
      after += std::find(flood.begin(), flood.end(), *it) != flood.end();
    return {after, told_position};
  }
};

TEST_F(FairShareE2e, ASecondTenancyStartsAsSoonAsItsShareAllowsNotAfterTheFlood) {
  StartServe({"--reservations", "0"});
  auto [after, position] = FloodThenOne("sleep 5");
  // It waits only for the first GPUs to come back: it is first in line, ahead of the 8 flood
  // containers still pending, and is placed before every one of them.
  EXPECT_EQ(position, 1);
  EXPECT_EQ(after, 8) << serve_->log();
}

TEST_F(FairShareE2e, WithReservationsTheSecondTenancyIsStillPlacedBeforeThePendingFlood) {
  StartServe();
  auto [after, position] = FloodThenOne("sleep 5");
  // The flood's pending containers reserved the GPUs that free first before it came; above its
  // share, the flood keeps none of them while a tenancy below its share waits, so the second
  // goes first as without reservations.
  EXPECT_EQ(position, 1);
  EXPECT_EQ(after, 8) << serve_->log();
}

TEST_F(FairShareE2e, UnderFifoTheSameSecondTenancyWaitsBehindTheFlood) {
  StartServe({"--scheduling", "fifo"});
  auto [after, position] = FloodThenOne("sleep 1");
  // The control: in submission order it is placed after the whole flood, and is told it waits
  // behind it.
  EXPECT_EQ(after, 0);
  EXPECT_GT(position, 1);
}

TEST_F(FairShareE2e, AGpuQuotaHoldsUnderConcurrentSubmissions) {
  StartServe();
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/capped", R"({"quota":{"gpus":2}})", &status);
  ASSERT_EQ(status, 200);
  std::mutex mutex;
  std::vector<std::string> ids;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      auto connection = serve_->Connect(serve_->admin_token());
      auto id = Submit("capped", 1, "sleep 2", json::object(), connection.get());
      std::lock_guard lock(mutex);
      ids.push_back(id);
    });
  }
  for (auto& thread : threads)
    thread.join();
  ASSERT_EQ(ids.size(), 6u);
  // Sample while they run: never more than 2 of its GPUs in use, and those waiting say why.
  int most = 0;
  bool told = false;
  WaitUntil(
      [&] {
        int in_use = 0, ended = 0;
        for (const auto& id : ids) {
          auto container = Get(id);
          const std::string state = container.value("state", "");
          if (state == "running") in_use += static_cast<int>(container["gpus"].size());
          if (state == "exited" || state == "failed") ++ended;
          if (state == "pending" &&
              container.value("reason", "") == "waiting: tenancy quota 2/2 GPUs in use")
            told = true;
        }
        most = std::max(most, in_use);
        return ended == 6;
      },
      std::chrono::seconds(240), std::chrono::milliseconds(50));
  EXPECT_LE(most, 2);
  EXPECT_GE(most, 1);
  EXPECT_TRUE(told);
  for (const auto& id : ids)
    EXPECT_EQ(Get(id)["state"], "exited");
}

TEST_F(FairShareE2e, AContainerOverItsMaxDurationIsStoppedWithThatReason) {
  StartServe();
  const auto id = Submit("team-a", 1, "sleep 300", {{"maxDurationSeconds", 2}});
  const auto running = WaitFor(id, {"running"});
  const std::string gpu = running["gpus"][0];
  const auto done = WaitFor(id, {"exited", "failed"});
  EXPECT_EQ(done["reason"], "stopped at its limit: maxDurationSeconds 2") << done;
  const int64_t ran = done["finished_ms"].get<int64_t>() - done["started_ms"].get<int64_t>();
  EXPECT_GE(ran, 2000);
  // Stopped at its limit, not at some later sweep (every 60 s) nor after its 300 s.
  EXPECT_LT(ran, 45000);
  // Its GPU ends its lease like any other: through the firmware check.
  WaitSettled();
  EXPECT_NE(serve_->log().find("GPU " + gpu + ": releasing -> checking"), std::string::npos);
}

// "2026-11-24T09:20:00.123+0000" -> Unix ms.
int64_t LogTimeMs(const std::string& text) {
  std::tm tm{};
  int ms = 0, offset = 0;
  char sign = '+';
  if (std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%d.%d%c%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &sign, &offset) != 9)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const int64_t offset_s = (offset / 100 * 3600 + offset % 100 * 60) * (sign == '-' ? -1 : 1);
  return (static_cast<int64_t>(::timegm(&tm)) - offset_s) * 1000 + ms;
}

// GPU-ms leased to running containers, from the lease transitions the service logged: every
// GPU's "reserved -> active" to its next "active -> releasing".
int64_t LeasedGpuMsFromLog(const std::string& log) {
  std::map<std::string, int64_t> active_since;
  int64_t total = 0;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    auto doc = json::parse(line, nullptr, false);
    if (!doc.is_object()) continue;
    const std::string msg = doc.value("msg", "");
    if (msg.rfind("GPU ", 0) != 0) continue;
    const auto colon = msg.find(": ");
    const std::string gpu = msg.substr(4, colon - 4);
    const std::string step = msg.substr(colon + 2);
    const int64_t at = LogTimeMs(doc.value("time", ""));
    if (step.rfind("reserved -> active", 0) == 0) active_since[gpu] = at;
    if (step.rfind("active -> releasing", 0) == 0 && active_since.count(gpu)) {
      total += at - active_since[gpu];
      active_since.erase(gpu);
    }
  }
  return total;
}

TEST_F(FairShareE2e, MeteredGpuTimeMatchesTheLeasesAcrossAKillDashNine) {
  StartServe();
  const auto short_one = Submit("metered", 1, "sleep 1");
  const auto long_one = Submit("metered", 2, "sleep 8");
  const auto middle = Submit("metered", 4, "sleep 3");
  WaitFor(short_one, {"exited"});
  WaitFor(long_one, {"running"});
  // Killed while two of them hold GPUs: their starts are durable, their ends come after.
  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  Restart();
  for (const auto& id : {short_one, long_one, middle})
    EXPECT_EQ(WaitFor(id, {"exited", "failed"})["state"], "exited");
  WaitSettled();
  // Once more, so what is reported comes from the store alone.
  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  Restart();

  int status = 0;
  auto usage = CallJson(*admin_, "GET", "/v1/tenancies/metered/usage", "", &status);
  ASSERT_EQ(status, 200) << usage;
  EXPECT_EQ(usage["containers_total"], 3);
  // Per container: its GPUs times its run as its record says, and at least its sleep.
  std::map<std::string, double> metered;
  for (const auto& container : usage["containers"])
    metered[container["id"]] = container["gpu_seconds"];
  const std::map<std::string, double> slept = {{short_one, 1}, {long_one, 16}, {middle, 12}};
  double from_records = 0;
  for (const auto& [id, at_least] : slept) {
    auto record = Get(id);
    const double expected =
        static_cast<double>(record["gpus"].size()) *
        (record["finished_ms"].get<int64_t>() - record["started_ms"].get<int64_t>()) / 1000.0;
    from_records += expected;
    EXPECT_DOUBLE_EQ(metered[id], expected) << id;
    EXPECT_GE(metered[id], at_least) << id;
  }
  const double total = usage["gpu_seconds"];
  EXPECT_NEAR(total, from_records, 0.001);
  // The lease records: every GPU's active time as the service logged its transitions, across
  // both kills. Equal to the second.
  const double leased = static_cast<double>(LeasedGpuMsFromLog(serve_->log())) / 1000.0;
  EXPECT_NEAR(total, leased, 1.0) << "metered " << total << " s, leased " << leased << " s";
  auto metrics = serve_->Connect(serve_->admin_token())->Call("GET", "/metrics");
  ASSERT_TRUE(metrics);
  const std::string key =
      "tessera_tenancy_gpu_seconds_total{tenancy=\"metered\",uid=\"" +
      CallJson(*admin_, "GET", "/v1/tenancies/metered")["uid"].get<std::string>() + "\"} ";
  const auto at = metrics->body.find(key);
  ASSERT_NE(at, std::string::npos) << metrics->body;
  EXPECT_NEAR(std::stod(metrics->body.substr(at + key.size())), total, 0.001);
}

}  // namespace
}  // namespace tessera::testing
