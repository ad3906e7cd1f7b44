// Billing follows the runtime, with real podman containers: one that ends while tessera-serve is
// down is billed to the end podman recorded (State.FinishedAt), not to when the service learnt of
// it; one whose command could not even start is billed nothing.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "serve/container_wait.h"
#include "serve/podman_serve_fixture.h"
#include "support/podman_harness.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class OutageE2e : public PodmanServeTest {
 protected:
  OutageE2e() : PodmanServeTest("outage") {}

  std::string Submit(int gpus, std::vector<std::string> command) {
    json body = {{"image", image_}, {"tenancy", "billed"}, {"gpus", gpus}, {"command", command}};
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  json WaitFor(const std::string& id, const std::set<std::string>& states) {
    return WaitForContainerState(*admin_, *serve_, id, states, std::chrono::seconds(240));
  }
};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST_F(OutageE2e, AnExitWhileTheServiceIsDownIsBilledToItsRealEnd) {
  StartServe();
  const std::string short_run = Submit(2, {"/bin/sh", "-c", "sleep 2"});
  const std::string never_ran = Submit(1, {"/no/such/program"});
  WaitFor(short_run, {"running"});
  EXPECT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  // Down well past the container's end.
  const auto ended_by = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto state =
            Podman::Get().Run({"inspect", "--format", "{{.State.Status}}", "tessera-" + short_run});
        return state.output.find("exited") != std::string::npos;
      },
      std::chrono::seconds(120)));
  std::this_thread::sleep_for(ended_by - std::chrono::steady_clock::now());
  const int64_t restarted_ms = NowMs();
  Restart();
  auto record = WaitFor(short_run, {"exited", "failed"});
  EXPECT_EQ(record["state"], "exited") << record;
  // Its end is podman's, seconds before the service came back.
  const int64_t finished_ms = record["finished_ms"];
  const int64_t started_ms = record["started_ms"];
  EXPECT_LT(finished_ms, restarted_ms - 3000) << record;
  // The one that never started (its command does not exist) ends as failed.
  auto failed = WaitFor(never_ran, {"exited", "failed"});
  EXPECT_EQ(failed["state"], "failed") << failed;
  // The usage record goes into the store with the end's commit, which the container's record in
  // memory may precede: wait for it.
  int status = 0;
  nlohmann::json usage;
  EXPECT_TRUE(WaitUntil(
      [&] {
        usage = CallJson(*admin_, "GET", "/v1/tenancies/billed/usage", "", &status);
        return status == 200 && usage.value("containers_total", 0) >= 1;
      },
      std::chrono::seconds(60)));
  ASSERT_EQ(status, 200) << usage;
  double billed = -1;
  for (const auto& run : usage["containers"])
    if (run["id"] == short_run) billed = run["gpu_seconds"];
  EXPECT_DOUBLE_EQ(billed, 2.0 * static_cast<double>(finished_ms - started_ms) / 1000.0);
  // Two GPUs for about two seconds of sleep, not for the outage. The start is the service's
  // clock once `podman start` has returned, which under load trails the process's own start by
  // that call's latency: billed, but possibly for less than the two seconds.
  EXPECT_GT(billed, 0.0) << record << "\n" << serve_->log();
  EXPECT_LT(billed, 2 * 5.0) << record;
  // It is billed nothing.
  for (const auto& run : usage["containers"])
    EXPECT_NE(run["id"], never_ran) << usage;
  EXPECT_EQ(usage["containers_total"], 1) << usage;
}

}  // namespace
}  // namespace tessera::testing
