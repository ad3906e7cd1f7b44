// GET /v1/containers/{id}/logs's query (tail, offset) and its follow protocol
// (Tessera-Log-Offset, Tessera-Container-State, Tessera-Log-Cut), and the client verbs that
// use it (run -d, logs, stop, wait), against a real tessera-serve with the null backend: its
// containers print nothing and exit 0 at once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "serve/cli_process.h"
#include "serve/container_wait.h"
#include "serve/null_serve_fixture.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

class LogsApi : public NullServeTest {
 protected:
  void SetUp() override {
    NullServeTest::SetUp();
    StartServe();
  }

  // A container of tenancy "team" that has ended.
  std::string Ended() {
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers",
                           R"({"image":"busybox","tenancy":"team","command":["true"]})", &status);
    EXPECT_EQ(status, 202) << answer;
    const std::string id = answer.value("id", "");
    WaitForContainerState(*admin_, *serve_, id, {"exited"});
    return id;
  }
  CliResult Tessera(std::vector<std::string> args) {
    return RunTessera(*serve_, serve_->admin_token(), home_.path(), std::move(args));
  }

  TempDir home_;
};

TEST_F(LogsApi, TheAnswerSaysWhereToGoOnAndTheContainersState) {
  const std::string id = Ended();
  auto plain = admin_->Call("GET", "/v1/containers/" + id + "/logs");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 200) << plain->body;
  EXPECT_EQ(plain->body, "");
  EXPECT_EQ(plain->headers["tessera-log-offset"], "0");
  EXPECT_EQ(plain->headers["tessera-container-state"], "exited");
  EXPECT_EQ(plain->headers.count("tessera-log-cut"), 0u);
  auto both = admin_->Call("GET", "/v1/containers/" + id + "/logs?tail=2&offset=0");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->status, 200) << both->body;
  EXPECT_EQ(both->headers["tessera-log-offset"], "0");
}

TEST_F(LogsApi, AnOffsetPastTheEndIsReadFromTheStartAndSaidToBeCut) {
  const std::string id = Ended();
  auto past = admin_->Call("GET", "/v1/containers/" + id + "/logs?offset=4096");
  ASSERT_TRUE(past);
  EXPECT_EQ(past->status, 200) << past->body;
  EXPECT_EQ(past->headers["tessera-log-cut"], "true");
  EXPECT_EQ(past->headers["tessera-log-offset"], "0");
}

TEST_F(LogsApi, BadQueriesAre400NamingTheParameterNeverEchoingItWhole) {
  const std::string id = Ended();
  const std::string long_value(5000, '7');
  const std::string long_name(5000, 'q');
  for (const auto& [query, named] : std::vector<std::pair<std::string, std::string>>{
           {"offset=-1", "offset"},
           {"offset=abc", "offset"},
           {"offset=", "offset"},
           {"offset=1125899906842625", "offset"},  // 2^50 + 1
           {"offset=" + long_value, "offset"},
           {"offset=%2B5", "offset"},
           {"tail=0", "tail"},
           {"tail=100001", "tail"},
           {"tail=-3", "tail"},
           {"tail=1&tail=2", "tail"},
           {"offset=1&offset=1", "offset"},
           {"follow=true", "follow"},
           {"tail", "tail"},
           {long_name + "=1", "qqqq"}}) {
    auto response = admin_->Call("GET", "/v1/containers/" + id + "/logs?" + query);
    ASSERT_TRUE(response) << query.substr(0, 80);
    EXPECT_EQ(response->status, 400) << query.substr(0, 80) << ": " << response->body;
    EXPECT_NE(response->body.find(named), std::string::npos) << response->body;
    EXPECT_LT(response->body.size(), 1000u) << query.substr(0, 80);
  }
  // The query is checked before the container is looked up, as for every other endpoint; an
  // unknown container with a good query is 404.
  auto unknown = admin_->Call("GET", "/v1/containers/c-nope/logs?tail=5");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
}

TEST_F(LogsApi, AnotherTenancysContainersLogsAreNotFound) {
  const std::string id = Ended();
  const std::string other = TenancyToken(*admin_, "other");
  ASSERT_FALSE(other.empty());
  auto response = serve_->Connect(other)->Call("GET", "/v1/containers/" + id + "/logs?offset=0");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(response->headers.count("tessera-log-offset"), 0u);
}

