// Metering you can trust, through a real tessera-serve (null backend on the 8-GPU HGX fixture):
// an Idempotency-Key used again after retention makes a new run with its own ID and its own bill,
// across a kill -9; a name created again starts with no share and no old series; on a disk that
// fills up (a real 1 MiB tmpfs) no refused submission runs, the service says it cannot write,
// and across kill -9 no run's usage is lost or counted twice.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <map>
#include <set>

#include "serve/serve_process.h"
#include "serve/small_tmpfs.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class Metering : public ::testing::Test {
 protected:
  void Start(const std::string& dir, std::vector<std::string> extra = {}) {
    root_ = MaterializeHost("hgx-h100-dgx");
    WriteGpuRoms(root_);
    serve_ =
        std::make_unique<ServeProcess>(dir, NullBackendFlags(root_, dir_.path(), std::move(extra)));
    Restart();
  }

  void Restart() {
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  json Submit(const std::string& tenancy, int gpus, const std::string& key, int* status) {
    std::map<std::string, std::string> headers;
    if (!key.empty()) headers["Idempotency-Key"] = key;
    return CallJson(
        *admin_, "POST", "/v1/containers",
        R"({"image":"busybox","tenancy":")" + tenancy + R"(","gpus":)" + std::to_string(gpus) + "}",
        status, headers);
  }

  bool WaitEnded(const std::string& id) {
    return WaitUntil([&] {
      auto container = CallJson(*admin_, "GET", "/v1/containers/" + id);
      const std::string state = container.value("state", "");
      return state == "exited" || state == "failed";
    });
  }

  // Container ID -> GPU-seconds of the tenancy's usage report; each run listed once.
  std::multimap<std::string, double> Usage(const std::string& tenancy) {
    int status = 0;
    auto usage = CallJson(*admin_, "GET", "/v1/tenancies/" + tenancy + "/usage", "", &status);
    EXPECT_EQ(status, 200) << usage;
    std::multimap<std::string, double> out;
    for (const auto& run : usage["containers"])
      out.emplace(run["id"], run["gpus"].get<double>());
    EXPECT_EQ(usage["containers_total"], out.size());
    return out;
  }

  std::string Metrics() {
    auto metrics = serve_->Connect(serve_->admin_token())->Call("GET", "/metrics");
    EXPECT_TRUE(metrics.ok());
    return metrics.ok() ? metrics->body : "";
  }

  std::string root_;
  TempDir dir_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

TEST_F(Metering, AKeyUsedAgainAfterRetentionMakesANewRunAndBothAreBilledAcrossARestart) {
  ASSERT_NO_FATAL_FAILURE(Start(
      dir_.path(), {"--retain-finished-per-tenancy", "1", "--retention-sweep-interval", "100ms"}));
  int status = 0;
  auto first = Submit("nightly", 8, "nightly-build", &status);
  ASSERT_EQ(status, 202) << first;
  const std::string first_id = first["id"];
  ASSERT_TRUE(WaitEnded(first_id));
  // A newer finished record pushes it out of retention.
  auto filler = Submit("nightly", 0, "", &status);
  ASSERT_EQ(status, 202);
  ASSERT_TRUE(WaitEnded(filler["id"]));
  ASSERT_TRUE(WaitUntil([&] {
    int code = 0;
    CallJson(*admin_, "GET", "/v1/containers/" + first_id, "", &code);
    return code == 404;
  })) << "retention did not remove "
      << first_id;
  // The key again: another run, with an ID of its own (the first one is retired for good).
  auto second = Submit("nightly", 1, "nightly-build", &status);
  ASSERT_EQ(status, 202) << second;
  const std::string second_id = second["id"];
  EXPECT_NE(second_id, first_id);
  ASSERT_TRUE(WaitEnded(second_id));
  // Its retries are answered with it.
  auto replay = Submit("nightly", 1, "nightly-build", &status);
  EXPECT_EQ(status, 202);
  EXPECT_EQ(replay["id"], second_id);

  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  ASSERT_NO_FATAL_FAILURE(Restart());
  const auto usage = Usage("nightly");
  ASSERT_EQ(usage.count(first_id), 1u);
  ASSERT_EQ(usage.count(second_id), 1u);
  EXPECT_EQ(usage.find(first_id)->second, 8);
  EXPECT_EQ(usage.find(second_id)->second, 1);
  EXPECT_EQ(usage.size(), 2u);
  // After the restart the key still does not give the retired ID back.
  auto later = Submit("nightly", 1, "nightly-build", &status);
  EXPECT_EQ(later["id"], second_id);
}

TEST_F(Metering, ANameCreatedAgainStartsWithNoShareAndNoOldSeries) {
  ASSERT_NO_FATAL_FAILURE(Start(dir_.path()));
  int status = 0;
  auto before = CallJson(*admin_, "PUT", "/v1/tenancies/team", "{}", &status);
  ASSERT_EQ(status, 200);
  const std::string old_uid = before["uid"];
  for (int i = 0; i < 3; ++i) {
    auto run = Submit("team", 8, "", &status);
    ASSERT_EQ(status, 202);
    ASSERT_TRUE(WaitEnded(run["id"]));
  }
  ASSERT_NE(Metrics().find("uid=\"" + old_uid + "\""), std::string::npos);
  // The old owner used GPUs: its share is all of the fleet's recent use.
  auto queue = CallJson(*admin_, "GET", "/v1/queue");
  ASSERT_EQ(queue["tenancies"].size(), 1u) << queue;
  EXPECT_GT(queue["tenancies"][0]["share"].get<double>(), 0.99);

  CallJson(*admin_, "DELETE", "/v1/tenancies/team", "", &status);
  ASSERT_EQ(status, 200);
  auto after = CallJson(*admin_, "PUT", "/v1/tenancies/team", "{}", &status);
  ASSERT_EQ(status, 200);
  const std::string new_uid = after["uid"];
  ASSERT_NE(new_uid, old_uid);
  queue = CallJson(*admin_, "GET", "/v1/queue");
  ASSERT_EQ(queue["tenancies"].size(), 1u) << queue;
  EXPECT_EQ(queue["tenancies"][0]["name"], "team");
  EXPECT_EQ(queue["tenancies"][0]["share"], 0.0);
  const std::string metrics = Metrics();
  EXPECT_EQ(metrics.find(old_uid), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tessera_tenancy_gpu_seconds_total{tenancy=\"team\",uid=\"" + new_uid +
                         "\"} 0.000"),
            std::string::npos)
      << metrics;
  // Its usage is its own; the admin still sees the name's history.
  auto token = CallJson(*admin_, "POST", "/v1/tenancies/team/tokens", "", &status);
  auto tenant = serve_->Connect(token["token"]);
  auto own = CallJson(*tenant, "GET", "/v1/tenancies/team/usage", "", &status);
  ASSERT_EQ(status, 200) << own;
  EXPECT_EQ(own["containers_total"], 0);
  EXPECT_EQ(Usage("team").size(), 3u);
}

TEST_F(Metering, OnAFullDiskNoRefusedSubmissionRunsAndNoUsageIsLostOrCountedTwice) {
  // 2 MiB: every change also writes its audit record (a row and three index entries), so the
  // store's WAL needs more room between checkpoints than the changes alone.
  SmallTmpfs disk("2m");
  ASSERT_TRUE(disk.mounted()) << disk.error();
  // The data dir (store and admin token) on the small disk; the log and port file beside it.
  std::filesystem::create_directory_symlink(disk.path(), dir_.path() + "/data");
  // No reserve: this is about the store's own writes failing on a full disk (the reserve, which
  // refuses work before that, is disk_e2e_test's).
  ASSERT_NO_FATAL_FAILURE(Start(dir_.path(), {"--store-reserve", "0"}));
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/team", "{}", &status);
  ASSERT_EQ(status, 200);
  std::set<std::string> accepted;
  // Some run while there is room.
  for (int i = 0; i < 8; ++i) {
    auto answer = Submit("team", 1 + i % 8, "k-early-" + std::to_string(i), &status);
    ASSERT_EQ(status, 202) << answer;
    accepted.insert(answer["id"].get<std::string>());
  }
  const std::string filler = disk.Fill();
  // Keyed, so whatever was stored of any of them would show under its key's ID.
  int refused = 0, refused_in_a_row = 0;
  std::string refusal;
  for (int i = 0; i < 2000 && refused_in_a_row < 5; ++i) {
    auto answer = Submit("team", 1 + i % 8, "k-" + std::to_string(i), &status);
    if (status == 202) {
      accepted.insert(answer["id"].get<std::string>());
      refused_in_a_row = 0;
    } else {
      ASSERT_GE(status, 500) << answer;
      refusal = answer["error"]["message"];
      ++refused;
      ++refused_in_a_row;
    }
  }
  ASSERT_GT(refused, 0) << "the disk never filled";
  EXPECT_NE(refusal.find("full"), std::string::npos) << refusal;
  // Further writes are refused with 503 and the reason; the service says it cannot write.
  auto more = Submit("team", 1, "k-more", &status);
  EXPECT_EQ(status, 503) << more;
  EXPECT_NE(more["error"]["message"].get<std::string>().find("cannot write"), std::string::npos);
  EXPECT_NE(more["error"]["message"].get<std::string>().find("full"), std::string::npos) << more;
  auto probe = serve_->Connect("");
  auto ready = probe->Call("GET", "/readyz");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find("cannot write"), std::string::npos) << ready->body;
  auto health = probe->Call("GET", "/healthz");
  ASSERT_TRUE(health.ok());
  EXPECT_NE(health->body.find("cannot write"), std::string::npos) << health->body;
  EXPECT_NE(Metrics().find("tessera_store_write_failing 1"), std::string::npos);

  // Room again: what could not be written is written, and the service takes changes again.
  ::unlink(filler.c_str());
  ASSERT_TRUE(WaitUntil([&] {
    auto answer = probe->Call("GET", "/readyz");
    return answer.ok() && answer->status == 200;
  })) << serve_->log();
  auto after = Submit("team", 2, "k-after", &status);
  ASSERT_EQ(status, 202) << after;
  accepted.insert(after["id"].get<std::string>());
  // Every accepted one ends: it ran (exited), or, when the disk filled between its acceptance
  // and its placement, it failed without running ("its placement could not be recorded").
  std::set<std::string> ran;
  for (const auto& id : accepted) {
    ASSERT_TRUE(WaitEnded(id)) << CallJson(*admin_, "GET", "/v1/containers/" + id) << "\n"
                               << CallJson(*admin_, "GET", "/v1/queue") << "\n"
                               << serve_->log().substr(0, 20000);
    auto container = CallJson(*admin_, "GET", "/v1/containers/" + id);
    if (container["state"] == "exited") ran.insert(id);
  }
  ASSERT_FALSE(ran.empty());
  auto billed_ids = [&] {
    std::set<std::string> ids;
    for (const auto& [id, gpus] : Usage("team"))
      ids.insert(id);
    return ids;
  };
  ASSERT_TRUE(WaitUntil([&] { return billed_ids() == ran; }))
      << billed_ids().size() << " billed of " << ran.size() << " run";
  // The report is the service's memory; its store writes in order behind it. An answered write
  // is one whose commit is on disk, so every exit recorded before it is too. (A run whose exit
  // was not yet written when killed is the runtime's to report at restart: podman still has
  // it; the null backend here forgets everything.)
  CallJson(*admin_, "PUT", "/v1/tenancies/team", "{}", &status);
  ASSERT_EQ(status, 200);

  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  ASSERT_NO_FATAL_FAILURE(Restart());
  // Every run billed once, from the store alone; nothing refused ever ran or was stored.
  const auto usage = Usage("team");
  std::set<std::string> billed;
  for (const auto& [id, gpus] : usage)
    EXPECT_TRUE(billed.insert(id).second) << id << " billed twice";
  EXPECT_EQ(billed, ran) << serve_->log().substr(0, 20000);
  std::set<std::string> stored;
  auto listing = CallJson(*admin_, "GET", "/v1/containers?limit=1000", "", &status);
  ASSERT_EQ(status, 200) << listing;
  for (const auto& container : listing["containers"])
    stored.insert(container["id"].get<std::string>());
  EXPECT_EQ(stored, accepted) << serve_->log().substr(0, 20000);
}

}  // namespace
}  // namespace tessera::testing
