// Bounds on what a real tessera-serve process (null backend) keeps and answers: finished
// container records go after an age and beyond a per-tenancy count, from memory and the store;
// a listing page stops at a size in bytes as well as a count.
#include <gtest/gtest.h>

#include <filesystem>

#include "serve/serve_process.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class Retention : public ::testing::Test {
 protected:
  void StartServe(std::vector<std::string> extra) {
    std::vector<std::string> flags = {"--root",    MaterializeHost("no-gpu"), "--backend", "null",
                                      "--cdi-dir", dir_.path() + "/cdi"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServeProcess>(dir_.path(), std::move(flags));
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  std::string Submit(const std::string& tenancy, const std::string& body_extra = "") {
    int status = 0;
    auto answer = CallJson(
        *admin_, "POST", "/v1/containers",
        R"({"image":"busybox","command":["true"],"tenancy":")" + tenancy + "\"" + body_extra + "}",
        &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  // Every ID of a listing, following `next`.
  std::vector<std::string> ListAll(const std::string& query, size_t* pages = nullptr,
                                   size_t* largest_page = nullptr) {
    std::vector<std::string> ids;
    std::string after;
    for (int page = 0; page < 1000; ++page) {
      auto response =
          admin_->Call("GET", "/v1/containers?" + query + (after.empty() ? "" : "&after=" + after));
      EXPECT_TRUE(response.ok());
      if (!response.ok()) break;
      EXPECT_EQ(response->status, 200) << response->body.substr(0, 200);
      if (pages) ++*pages;
      if (largest_page) *largest_page = std::max(*largest_page, response->body.size());
      auto doc = json::parse(response->body);
      for (const auto& container : doc["containers"])
        ids.push_back(container["id"]);
      if (!doc.contains("next")) break;
      after = doc["next"];
    }
    return ids;
  }

  // Waits (generously: the machine may be loaded) until the listing is `want`.
  std::vector<std::string> WaitForListing(const std::string& query,
                                          const std::vector<std::string>& want) {
    std::vector<std::string> ids;
    for (int i = 0; i < 1200; ++i) {
      ids = ListAll(query);
      if (ids == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return ids;
  }

  TempDir dir_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

TEST_F(Retention, FinishedRecordsBeyondThePerTenancyCountGoOldestFirst) {
  ASSERT_NO_FATAL_FAILURE(
      StartServe({"--retain-finished-per-tenancy", "3", "--retention-sweep-interval", "100ms"}));
  std::vector<std::string> a, b;
  for (int i = 0; i < 6; ++i)
    a.push_back(Submit("team-a"));
  for (int i = 0; i < 2; ++i)
    b.push_back(Submit("team-b"));
  const std::vector<std::string> newest_a(a.begin() + 3, a.end());
  EXPECT_EQ(WaitForListing("tenancy=team-a", newest_a), newest_a);
  EXPECT_EQ(ListAll("tenancy=team-b"), b);
  int status = 0;
  CallJson(*admin_, "GET", "/v1/containers/" + a[0], "", &status);
  EXPECT_EQ(status, 404);
  // The listing order stays whole: page by page, both directions, from any remaining record.
  std::vector<std::string> all = newest_a;
  all.insert(all.end(), b.begin(), b.end());
  EXPECT_EQ(ListAll("limit=1"), all);
  std::vector<std::string> reversed(all.rbegin(), all.rend());
  EXPECT_EQ(ListAll("limit=2&order=desc"), reversed);
  auto after = CallJson(*admin_, "GET", "/v1/containers?after=" + a[4], "", &status);
  EXPECT_EQ(status, 200);
  ASSERT_EQ(after["containers"].size(), 3u) << after;
  EXPECT_EQ(after["containers"][0]["id"], a[5]);
  // Removed from the store too.
  serve_->Kill(SIGTERM);
  ASSERT_TRUE(serve_->Start());
  admin_ = serve_->Connect(serve_->admin_token());
  EXPECT_EQ(ListAll(""), all);
  auto metrics = admin_->Call("GET", "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("tessera_containers{state=\"exited\"} 5"), std::string::npos)
      << metrics->body;
}

TEST_F(Retention, FinishedRecordsOlderThanTheAgeGo) {
  ASSERT_NO_FATAL_FAILURE(
      StartServe({"--retain-finished", "1s", "--retention-sweep-interval", "100ms"}));
  Submit("team-a");
  Submit("team-b");
  EXPECT_EQ(WaitForListing("", {}), std::vector<std::string>{});
}

TEST_F(Retention, AListingPageStopsAtAboutFourMiB) {
  ASSERT_NO_FATAL_FAILURE(StartServe({}));
  // 24 records of about 240 KB each (8 env values of 30,000 bytes): about 5.8 MB in all.
  std::string env = R"(,"env":{)";
  for (int i = 0; i < 8; ++i)
    env += (i ? "," : "") + std::string("\"V") + std::to_string(i) + "\":\"" +
           std::string(30000, 'x') + "\"";
  env += "}";
  std::vector<std::string> ids;
  for (int i = 0; i < 24; ++i)
    ids.push_back(Submit("team-a", env));
  size_t pages = 0, largest = 0;
  EXPECT_EQ(ListAll("limit=1000", &pages, &largest), ids);
  EXPECT_GE(pages, 2u);
  EXPECT_LE(largest, size_t{4} << 20);
}

}  // namespace
}  // namespace tessera::testing
