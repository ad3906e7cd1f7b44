// The POST /v1/containers body of `tessera run`: its -p, --ready-port/--ready-path, --mig and the
// rest as the API reads them (docs/serve.md).
#include "cli/run_request.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

using nlohmann::json;

TEST(RunRequest, PublishedPortsBecomeTheApisPortsEntries) {
  RunOptions options;
  options.publish = {"8080", "53/udp:dns", "9000/tcp:metrics"};
  auto body = RunRequest(options, {"busybox", "httpd", "-f"});
  ASSERT_TRUE(body) << body.error().message;
  EXPECT_EQ((*body)["ports"], json::parse(R"([{"containerPort":8080},
      {"containerPort":53,"protocol":"udp","name":"dns"},
      {"containerPort":9000,"protocol":"tcp","name":"metrics"}])"));
  EXPECT_EQ((*body)["command"], json::parse(R"(["httpd","-f"])"));
  EXPECT_EQ((*body)["image"], "busybox");
  EXPECT_FALSE(body->contains("ready"));
}

TEST(RunRequest, WithoutPortsTheBodyHasNone) {
  auto body = RunRequest(RunOptions{}, {"busybox"});
  ASSERT_TRUE(body);
  EXPECT_FALSE(body->contains("ports"));
  EXPECT_FALSE(body->contains("command"));
  EXPECT_EQ((*body)["gpus"], 0);
  EXPECT_EQ((*body)["tenancy"], "default");
}

TEST(RunRequest, AShareMayNameAMigProfileBeforeAColon) {
  RunOptions options;
  options.share = "3g.40gb:10Gi,50";
  auto body = RunRequest(options, {"busybox"});
  ASSERT_TRUE(body) << body.error().message;
  EXPECT_EQ((*body)["share"],
            json::parse(R"({"memory":"10Gi","compute":50,"mode":"mps","mig":"3g.40gb"})"));
  EXPECT_FALSE(body->contains("gpus"));
  options.share = "10Gi,50";
  EXPECT_FALSE((*RunRequest(options, {"busybox"}))["share"].contains("mig"));
  for (const char* bad : {"3g:10Gi,50", "3g.40gb:10Gi,50,timeslice", ":10Gi,50"}) {
    options.share = bad;
    auto refused = RunRequest(options, {"busybox"});
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("--share"), std::string::npos) << bad;
  }
}

TEST(RunRequest, ReadinessIsAnHttpGetOfAPort) {
  RunOptions options;
  options.ready_port = 8080;
  options.ready_path = "/healthz";
  auto body = RunRequest(options, {"busybox"});
  ASSERT_TRUE(body);
  EXPECT_EQ((*body)["ready"], json::parse(R"({"httpGet":{"port":8080,"path":"/healthz"}})"));
  options.ready_path.clear();
  EXPECT_EQ((*RunRequest(options, {"busybox"}))["ready"],
            json::parse(R"({"httpGet":{"port":8080}})"));
}

TEST(RunRequest, BadPublishValuesAreRefusedNamingTheFlag) {
  const std::vector<std::string> bads = {
      "",    "0",  "65536",      "http",  "80/sctp",
      "80:", "-1", "80/udp/tcp", "8080x", std::string(5000, '9')};
  for (const std::string& bad : bads) {
    RunOptions options;
    options.publish = {bad};
    auto body = RunRequest(options, {"busybox"});
    ASSERT_FALSE(body) << bad.substr(0, 40);
    EXPECT_EQ(body.error().category, ErrorCategory::kInvalidArgument);
    EXPECT_NE(body.error().message.find("-p "), std::string::npos) << body.error().message;
    EXPECT_LT(body.error().message.size(), 200u);
  }
}

TEST(RunRequest, MigTakesACountAfterTheProfile) {
  RunOptions options;
  options.mig = "1g.10gbx2";
  auto body = RunRequest(options, {"busybox"});
  ASSERT_TRUE(body);
  EXPECT_EQ((*body)["mig"], json::parse(R"({"profile":"1g.10gb","count":2})"));
  EXPECT_FALSE(body->contains("gpus"));
  options.mig = "3g.40gb";
  EXPECT_EQ((*RunRequest(options, {"busybox"}))["mig"],
            json::parse(R"({"profile":"3g.40gb","count":1})"));
}

TEST(RunRequest, AnImageIsRequiredAndEnvIsNameEqualsValue) {
  EXPECT_FALSE(RunRequest(RunOptions{}, {}));
  RunOptions options;
  options.env = {"A=1", "B=x=y"};
  EXPECT_EQ((*RunRequest(options, {"busybox"}))["env"], json::parse(R"({"A":"1","B":"x=y"})"));
  options.env = {"NOEQUALS"};
  EXPECT_FALSE(RunRequest(options, {"busybox"}));
}

}  // namespace
}  // namespace tessera::cli
