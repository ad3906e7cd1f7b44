// A tenancy name deleted and created again is a new tenancy: a real tessera-serve process (null
// backend) shows its new owner nothing of the old one's (containers, logs, Idempotency-Keys,
// tokens), across a restart too, while the admin keeps the history. Only the admin writes a
// tenancy's labels and extensions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "serve/serve_process.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class TenancyReuse : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartServe({})); }

  void StartServe(std::vector<std::string> extra) {
    const std::string root = MaterializeHost("hgx-h100-dgx");
    std::vector<std::string> flags = {"--root",     root,
                                      "--backend",  "null",
                                      "--cdi-dir",  dir_.path() + "/cdi",
                                      "--cdi-kind", "tessera-test.example/gpu"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    if (serve_) serve_->Kill(SIGKILL);
    serve_ = std::make_unique<ServeProcess>(dir_.path() + "/" + std::to_string(starts_++),
                                            std::move(flags));
    std::filesystem::create_directories(dir_.path() + "/" + std::to_string(starts_ - 1));
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  std::string CreateWithToken(const std::string& tenancy) {
    int status = 0;
    CallJson(*admin_, "PUT", "/v1/tenancies/" + tenancy, R"({"labels":{"owner":"x"}})", &status);
    EXPECT_EQ(status, 200);
    auto token = CallJson(*admin_, "POST", "/v1/tenancies/" + tenancy + "/tokens", "", &status);
    EXPECT_EQ(status, 201) << token;
    return token.value("token", "");
  }

  json WaitForState(client::Connection& connection, const std::string& id,
                    const std::string& state) {
    json container;
    for (int i = 0; i < 1200; ++i) {
      container = CallJson(connection, "GET", "/v1/containers/" + id);
      if (container.is_object() && container.value("state", "") == state) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return container;
  }

  TempDir dir_;
  int starts_ = 0;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

const std::string kBodyA =
    R"({"image":"busybox","tenancy":"gamma","command":["true"],"env":{"SECRET":"old-owner"}})";
const std::string kBodyB = R"({"image":"busybox","tenancy":"gamma","command":["false"]})";

TEST_F(TenancyReuse, ANewOwnerOfTheNameSeesNothingOfTheOldOne) {
  auto old_owner = serve_->Connect(CreateWithToken("gamma"));
  int status = 0;
  auto first =
      CallJson(*old_owner, "POST", "/v1/containers", kBodyA, &status, {{"Idempotency-Key", "k1"}});
  ASSERT_EQ(status, 202) << first;
  auto second =
      CallJson(*old_owner, "POST", "/v1/containers", kBodyA, &status, {{"Idempotency-Key", "k2"}});
  ASSERT_EQ(status, 202) << second;
  const std::string old_id = first["id"];
  ASSERT_EQ(WaitForState(*old_owner, old_id, "exited").value("state", ""), "exited");
  ASSERT_EQ(WaitForState(*old_owner, second["id"], "exited").value("state", ""), "exited");
  const std::string old_uid = CallJson(*admin_, "GET", "/v1/tenancies/gamma").value("uid", "");
  EXPECT_FALSE(old_uid.empty());

  auto deleted = CallJson(*admin_, "DELETE", "/v1/tenancies/gamma", "", &status);
  ASSERT_EQ(status, 200) << deleted;
  const std::string new_token = CreateWithToken("gamma");
  auto new_owner = serve_->Connect(new_token);
  EXPECT_NE(CallJson(*admin_, "GET", "/v1/tenancies/gamma").value("uid", ""), old_uid);

  // The old token is gone with its tenancy.
  CallJson(*old_owner, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(status, 401);

  auto check_nothing_old = [&](client::Connection& connection) {
    auto listed = CallJson(connection, "GET", "/v1/containers", "", &status);
    EXPECT_EQ(status, 200);
    for (const auto& container : listed["containers"]) {
      EXPECT_NE(container["id"], old_id) << container;
      EXPECT_NE(container["id"], second["id"]) << container;
    }
    CallJson(connection, "GET", "/v1/containers/" + old_id, "", &status);
    EXPECT_EQ(status, 404);
    CallJson(connection, "GET", "/v1/containers/" + old_id + "/logs", "", &status);
    EXPECT_EQ(status, 404);
    CallJson(connection, "GET", "/v1/containers?after=" + old_id, "", &status);
    EXPECT_EQ(status, 400);
    CallJson(connection, "DELETE", "/v1/containers/" + old_id, "", &status);
    EXPECT_EQ(status, 404);
  };
  check_nothing_old(*new_owner);
  auto listed = CallJson(*new_owner, "GET", "/v1/containers");
  EXPECT_TRUE(listed["containers"].empty()) << listed;  // the old owner's env included

  // The old keys are neither replayed nor refused: each makes a new container.
  auto response = new_owner->Call("POST", "/v1/containers", kBodyA, {{"Idempotency-Key", "k1"}});
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status, 202) << response->body;
  EXPECT_EQ(response->headers.count("idempotent-replayed"), 0u);
  auto fresh = json::parse(response->body);
  EXPECT_NE(fresh["id"], old_id);
  auto other =
      CallJson(*new_owner, "POST", "/v1/containers", kBodyB, &status, {{"Idempotency-Key", "k2"}});
  EXPECT_EQ(status, 202) << other;
  EXPECT_EQ(other.dump().find(second["id"].get<std::string>()), std::string::npos) << other;
  listed = CallJson(*new_owner, "GET", "/v1/containers");
  EXPECT_EQ(listed["containers"].size(), 2u) << listed;

  // The same after a restart (records, keys and tokens as the store reloads them).
  ASSERT_EQ(WaitForState(*new_owner, fresh["id"], "exited").value("state", ""), "exited");
  serve_->Kill(SIGTERM);
  ASSERT_TRUE(serve_->Start());
  new_owner = serve_->Connect(new_token);
  admin_ = serve_->Connect(serve_->admin_token());
  check_nothing_old(*new_owner);
  auto replay = new_owner->Call("POST", "/v1/containers", kBodyA, {{"Idempotency-Key", "k1"}});
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(replay->status, 202);
  EXPECT_EQ(json::parse(replay->body)["id"], fresh["id"]);  // its own key, replayed

  // The admin still sees the history.
  auto all = CallJson(*admin_, "GET", "/v1/containers?tenancy=gamma", "", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(all["containers"].size(), 4u) << all;
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/containers/" + old_id).value("id", ""), old_id);
}

TEST_F(TenancyReuse, GpusHeldByTheOldOwnerAreNotShownAsTheNewOnes) {
  // A firmware check that waits for the test keeps the old owner's GPU in `checking`, still
  // naming its holder, while the name changes hands.
  const std::string go = dir_.path() + "/go";
  const std::string check = dir_.path() + "/check.sh";
  {
    std::ofstream script(check);
    script << "#!/bin/sh\ni=0\nwhile [ ! -e " << go
           << " ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n";
  }
  std::filesystem::permissions(check, std::filesystem::perms::owner_all);
  ASSERT_NO_FATAL_FAILURE(StartServe({"--firmware-check-command", check}));
  auto old_owner = serve_->Connect(CreateWithToken("gamma"));
  int status = 0;
  auto held = CallJson(*old_owner, "POST", "/v1/containers",
                       R"({"image":"busybox","tenancy":"gamma","gpus":1})", &status);
  ASSERT_EQ(status, 202) << held;
  auto ended = WaitForState(*old_owner, held["id"], "exited");
  ASSERT_EQ(ended.value("state", ""), "exited");
  ASSERT_EQ(ended["gpus"].size(), 1u) << ended;
  const std::string gpu_id = ended["gpus"][0];
  CallJson(*admin_, "DELETE", "/v1/tenancies/gamma", "", &status);
  ASSERT_EQ(status, 200);
  auto new_owner = serve_->Connect(CreateWithToken("gamma"));
  auto gpus = CallJson(*admin_, "GET", "/v1/gpus", "", &status);
  bool checking = false;
  for (const auto& gpu : gpus["gpus"])
    if (gpu["id"] == gpu_id) checking = gpu["container_id"] == held["id"];
  ASSERT_TRUE(checking) << gpus;  // the admin sees who held it
  gpus = CallJson(*new_owner, "GET", "/v1/gpus", "", &status);
  ASSERT_EQ(status, 200);
  for (const auto& gpu : gpus["gpus"]) {
    EXPECT_NE(gpu.value("container_id", ""), held["id"]) << gpu;
    EXPECT_NE(gpu.value("tenancy", ""), "gamma") << gpu;
  }
  std::ofstream(go).put('\n');
}

TEST_F(TenancyReuse, OnlyTheAdminWritesATenancysLabelsAndExtensions) {
  auto tenant = serve_->Connect(CreateWithToken("gamma"));
  int status = 0;
  auto refused =
      CallJson(*tenant, "PUT", "/v1/tenancies/gamma",
               R"({"labels":{"owner":"me"},"extensions":{"quota":{"gpus":64}}})", &status);
  EXPECT_EQ(status, 403) << refused;
  EXPECT_NE(refused["error"].value("message", "").find("admin"), std::string::npos) << refused;
  refused = CallJson(*tenant, "PUT", "/v1/tenancies/gamma", "{}", &status);
  EXPECT_EQ(status, 403) << refused;
  auto stored = CallJson(*tenant, "GET", "/v1/tenancies/gamma", "", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(stored["labels"], json({{"owner", "x"}})) << stored;
  EXPECT_TRUE(stored["extensions"].empty()) << stored;
  // Another tenancy's name is no different.
  CallJson(*tenant, "PUT", "/v1/tenancies/other", "{}", &status);
  EXPECT_EQ(status, 403);
}

}  // namespace
}  // namespace tessera::testing
