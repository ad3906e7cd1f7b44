// The one reader of files from outside the process: regular files within the caller's limit,
// and everything else refused at once, by name, before a byte is read.
#include "common/bounded_file.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "common/atomic_file.h"
#include "support/fixture_host.h"
#include "support/hostile_files.h"

namespace tessera {
namespace {

using testing::HostileFiles;
using testing::TempDir;

void Write(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

TEST(BoundedFile, ReadsARegularFileUpToItsLimitExactly) {
  TempDir dir;
  const std::string path = dir.path() + "/config.yaml";
  Write(path, std::string(1000, 'x'));
  auto text = ReadBoundedFile(path, 1000);
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_EQ(*text, std::string(1000, 'x'));
  Write(path, "");
  EXPECT_EQ(*ReadBoundedFile(path, 0), "");
}

TEST(BoundedFile, OneByteOverTheLimitIsRefusedNamingThePathAndTheLimit) {
  TempDir dir;
  const std::string path = dir.path() + "/table.json";
  Write(path, std::string(1001, 'x'));
  auto text = ReadBoundedFile(path, 1000);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_EQ(text.error().message, path + ": larger than 1000 bytes");
}

TEST(BoundedFile, AFileWhoseSizeSaysZeroIsStillReadOnlyUpToTheLimit) {
  // procfs files report size 0: the bound comes from reading one byte past the limit.
  auto whole = ReadBoundedFile("/proc/self/status", 1 << 20);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_NE(whole->find("VmRSS"), std::string::npos);
  auto cut = ReadBoundedFile("/proc/self/status", 16);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().message, "/proc/self/status: larger than 16 bytes");
}

TEST(BoundedFile, DevZeroItsSymlinkAFifoAndASparseFileAreRefusedAtOnceByName) {
  HostileFiles hostile(".json");
  for (const auto& file : hostile.all()) {
    auto text = ReadBoundedFile(file.path, kMaxConfigFileBytes);
    ASSERT_FALSE(text.ok()) << file.kind;
    EXPECT_EQ(text.error().category, ErrorCategory::kInvalidArgument) << file.kind;
    EXPECT_EQ(text.error().message.rfind(file.path + ": ", 0), 0u) << text.error().message;
    const char* want = file.kind == "FIFO" ? "a FIFO, not a regular file"
                       : file.kind == "2 GiB sparse file"
                           ? "larger than 1048576 bytes"
                           : "a character device, not a regular file";
    EXPECT_NE(text.error().message.find(want), std::string::npos) << text.error().message;
  }
}

TEST(BoundedFile, ADirectoryAndASocketAreNotFiles) {
  TempDir dir;
  auto text = ReadBoundedFile(dir.path(), 100);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().message, dir.path() + ": a directory, not a regular file");

  const std::string socket_path = dir.path() + "/s.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  text = ReadBoundedFile(socket_path, 100);
  ::close(fd);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().message, socket_path + ": a socket, not a regular file");
}

TEST(BoundedFile, AMissingFileIsNotFound) {
  TempDir dir;
  auto text = ReadBoundedFile(dir.path() + "/absent", 100);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().category, ErrorCategory::kNotFound);
  EXPECT_NE(text.error().message.find(dir.path() + "/absent"), std::string::npos);
}

TEST(BoundedFile, ReadWholeFileIsTheSameReaderWithItsGenerousLimit) {
  HostileFiles hostile;
  for (const auto& file : hostile.all()) {
    auto text = ReadWholeFile(file.path);
    ASSERT_FALSE(text.ok()) << file.kind;
    EXPECT_EQ(text.error().category, ErrorCategory::kInvalidArgument) << file.kind;
  }
  auto sparse = ReadWholeFile(hostile.all().back().path);
  ASSERT_FALSE(sparse.ok());
  EXPECT_NE(sparse.error().message.find("larger than 67108864 bytes"), std::string::npos);
}

}  // namespace
}  // namespace tessera