TEST_F(LogsApi, RunDetachedPrintsTheIdAndWaitItsExitCode) {
  CliResult run = Tessera({"run", "-d", "--tenancy", "team", "busybox", "true"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.out.substr(0, 2), "c-") << run.out;
  ASSERT_EQ(run.out.back(), '\n');
  const std::string id = run.out.substr(0, run.out.size() - 1);
  CliResult wait = Tessera({"wait", id});
  EXPECT_EQ(wait.status, 0) << wait.err;
  EXPECT_EQ(wait.out, "0\n");
  CliResult logs = Tessera({"logs", "-f", "--tail", "2", id});
  EXPECT_EQ(logs.status, 0) << logs.err;
  EXPECT_EQ(logs.out, "");
}

TEST_F(LogsApi, VerbsGiveTheDocumentedExitCodes) {
  const std::string id = Ended();
  // stop goes on through the list and exits with the first failure's code (not found: 3).
  CliResult stop = Tessera({"stop", "c-nope", id});
  EXPECT_EQ(stop.status, 3) << stop.err;
  EXPECT_EQ(stop.out, id + "\n");
  EXPECT_NE(stop.err.find("c-nope"), std::string::npos) << stop.err;
  // An ID that would change the request's path is bad input (2), never sent.
  CliResult bad = Tessera({"logs", "../tokens"});
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_EQ(Tessera({"wait", "c-nope"}).status, 3);
  CliResult zero = Tessera({"logs", "--tail", "0", id});
  EXPECT_NE(zero.status, 0);
  EXPECT_EQ(zero.out, "");
  // Another tenancy's token sees no such container.
  const std::string other = TenancyToken(*admin_, "other");
  CliResult foreign = RunTessera(*serve_, other, home_.path(), {"logs", id});
  EXPECT_EQ(foreign.status, 3) << foreign.err;
}

// On a terminal (script(1) gives it one) the wait line is written in place: a carriage return
// and an erase of the line before each new text, and the line erased once it no longer waits.
TEST_F(LogsApi, RunShowsTheWaitLineInPlaceOnATerminal) {
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/team", R"({"quota":{"gpus":0}})", &status);
  ASSERT_EQ(status, 200);
  const std::string command =
      std::string(TESSERA_BINARY_DIR) +
      "/src/cli/tessera run --server http://127.0.0.1:" + std::to_string(serve_->port()) +
      " --tenancy team --gpus 1 busybox true";
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  std::vector<std::string> argv = {"/usr/bin/script", "-qefc", command, "/dev/null"};
  std::vector<std::string> env = {"TESSERA_TOKEN=" + serve_->admin_token(), "HOME=" + home_.path(),
                                  "PATH=/usr/bin:/bin", "TERM=dumb"};
  std::vector<char*> args, envp;
  for (auto& arg : argv)
    args.push_back(arg.data());
  args.push_back(nullptr);
  for (auto& entry : env)
    envp.push_back(entry.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  std::string seen;
  auto read_until = [&](const std::string& wanted) {
    const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
    char buffer[512];
    while (seen.find(wanted) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      ssize_t n = ::read(pipe_fds[0], buffer, sizeof(buffer));
      if (n <= 0) break;
      seen.append(buffer, static_cast<size_t>(n));
    }
    return seen.find(wanted) != std::string::npos;
  };
  EXPECT_TRUE(read_until("\r\033[Ktessera: c-")) << seen;
  EXPECT_TRUE(read_until("waiting: tenancy quota 0/0 GPUs in use (queue position 1)")) << seen;
  CallJson(*admin_, "PUT", "/v1/tenancies/team", R"({"quota":{"gpus":null}})", &status);
  ASSERT_EQ(status, 200);
  read_until("\x01");  // to EOF
  ::close(pipe_fds[0]);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(pid, &wait_status, 0), pid);
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) << wait_status << seen;
  // No plain line of it: the text ends with the erase, not a newline after the reason.
  EXPECT_EQ(seen.find("(queue position 1)\n"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("(queue position 1)\r\n"), std::string::npos) << seen;
  EXPECT_NE(seen.rfind("\r\033[K"), seen.find("\r\033[K")) << seen;
}

}  // namespace
}  // namespace tessera::testing
