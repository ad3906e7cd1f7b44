// tessera-serve's flag rules that look at the host: what a path flag names, on real directories,
// files, FIFOs, links and devices. Only stat: a FIFO is refused without being opened (a test that
// opened one would hang here).
#include "serve/flag_paths.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tessera::serve {
namespace {

class FlagPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessera-flag-paths-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    std::filesystem::create_directories(dir_ + "/real/sub");
    std::ofstream(dir_ + "/file") << "x";
    std::ofstream(dir_ + "/script") << "#!/bin/sh\nexit 0\n";
    ::chmod((dir_ + "/script").c_str(), 0755);
    ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
    std::filesystem::create_directory_symlink(dir_ + "/real", dir_ + "/link");
    std::filesystem::create_symlink(dir_ + "/fifo", dir_ + "/fifo-link");
    std::filesystem::create_symlink(dir_ + "/file", dir_ + "/file-link");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string At(const std::string& name) const { return dir_ + "/" + name; }

  static std::string Refusal(const Status& status) {
    EXPECT_FALSE(status) << "accepted";
    return status ? "" : status.error().message;
  }

  std::string dir_;
};

TEST_F(FlagPaths, ADirectoryMustExistAndBeOne) {
  EXPECT_TRUE(CheckDirectory("--telemetry-proc-dir", "/proc"));
  EXPECT_TRUE(CheckDirectory("--root", At("link")));
  EXPECT_EQ(Refusal(CheckDirectory("--telemetry-proc-dir", "/dev/zero")),
            "--telemetry-proc-dir /dev/zero: a character device, not a directory");
  EXPECT_NE(Refusal(CheckDirectory("--root", At("fifo"))).find("a FIFO, not a directory"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckDirectory("--root", At("file"))).find("a regular file"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckDirectory("--root", At("missing"))).find("no such directory"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckDirectory("--root", At("file/below"))).find("no such directory"),
            std::string::npos);
}

TEST_F(FlagPaths, ADirectoryToMakeEndsInADirectoryWhereItExists) {
  EXPECT_TRUE(CheckDirectoryToMake("--mps-root", At("real")));
  EXPECT_TRUE(CheckDirectoryToMake("--mps-root", At("real/new")));
  EXPECT_TRUE(CheckDirectoryToMake("--mps-root", At("new/newer/newest")));
  EXPECT_TRUE(CheckDirectoryToMake("--data-dir", "relative-data-dir-that-is-not-there"));
  EXPECT_EQ(Refusal(CheckDirectoryToMake("--mps-root", "/dev/null")),
            "--mps-root /dev/null: a character device, not a directory");
  EXPECT_EQ(Refusal(CheckDirectoryToMake("--mps-root", "/dev/null/mps")),
            "--mps-root /dev/null/mps: /dev/null is a character device, not a directory");
  EXPECT_NE(Refusal(CheckDirectoryToMake("--mps-root", At("file"))).find("a regular file"),
            std::string::npos);
  EXPECT_NE(
      Refusal(CheckDirectoryToMake("--cdi-dir", At("file/a/b"))).find(At("file") + " is a regular"),
      std::string::npos);
  EXPECT_NE(Refusal(CheckDirectoryToMake("--data-dir", At("fifo"))).find("a FIFO"),
            std::string::npos);
}

TEST_F(FlagPaths, AFileToWriteIsNoDirectoryAndSitsUnderOne) {
  EXPECT_TRUE(CheckFileToWrite("--lease-file", At("leases.json")));
  EXPECT_TRUE(CheckFileToWrite("--lease-file", At("file")));
  EXPECT_TRUE(CheckFileToWrite("--lease-file", At("new/leases.json")));
  // A rename replaces a FIFO or a link; only a directory stops it.
  EXPECT_TRUE(CheckFileToWrite("--port-file", At("fifo")));
  EXPECT_TRUE(CheckFileToWrite("--port-file", At("link")));
  EXPECT_NE(Refusal(CheckFileToWrite("--lease-file", At("real"))).find("a directory, not a file"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckFileToWrite("--port-file", At("file/port"))).find("not a directory"),
            std::string::npos);
}

TEST_F(FlagPaths, ALinkInThePathIsNamedWithThePathToGiveInstead) {
  EXPECT_TRUE(CheckNoSymlinks("--mps-root", At("real/sub")));
  EXPECT_TRUE(CheckNoSymlinks("--mps-root", At("real/missing/more")));
  EXPECT_TRUE(CheckNoSymlinks("--mps-root", At("missing")));
  char* real_dir = ::realpath(dir_.c_str(), nullptr);
  ASSERT_NE(real_dir, nullptr);
  const std::string real(real_dir);
  std::free(real_dir);
  const std::string message = Refusal(CheckNoSymlinks("--mps-root", At("link/sub/mps")));
  EXPECT_EQ(message.rfind(
                "--mps-root " + At("link/sub/mps") + ": " + At("link") + " is a symbolic link", 0),
            0u)
      << message;
  EXPECT_NE(message.find("give the path without links, " + real + "/real/sub/mps"),
            std::string::npos)
      << message;
  EXPECT_NE(Refusal(CheckNoSymlinks("--mps-root", At("link"))).find("symbolic link"),
            std::string::npos);
}

TEST_F(FlagPaths, ALibraryPathMustBeARegularFileAndAFifoIsRefusedUnopened) {
  EXPECT_TRUE(CheckLibrary("--nvml", "libnvidia-ml.so.1"));  // the loader's to search
  EXPECT_TRUE(CheckLibrary("--nvml", ""));                   // none
  EXPECT_TRUE(CheckLibrary("--nvml", At("file")));
  EXPECT_TRUE(CheckLibrary("--nvml", At("file-link")));
  EXPECT_EQ(Refusal(CheckLibrary("--nvml", At("fifo"))),
            "--nvml " + At("fifo") + ": a FIFO, not a regular file (a library)");
  EXPECT_NE(Refusal(CheckLibrary("--nvml", At("fifo-link"))).find("a FIFO"), std::string::npos);
  EXPECT_NE(Refusal(CheckLibrary("--nvfm-library", "/dev/zero")).find("a character device"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckLibrary("--nvml", At("real"))).find("a directory"), std::string::npos);
  EXPECT_NE(Refusal(CheckLibrary("--nvml", At("missing.so"))).find("no such file"),
            std::string::npos);
}

TEST_F(FlagPaths, AProgramIsFoundAsExecFindsItAndIsAnExecutableFile) {
  EXPECT_TRUE(CheckProgram("--mps-control", At("script")));
  EXPECT_TRUE(CheckProgram("--nvidia-smi", "sh"));  // through PATH
  EXPECT_NE(Refusal(CheckProgram("--mps-control", At("missing"))).find("no such file"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckProgram("--mps-control", "tessera-no-such-program"))
                .find("--mps-control tessera-no-such-program: not found in PATH"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckProgram("--nvidia-smi", At("file"))).find("not executable"),
            std::string::npos);
  // access(X_OK) holds for a directory; exec does not.
  EXPECT_NE(Refusal(CheckProgram("--mps-control", At("real"))).find("a directory"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckProgram("--mps-control", "")).find("empty"), std::string::npos);
}

}  // namespace
}  // namespace tessera::serve
