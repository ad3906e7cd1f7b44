// The real tessera-serve given a flag out of its range or naming the wrong kind of path: it exits
// with status 2 and a message naming the flag, before it has made its data directory or written
// its port file (so before it binds), and promptly: a FIFO named by --nvml is refused without
// being opened. The same flags at the ends of their ranges, naming the right things, start it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "serve/serve_process.h"
#include "support/fake_nvml_state.h"

namespace tessera::testing {
namespace {

struct Exit {
  int status = -1;  // exit status; 128 + signal when killed
  bool hung = false;
  std::string output;  // stdout and stderr
};

class FlagRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MaterializeHost("hgx-h100-dgx");
    WriteGpuRoms(root_);
    std::ofstream(At("file")) << "x";
    std::ofstream(At("script")) << "#!/bin/sh\nexit 0\n";
    ::chmod(At("script").c_str(), 0755);
    ASSERT_EQ(::mkfifo(At("nvml.fifo").c_str(), 0600), 0);
    std::filesystem::create_directories(At("real"));
    std::filesystem::create_directory_symlink(At("real"), At("link"));
  }

  std::string At(const std::string& name) const { return dir_.path() + "/" + name; }

  // Runs tessera-serve on the fixture host with the null backend and `extra`, its data and port
  // file in a directory of its own, and waits (60 s at most) for it to end.
  Exit Run(const std::string& name, const std::vector<std::string>& extra) {
    const std::string run = At("run-" + name);
    std::filesystem::create_directories(run);
    // The defaults of a test service, less those `extra` gives itself.
    const std::vector<std::string> defaults = {
        "--listen",    "127.0.0.1:0", "--data-dir",   run + "/data",
        "--port-file", run + "/port", "--lease-file", run + "/leases.json",
        "--root",      root_,         "--backend",    "null",
        "--cdi-dir",   run + "/cdi",  "--cdi-kind",   "tessera-test.example/gpu"};
    std::vector<std::string> argv = {std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-serve"};
    for (size_t i = 0; i < defaults.size(); i += 2) {
      if (std::find(extra.begin(), extra.end(), defaults[i]) != extra.end()) continue;
      argv.push_back(defaults[i]);
      argv.push_back(defaults[i + 1]);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<char*> args;
    for (auto& arg : argv)
      args.push_back(arg.data());
    args.push_back(nullptr);
    const std::string log = run + "/output";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    Exit exit;
    if (rc != 0) {
      exit.output = "posix_spawn failed";
      return exit;
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        exit.hung = true;
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    exit.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    exit.output = ReadText(log);
    made_data_dir_ = std::filesystem::exists(run + "/data");
    wrote_port_ = std::filesystem::exists(run + "/port");
    return exit;
  }

  // Expects `extra` refused: status 2, every one of `wanted` in the message, nothing made.
  void ExpectRefused(const std::vector<std::string>& extra,
                     const std::vector<std::string>& wanted) {
    const Exit exit = Run(std::to_string(++runs_), extra);
    EXPECT_FALSE(exit.hung) << "still running after 60 s\n" << exit.output;
    EXPECT_EQ(exit.status, 2) << exit.output;
    for (const auto& text : wanted)
      EXPECT_NE(exit.output.find(text), std::string::npos) << text << "\n" << exit.output;
    EXPECT_FALSE(made_data_dir_) << "the data directory was made before the refusal";
    EXPECT_FALSE(wrote_port_) << "it bound a port";
  }

  TempDir dir_;
  std::string root_;
  int runs_ = 0;
  bool made_data_dir_ = false;
  bool wrote_port_ = false;
};

TEST_F(FlagRefusal, DurationsOutsideTheirRangesAreRefusedWithTheRange) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--share-grace", "1000000d"}, "--share-grace 1000000d: must be from 100ms to 1h"},
      {{"--share-grace", "10ms"}, "--share-grace 10ms: must be from 100ms to 1h"},
      {{"--share-check-interval", "2m"}, "--share-check-interval 2m: must be from 10ms to 1m"},
      {{"--mps-command-timeout", "1h"}, "--mps-command-timeout 1h: must be from 100ms to 5m"},
      {{"--mps-command-timeout", "25d"}, "--mps-command-timeout 25d: must be from 100ms to 5m"},
      {{"--telemetry-interval", "2h"}, "--telemetry-interval 2h: must be from 100ms to 1h"},
      {{"--telemetry-interval", "99999999999999999999d"}, "--telemetry-interval: duration"},
      {{"--share-grace", "106751991168d"}, "--share-grace: duration"},
      {{"--retention-sweep-interval", "2d"}, "--retention-sweep-interval 2d: must be from"},
      {{"--audit-retention", "30m"}, "--audit-retention 30m: must be from 1h to 3660d"},
  };
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(flags[0] + " " + flags[1]);
    ExpectRefused(flags, {message});
  }
}

