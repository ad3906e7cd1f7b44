// `tessera ps` of a container that really runs: a real tessera-serve whose containers run in
// podman on the materialized HGX fixture, read by a tenant's token.
#include <gtest/gtest.h>

#include <regex>

#include "cli/golden.h"
#include "serve/podman_serve_fixture.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class PsPodman : public PodmanServeTest {
 protected:
  PsPodman() : PodmanServeTest("cli-ps") {}

  // The test image's name (the harness's own tag) as <image>.
  std::vector<GoldenRule> Rules() const {
    const std::string escaped =
        std::regex_replace(image_, std::regex(R"([.^$|()\[\]{}*+?\\/])"), R"(\$&)");
    return {{escaped, "<image>"}};
  }
};

TEST_F(PsPodman, ARunningContainerIsListedUntilItIsStopped) {
  StartServe();
  const std::string token = TenancyToken(*admin_, "team-a");
  ASSERT_FALSE(token.empty());
  const std::string id = SubmitAccepted({{"image", image_},
                                         {"tenancy", "team-a"},
                                         {"gpus", 1},
                                         {"command", {"/bin/sh", "-c", "exec sleep 300"}}});
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(WaitFor(id, {"running"}).value("state", ""), "running");
  TesseraCli cli("http://127.0.0.1:" + std::to_string(serve_->port()), token);
  auto running = cli.Run({"ps"});
  EXPECT_EQ(running.exit_code, 0) << running.err;
  EXPECT_NE(running.out.find(id), std::string::npos) << running.out;
  ExpectGolden("ps-podman-running", running, serve_->port(), Rules());
  ExpectGolden("ps-podman-running-wide", cli.Run({"ps", "-o", "wide"}), serve_->port(), Rules());
  // Stopped, it leaves the default list and stays in -a's.
  int status = 0;
  CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
  ASSERT_TRUE(status == 200 || status == 202) << status;
  auto ended = WaitFor(id, {"exited", "failed"});
  ASSERT_NE(ended.value("state", "running"), "running");
  auto after = cli.Run({"ps"});
  EXPECT_EQ(after.out.find(id), std::string::npos) << after.out;
  auto all = cli.Run({"ps", "-a", "--no-headers"});
  EXPECT_NE(all.out.find(id), std::string::npos) << all.out;
}

}  // namespace
}  // namespace tessera::testing
