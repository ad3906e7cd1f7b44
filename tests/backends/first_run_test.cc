// A newcomer's first `tessera run`: tessera-serve with the local backend on this host, the
// `tessera run` client, real podman and runc, and no containers.conf at all (CONTAINERS_CONF
// names an empty file, so no file on this machine hides what podman does by default).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <regex>

#include "serve/serve_process.h"
#include "support/podman_harness.h"

namespace tessera::testing {
namespace {

// Whether this process may raise hard limits (CAP_SYS_RESOURCE, bit 24 of CapEff). Where it may
// not, podman's default ulimits for root (1048576 files and processes) cannot be set by runc.
bool MayRaiseHardLimits() {
  std::string status = ReadText("/proc/self/status");
  auto at = status.find("CapEff:");
  if (at == std::string::npos) return false;
  return (std::stoull(status.substr(at + 7), nullptr, 16) >> 24) & 1;
}

uint64_t OwnHardLimit(int resource) {
  struct rlimit limit {};
  ::getrlimit(resource, &limit);
  return limit.rlim_max;
}

class FirstRun : public ::testing::Test {
 protected:
  void SetUp() override {
    const Podman& podman = Podman::Get();  // imports the busybox image once per build tree
    ASSERT_TRUE(podman.ready()) << podman.setup_error();
    image_ = podman.image();
    kind_ = UniqueTestKind("gpu");
    instance_ =
        "first-run-" + std::to_string(::getpid()) + "-" + kind_.substr(kind_.rfind('-') + 1);
  }

  void TearDown() override {
    serve_.reset();
    RemoveInstanceContainers(instance_);
    RemoveSpecsOfKind(kind_);
  }

  // tessera-serve on this host (root /, local backend) with CONTAINERS_CONF naming a file that
  // holds `containers_conf`; podman's own calls in this test see the same file.
  void StartServe(const std::string& containers_conf) {
    const std::string conf = dir_.path() + "/containers.conf";
    std::ofstream(conf) << containers_conf;
    ::setenv("CONTAINERS_CONF", conf.c_str(), 1);
    serve_ = std::make_unique<ServeProcess>(
        dir_.path(), std::vector<std::string>{"--root", "/", "--cdi-kind", kind_, "--instance",
                                              instance_, "--stop-grace-s", "1"});
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
  }

  // `tessera run IMAGE ARGS...` against that service, as a user types it.
  CommandResult TesseraRun(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        TesseraBinary(), "run",
        "--server",      "http://127.0.0.1:" + std::to_string(serve_->port()),
        "--token-file",  serve_->data_dir() + "/admin.token",
        image_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunArgv(argv);
  }

  TempDir dir_;
  std::string image_, kind_, instance_;
  std::unique_ptr<ServeProcess> serve_;
};

TEST_F(FirstRun, TesseraRunEchoHelloPrintsHelloWithNoContainersConf) {
  StartServe("");
  CommandResult run = TesseraRun({"echo", "hello"});
  EXPECT_EQ(run.status, 0) << run.output << "\n" << serve_->log();
  // Its output is the container's (a line about a wait in the queue could come before it).
  EXPECT_NE(run.output.find("hello\n"), std::string::npos) << run.output << "\n" << serve_->log();

  // What the start check found and chose is in the log, with its reasons.
  const std::string log = serve_->log();
  if (MayRaiseHardLimits()) {
    EXPECT_NE(log.find("podman starts runc containers here with its default ulimits"),
              std::string::npos)
        << log;
    return;
  }
  std::smatch chosen;
  ASSERT_TRUE(std::regex_search(
      log, chosen,
      std::regex("containers get --ulimit nofile=([0-9]+):[0-9]+ --ulimit nproc=([0-9]+):[0-9]+")))
      << log;
  EXPECT_NE(log.find("error setting rlimit type"), std::string::npos) << log;
  EXPECT_NE(log.find("conmon, runc's parent, runs with nofile"), std::string::npos) << log;
  // Within what this process (and so tessera-serve, its child) may set.
  EXPECT_LE(std::stoull(chosen[1]), OwnHardLimit(RLIMIT_NOFILE));
  EXPECT_LE(std::stoull(chosen[2]), OwnHardLimit(RLIMIT_NPROC));
}

TEST_F(FirstRun, AnotherStartFailureAnswersWithDoctorsDiagnosisAndFix) {
  // podman refuses before creating the container: the seccomp profile it is told to use is gone.
  StartServe("[containers]\nseccomp_profile = \"" + dir_.path() + "/gone.json\"\n");
  CommandResult run = TesseraRun({"echo", "hello"});
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_EQ(run.output.find("hello\n"), std::string::npos) << run.output;
  // The container's reason, as `tessera run` prints it: podman's error line and doctor's fix.
  EXPECT_NE(run.output.find("opening seccomp profile failed"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("fix: the seccomp profile podman is told to use cannot be read"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("$CONTAINERS_CONF (" + dir_.path() + "/containers.conf)"),
            std::string::npos)
      << run.output;
  // The start check said the same when the service started.
  const std::string log = serve_->log();
  EXPECT_NE(log.find("podman cannot start a runc container here: Error: opening seccomp profile"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace tessera::testing