TEST_F(FlagRefusal, QuantitiesAndNamesAreRefusedBeforeAnythingIsMadeToo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--share-reserve", "1Ki"}, "--share-reserve"},
      {{"--share-reserve", "5Ti"}, "--share-reserve"},
      {{"--share-timeslice", "forever"}, "--share-timeslice: want default, short, medium or long"},
      {{"--scheduling", "lottery"}, "--scheduling"},
      {{"--placement-policy", "random"}, "--placement-policy"},
      {{"--firmware-check", "no-equals-sign"}, "--firmware-check no-equals-sign: want"},
      {{"--container-log-max", "63Ki"}, "--container-log-max 63Ki: must be from 64Ki to 1Ti"},
      {{"--container-log-max", "16MB"}, "--container-log-max 16MB: want a whole number"},
      {{"--store-reserve", "2Ti"}, "--store-reserve 2Ti: must be from 0 to 1Ti"},
  };
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(flags[0] + " " + flags[1]);
    ExpectRefused(flags, {message});
  }
}

TEST_F(FlagRefusal, IntegerRangesAndNamesAreCli11sAndEndItAsEarly) {
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--log-level", "verbose"},
                                                {"--mps-shm-mib", "0"},
                                                {"--io-threads", "99999999999999999999"},
                                                {"--telemetry-max-series", "-1"}}) {
    SCOPED_TRACE(flags[0] + " " + flags[1]);
    const Exit exit = Run(std::to_string(++runs_), flags);
    EXPECT_FALSE(exit.hung);
    EXPECT_NE(exit.status, 0);
    EXPECT_NE(exit.output.find(flags[0]), std::string::npos) << exit.output;
    EXPECT_FALSE(made_data_dir_);
    EXPECT_FALSE(wrote_port_);
  }
}

TEST_F(FlagRefusal, AnMpsRootThatIsNoDirectoryOrCannotGoIntoAMountIsRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {At("file"), "a regular file, not a directory"},
      {"/dev/null", "a character device, not a directory"},
      {"/dev/null/mps", "/dev/null is a character device"},
      {"relative/mps", "must be an absolute path"},
      {At("a,b"), "must not hold ','"},
      {At("a\"b"), "must not hold '\"'"},
      {At("real/../mps"), "normal form"},
      {"/", "must be a directory below /"},
      {At("link/mps"), At("link") + " is a symbolic link"},
  };
  for (const auto& [root, message] : cases) {
    SCOPED_TRACE(root);
    ExpectRefused({"--mps-root", root}, {"--mps-root", message});
  }
  // Refused before anything was made under it either.
  EXPECT_FALSE(std::filesystem::exists(At("a,b")));
  EXPECT_TRUE(std::filesystem::is_empty(At("real")));
}

TEST_F(FlagRefusal, ProgramsThatAreNotThereAreRefused) {
  ExpectRefused({"--mps-control", At("missing/nvidia-cuda-mps-control")},
                {"--mps-control " + At("missing/nvidia-cuda-mps-control") + ": no such file"});
  ExpectRefused({"--mps-control", "tessera-no-such-mps-control"},
                {"--mps-control tessera-no-such-mps-control: not found in PATH"});
  ExpectRefused({"--mps-control", At("file")}, {"--mps-control", "not executable"});
  ExpectRefused({"--mps-control", At("real")}, {"--mps-control", "a directory"});
  ExpectRefused({"--nvidia-smi", At("missing-smi")}, {"--nvidia-smi", "no such file"});
  // Needed for --share-timeslice whatever its name.
  ExpectRefused({"--share-timeslice", "short", "--nvidia-smi", "tessera-no-such-smi"},
                {"--nvidia-smi tessera-no-such-smi: not found in PATH"});
  ExpectRefused({"--firmware-check-command", At("missing-check") + " --strict"},
                {"--firmware-check-command " + At("missing-check"), "no such file"});
  ExpectRefused({"--firmware-check", "0000:18:00.0=" + At("missing-check")},
                {"--firmware-check " + At("missing-check")});
}

