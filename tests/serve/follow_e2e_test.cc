// The client's verbs that run and follow containers, on real podman containers through a real
// tessera-serve: `run -d`, `logs -f` to the end, `logs --tail`, `stop`, `wait`, and `run`
// streaming a container's output as it prints.
#include <gtest/gtest.h>

#include <future>
#include <string>

#include "serve/cli_process.h"
#include "serve/podman_serve_fixture.h"

namespace tessera::testing {
namespace {

class FollowE2e : public PodmanServeTest {
 protected:
  FollowE2e() : PodmanServeTest("follow") {}

  CliResult Tessera(std::vector<std::string> args) {
    return RunTessera(*serve_, serve_->admin_token(), home_.path(), std::move(args));
  }
  // `tessera run -d` of /bin/sh -c SCRIPT: the new container's ID ("" when it failed).
  std::string RunDetached(const std::string& script) {
    CliResult run = Tessera({"run", "-d", "--tenancy", "follow", image_, "/bin/sh", "-c", script});
    EXPECT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(run.out.substr(0, 2), "c-") << run.out;
    return run.status == 0 && !run.out.empty() ? run.out.substr(0, run.out.size() - 1) : "";
  }

  TempDir home_;
};

// Six lines over about three seconds.
constexpr char kPrinter[] = "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.5; done";
constexpr char kPrinted[] = "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n";

TEST_F(FollowE2e, LogsFollowGivesEveryLineInOrderAndReturnsWhenItEnds) {
  StartServe();
  const std::string id = RunDetached(kPrinter);
  ASSERT_FALSE(id.empty());
  CliResult followed = Tessera({"logs", "-f", id});
  EXPECT_EQ(followed.status, 0) << followed.err;
  EXPECT_EQ(followed.out, kPrinted) << followed.err;
  // It returned because the container ended, not before.
  EXPECT_EQ(Get("/v1/containers/" + id)["state"], "exited");
  CliResult tail = Tessera({"logs", "--tail", "2", id});
  EXPECT_EQ(tail.status, 0) << tail.err;
  EXPECT_EQ(tail.out, "line 5\nline 6\n");
}

TEST_F(FollowE2e, RunStreamsTheOutputAndExitsWithTheContainersCode) {
  StartServe();
  CliResult run = Tessera(
      {"run", "--tenancy", "follow", image_, "/bin/sh", "-c", std::string(kPrinter) + "; exit 3"});
  EXPECT_EQ(run.status, 3) << run.err;
  EXPECT_EQ(run.out, kPrinted) << run.err;
}

TEST_F(FollowE2e, StopEndsASleepingContainerAndWaitGivesItsCode) {
  StartServe();
  const std::string id = RunDetached("sleep 300");
  ASSERT_FALSE(id.empty());
  WaitFor(id, {"running"});
  auto waiting = std::async(std::launch::async, [&] { return Tessera({"wait", id}); });
  CliResult stop = Tessera({"stop", id});
  EXPECT_EQ(stop.status, 0) << stop.err;
  EXPECT_EQ(stop.out, id + "\n");
  CliResult wait = waiting.get();
  // sleep as PID 1 ignores SIGTERM, so the service's SIGKILL after its grace ends it (137);
  // 143 if it took the SIGTERM.
  EXPECT_TRUE(wait.out == "137\n" || wait.out == "143\n") << wait.out << wait.err;
  EXPECT_EQ(std::to_string(wait.status) + "\n", wait.out);
}

TEST_F(FollowE2e, WaitExitsWithTheLastContainersCode) {
  StartServe();
  const std::string three = RunDetached("exit 3");
  const std::string zero = RunDetached("true");
  ASSERT_FALSE(three.empty());
  ASSERT_FALSE(zero.empty());
  CliResult wait = Tessera({"wait", zero, three});
  EXPECT_EQ(wait.status, 3) << wait.err;
  EXPECT_EQ(wait.out, "0\n3\n");
}

}  // namespace
}  // namespace tessera::testing
