// Tenancy scheduling policies, submissions with priorities and limits, the pending quota under
// concurrent submissions, the queue and metering endpoints: a real tessera-serve process over
// real sockets with the null backend on the HGX fixture (8 GPUs).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "serve/null_serve_fixture.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class ServeQueueApi : public NullServeTest {
 protected:
  void SetUp() override {
    NullServeTest::SetUp();
    StartServe();
  }

  json Put(const std::string& tenancy, const std::string& body, int* status) {
    return CallJson(*admin_, "PUT", "/v1/tenancies/" + tenancy, body, status);
  }

  std::unique_ptr<client::Connection> TokenFor(const std::string& tenancy) {
    int status = 0;
    auto token = CallJson(*admin_, "POST", "/v1/tenancies/" + tenancy + "/tokens", "", &status);
    EXPECT_EQ(status, 201) << token;
    return serve_->Connect(token.value("token", ""));
  }

  static std::string Submission(const std::string& tenancy, int gpus, const std::string& extra) {
    return R"({"image":"busybox","tenancy":")" + tenancy + R"(","gpus":)" + std::to_string(gpus) +
           extra + "}";
  }
};

TEST_F(ServeQueueApi, TenancyPolicyIsValidatedStoredAndShown) {
  int status = 0;
  auto put =
      Put("team-a", R"({"quota":{"gpus":4,"pending":2},"weight":3,"maxPriority":5})", &status);
  ASSERT_EQ(status, 200) << put;
  EXPECT_EQ(put["quota"]["gpus"], 4);
  EXPECT_EQ(put["quota"]["pending"], 2);
  EXPECT_EQ(put["weight"], 3.0);
  EXPECT_EQ(put["maxPriority"], 5);
  EXPECT_FALSE(put["extensions"].contains("scheduling")) << put;
  // Another PUT without policy fields keeps it; with one, the policy is set whole.
  Put("team-a", R"({"labels":{"team":"ml"}})", &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/tenancies/team-a")["quota"]["gpus"], 4);
  // Bad values are 400 naming the field, and change nothing.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"weight":-1})", "weight"},
      {R"({"weight":1e9})", "weight"},
      {R"({"quota":{"gpus":"all"}})", "quota.gpus"},
      {R"({"quota":{"pending":-2}})", "quota.pending"},
      {R"({"maxPriority":99999})", "maxPriority"},
      {R"({"extensions":{"scheduling":{"weight":9}}})", "extensions.scheduling"},
  };
  for (const auto& [body, field] : bad) {
    auto answer = Put("team-a", body, &status);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(answer["error"]["message"].get<std::string>().rfind(field, 0), 0u) << answer;
  }
  // Durable: the record survives a kill.
  serve_->Kill(SIGKILL);
  ASSERT_TRUE(serve_->Start());
  admin_ = serve_->Connect(serve_->admin_token());
  auto got = CallJson(*admin_, "GET", "/v1/tenancies/team-a", "", &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(got["quota"]["gpus"], 4);
  EXPECT_EQ(got["quota"]["pending"], 2);
  EXPECT_EQ(got["weight"], 3.0);
  EXPECT_EQ(got["maxPriority"], 5);
  EXPECT_EQ(got["labels"]["team"], "ml");
  // A quota of null is unlimited.
  auto unlimited = Put("team-a", R"({"quota":{"gpus":null},"weight":1})", &status);
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(unlimited["quota"]["gpus"].is_null());
  EXPECT_EQ(unlimited["maxPriority"], 0);
}

TEST_F(ServeQueueApi, SubmissionsCarryPriorityLimitAndPreemptibleWithinTheirBounds) {
  int status = 0;
  Put("team-a", R"({"maxPriority":5})", &status);
  ASSERT_EQ(status, 200);
  auto tenant = TokenFor("team-a");
  auto above = CallJson(*tenant, "POST", "/v1/containers",
                        Submission("team-a", 1, R"(,"priority":6)"), &status);
  EXPECT_EQ(status, 403) << above;
  EXPECT_NE(above["error"]["message"].get<std::string>().find("maxPriority 5"), std::string::npos)
      << above;
  auto out_of_range = CallJson(*tenant, "POST", "/v1/containers",
                               Submission("team-a", 1, R"(,"priority":5000)"), &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(out_of_range["error"]["message"].get<std::string>().rfind("priority", 0), 0u);
  for (const auto& extra :
       {R"(,"maxDurationSeconds":0)", R"(,"maxDurationSeconds":1.5)", R"(,"preemptible":"yes")"}) {
    auto answer =
        CallJson(*tenant, "POST", "/v1/containers", Submission("team-a", 1, extra), &status);
    EXPECT_EQ(status, 400) << extra << answer;
  }
  auto accepted = CallJson(
      *tenant, "POST", "/v1/containers",
      Submission("team-a", 2, R"(,"priority":5,"maxDurationSeconds":60,"preemptible":true)"),
      &status);
  ASSERT_EQ(status, 202) << accepted;
  EXPECT_EQ(accepted["priority"], 5);
  EXPECT_EQ(accepted["maxDurationSeconds"], 60);
  EXPECT_EQ(accepted["preemptible"], true);
  serve_->Kill(SIGKILL);
  ASSERT_TRUE(serve_->Start());
  admin_ = serve_->Connect(serve_->admin_token());
  auto got = CallJson(*admin_, "GET", "/v1/containers/" + accepted["id"].get<std::string>());
  EXPECT_EQ(got["priority"], 5);
  EXPECT_EQ(got["maxDurationSeconds"], 60);
  EXPECT_EQ(got["preemptible"], true);
}

TEST_F(ServeQueueApi, PendingQuotaHoldsUnderConcurrentSubmissions) {
  int status = 0;
  // No GPU may run for this tenancy, so whatever it submits stays pending.
  Put("team-a", R"({"quota":{"gpus":0,"pending":3}})", &status);
  ASSERT_EQ(status, 200);
  auto tenant = TokenFor("team-a");
  std::atomic<int> accepted{0}, refused{0}, other{0};
  std::string refusal;
  std::mutex refusal_mutex;
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      auto connection = serve_->Connect(serve_->admin_token());
      int code = 0;
      auto answer =
          CallJson(*connection, "POST", "/v1/containers", Submission("team-a", 1, ""), &code);
      if (code == 202) {
        accepted++;
      } else if (code == 429) {
        refused++;
        std::lock_guard lock(refusal_mutex);
        refusal = answer["error"]["message"];
      } else {
        other++;
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(accepted, 3);
  EXPECT_EQ(refused, 13);
  EXPECT_EQ(other, 0);
  EXPECT_EQ(refusal, "tenancy quota: 3/3 requests pending");

  // Each waits, says why, and has its place; the queue lists them in dispatch order.
  json queue;
  ASSERT_TRUE(WaitUntil([&] {
    queue = CallJson(*admin_, "GET", "/v1/queue");
    return queue["queue"].size() == 3u;
  })) << queue;
  EXPECT_EQ(queue["scheduling"], "fair");
  for (size_t i = 0; i < 3; ++i) {
    const auto& entry = queue["queue"][i];
    EXPECT_EQ(entry["queue_position"], static_cast<int>(i) + 1);
    EXPECT_EQ(entry["reason"], "waiting: tenancy quota 0/0 GPUs in use") << entry;
    auto container = CallJson(*tenant, "GET", "/v1/containers/" + entry["id"].get<std::string>());
    EXPECT_EQ(container["state"], "pending");
    EXPECT_EQ(container["queue_position"], entry["queue_position"]);
    EXPECT_EQ(container["reason"], entry["reason"]);
  }
  ASSERT_EQ(queue["tenancies"].size(), 1u) << queue;
  EXPECT_EQ(queue["tenancies"][0]["name"], "team-a");
  EXPECT_EQ(queue["tenancies"][0]["pending"], 3);
  EXPECT_EQ(queue["tenancies"][0]["quota"]["gpus"], 0);
  // A tenant sees its own entries; another tenancy sees none of them.
  EXPECT_EQ(CallJson(*tenant, "GET", "/v1/queue")["queue"].size(), 3u);
  Put("team-b", "{}", &status);
  auto other_tenant = TokenFor("team-b");
  auto seen_by_b = CallJson(*other_tenant, "GET", "/v1/queue");
  EXPECT_TRUE(seen_by_b["queue"].empty()) << seen_by_b;
  for (const auto& share : seen_by_b["tenancies"])
    EXPECT_EQ(share["name"], "team-b");

  // One leaves the queue: there is room for one more, and only one.
  CallJson(*tenant, "DELETE", "/v1/containers/" + queue["queue"][0]["id"].get<std::string>(), "",
           &status);
  EXPECT_EQ(status, 200);
  CallJson(*tenant, "POST", "/v1/containers", Submission("team-a", 1, ""), &status);
  EXPECT_EQ(status, 202);
  CallJson(*tenant, "POST", "/v1/containers", Submission("team-a", 1, ""), &status);
  EXPECT_EQ(status, 429);
  // Containers without GPUs do not queue.
  CallJson(*tenant, "POST", "/v1/containers", Submission("team-a", 0, ""), &status);
  EXPECT_EQ(status, 202);
}

TEST_F(ServeQueueApi, UsageAndMetricsReportMeteredGpuTime) {
  int status = 0;
  auto submitted =
      CallJson(*admin_, "POST", "/v1/containers", Submission("team-a", 2, ""), &status);
  ASSERT_EQ(status, 202);
  const std::string id = submitted["id"];
  json container;
  ASSERT_TRUE(WaitUntil([&] {
    container = CallJson(*admin_, "GET", "/v1/containers/" + id);
    return container.value("state", "") == "exited";
  }));
  auto usage = CallJson(*admin_, "GET", "/v1/tenancies/team-a/usage", "", &status);
  ASSERT_EQ(status, 200) << usage;
  ASSERT_EQ(usage["containers_total"], 1) << usage;
  const auto& metered = usage["containers"][0];
  EXPECT_EQ(metered["id"], id);
  EXPECT_EQ(metered["gpus"], 2);
  EXPECT_EQ(metered["started_ms"], container["started_ms"]);
  EXPECT_EQ(metered["finished_ms"], container["finished_ms"]);
  const double expected =
      2 * (container["finished_ms"].get<int64_t>() - container["started_ms"].get<int64_t>()) /
      1000.0;
  EXPECT_DOUBLE_EQ(usage["gpu_seconds"].get<double>(), expected);
  // A window that ends before it started holds none of it.
  const int64_t before = container["started_ms"].get<int64_t>() / 1000 - 10;
  auto earlier =
      CallJson(*admin_, "GET", "/v1/tenancies/team-a/usage?from=0&to=" + std::to_string(before), "",
               &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(earlier["gpu_seconds"], 0.0);
  EXPECT_EQ(earlier["containers_total"], 0);
  for (const auto& query : {"?from=-1", "?to=abc", "?from=10&to=5", "?from=1&from=2", "?since=1",
                            "?to=99999999999999"}) {
    auto answer =
        CallJson(*admin_, "GET", std::string("/v1/tenancies/team-a/usage") + query, "", &status);
    EXPECT_EQ(status, 400) << query << answer;
    EXPECT_EQ(answer["error"]["message"].get<std::string>().rfind("query parameter", 0), 0u)
        << answer;
  }
  // Another tenancy's token does not see it; the tenancy's own does.
  Put("team-b", "{}", &status);
  auto other = TokenFor("team-b");
  CallJson(*other, "GET", "/v1/tenancies/team-a/usage", "", &status);
  EXPECT_EQ(status, 404);
  auto own = TokenFor("team-a");
  EXPECT_EQ(CallJson(*own, "GET", "/v1/tenancies/team-a/usage")["containers_total"], 1);

  // Series per incarnation of the tenancy: its name and uid.
  const std::string labels =
      "tenancy=\"team-a\",uid=\"" +
      CallJson(*admin_, "GET", "/v1/tenancies/team-a")["uid"].get<std::string>() + "\"";
  auto metrics = serve_->Connect(serve_->admin_token())->Call("GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("tessera_tenancy_gpu_seconds_total{" + labels + "}"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("tessera_queue_wait_seconds_count{" + labels + "} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("tessera_queue_wait_seconds_bucket{" + labels + ",le=\"+Inf\"} 1"),
            std::string::npos);
}

// `tessera run` against the service: its stderr is read as it comes, so the test knows what it
// printed while its container waited.
TEST_F(ServeQueueApi, TesseraRunPrintsWhyItsContainerWaits) {
  int status = 0;
  Put("team-a", R"({"quota":{"gpus":0}})", &status);
  ASSERT_EQ(status, 200);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::string binary = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera";
  std::vector<std::string> argv = {
      binary,      "run",    "--server", "http://127.0.0.1:" + std::to_string(serve_->port()),
      "--tenancy", "team-a", "--gpus",   "1",
      "busybox",   "true"};
  std::vector<char*> args;
  for (auto& arg : argv)
    args.push_back(arg.data());
  args.push_back(nullptr);
  std::string token = "TESSERA_TOKEN=" + serve_->admin_token();
  char* env[] = {token.data(), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(::posix_spawn(&pid, binary.c_str(), &actions, nullptr, args.data(), env), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  std::string err;
  auto read_until = [&](const std::string& wanted) {
    const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
    char buffer[512];
    while (err.find(wanted) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      ssize_t n = ::read(pipe_fds[0], buffer, sizeof(buffer));
      if (n <= 0) break;
      err.append(buffer, static_cast<size_t>(n));
    }
    return err.find(wanted) != std::string::npos;
  };
  EXPECT_TRUE(read_until("waiting: tenancy quota 0/0 GPUs in use (queue position 1)")) << err;
  // The quota lifted, it runs (the null backend ends it at once) and `tessera run` returns.
  Put("team-a", R"({"quota":{"gpus":null}})", &status);
  ASSERT_EQ(status, 200);
  read_until("\x01");  // to EOF
  ::close(pipe_fds[0]);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(pid, &wait_status, 0), pid);
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) << wait_status << err;
  // Told once, not at every poll.
  const std::string line = "waiting: tenancy quota 0/0 GPUs in use";
  EXPECT_EQ(err.find(line), err.rfind(line)) << err;
}

}  // namespace
}  // namespace tessera::testing