TEST_F(FlagRefusal, PathsNamingTheWrongKindOfFileAreRefusedWithoutOpeningThem) {
  // dlopen() of a FIFO blocks in open(): the start would hang here, not end.
  ExpectRefused({"--nvml", At("nvml.fifo")}, {"--nvml " + At("nvml.fifo") + ": a FIFO"});
  ExpectRefused({"--nvml", "/dev/zero"}, {"--nvml /dev/zero: a character device"});
  ExpectRefused({"--nvml", At("missing.so")}, {"--nvml", "no such file"});
  ExpectRefused({"--nvfm-library", At("nvml.fifo")}, {"--nvfm-library", "a FIFO"});
  ExpectRefused({"--telemetry-proc-dir", "/dev/zero"},
                {"--telemetry-proc-dir /dev/zero: a character device, not a directory"});
  ExpectRefused({"--telemetry-proc-dir", At("missing")}, {"--telemetry-proc-dir", "no such"});
  ExpectRefused({"--cdi-dir", "/dev/null/cdi"}, {"--cdi-dir", "/dev/null is a character device"});
  ExpectRefused({"--lease-file", At("real")}, {"--lease-file", "a directory, not a file"});
  ExpectRefused({"--root", At("file")}, {"--root", "not a directory"});
}

TEST_F(FlagRefusal, TheSameFlagsAtTheEndsOfTheirRangesStart) {
  ServeProcess serve(dir_.path(), NullBackendFlags(root_, dir_.path(),
                                                   {"--share-grace",
                                                    "1h",
                                                    "--share-check-interval",
                                                    "1m",
                                                    "--mps-command-timeout",
                                                    "100ms",
                                                    "--telemetry-interval",
                                                    "1h",
                                                    "--mps-root",
                                                    At("real/mps"),
                                                    "--mps-control",
                                                    At("script"),
                                                    "--share-timeslice",
                                                    "short",
                                                    "--nvidia-smi",
                                                    At("script"),
                                                    "--telemetry-proc-dir",
                                                    "/proc",
                                                    "--firmware-check-command",
                                                    At("script") + " --strict",
                                                    "--container-log-max",
                                                    "64Ki",
                                                    "--store-reserve",
                                                    "0"}));
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  EXPECT_EQ(serve.Kill(SIGTERM), 0);
}

TEST_F(FlagRefusal, TheDefaultMpsControlMissingWhereGpusCanBeSharedIsAWarningNotARefusal) {
  // A PATH with nothing on it, so that the default control binary is missing whatever this host
  // has installed (the service inherits the test's environment).
  TempDir empty_path;
  const char* saved = std::getenv("PATH");
  const std::string path = saved ? saved : "";
  ::setenv("PATH", empty_path.path().c_str(), 1);
  // The stand-in NVML sizes the fixture's GPUs (H100 80GB): shares can be placed on them.
  FakeNvmlState nvml("hgx-h100-dgx");
  ServeProcess serve(dir_.path(), NullBackendFlags(root_, dir_.path(), {"--nvml", FAKE_NVML}));
  std::string log;
  const bool started = serve.Start(&log);
  ::setenv("PATH", path.c_str(), 1);
  ASSERT_TRUE(started) << log;
  EXPECT_NE(serve.log().find("--mps-control nvidia-cuda-mps-control: not found in PATH"),
            std::string::npos)
      << serve.log();
  EXPECT_NE(serve.log().find("MPS shares cannot start here (time-sliced ones can)"),
            std::string::npos);
  EXPECT_EQ(serve.Kill(SIGTERM), 0);
}

}  // namespace
}  // namespace tessera::testing
