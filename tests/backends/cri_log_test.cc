// Reading back podman's k8s-file logs: what GET /v1/containers/{id}/logs returns for a container
// the local backend started.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "backends/local/local.h"

namespace tessera::backends {
namespace {

TEST(CriLog, FullRecordsBecomeLinesWithoutTheirPrefix) {
  EXPECT_EQ(TextOfCriLog("2024-11-23T19:40:00.123456789+00:00 stdout F hello\n"
                         "2024-11-23T19:40:00.2+00:00 stderr F oops\n"),
            "hello\noops\n");
}

TEST(CriLog, PartialRecordsJoinTheNextOne) {
  EXPECT_EQ(TextOfCriLog("2024-11-23T19:40:00Z stdout P a very long li\n"
                         "2024-11-23T19:40:00Z stdout P ne split in \n"
                         "2024-11-23T19:40:00Z stdout F three\n"),
            "a very long line split in three\n");
}

TEST(CriLog, EmptyLinesAndSpacesInTheTextSurvive) {
  EXPECT_EQ(TextOfCriLog("2024-11-23T19:40:00Z stdout F\n"
                         "2024-11-23T19:40:00Z stdout F \n"
                         "2024-11-23T19:40:00Z stdout F  two  spaces \n"),
            "\n\n two  spaces \n");
}

TEST(CriLog, LinesInAnotherFormatAreKeptAsTheyAre) {
  EXPECT_EQ(TextOfCriLog("plain text\n2024-11-23T19:40:00Z stdin F x\nlast"),
            "plain text\n2024-11-23T19:40:00Z stdin F x\nlast");
  EXPECT_EQ(TextOfCriLog(""), "");
  // A final record without its newline (the log is still being written) still counts.
  EXPECT_EQ(TextOfCriLog("2024-11-23T19:40:00Z stdout F done"), "done\n");
}

// A k8s-file log on disk that the test writes as conmon would, read as a follower reads it.
class CriLogFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/tessera-cri-log-XXXXXX";
    int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = path;
  }
  void TearDown() override { std::remove(path_.c_str()); }

  void Append(const std::string& text) {
    std::ofstream out(path_, std::ios::app | std::ios::binary);
    out << text;
  }
  void Empty() { std::ofstream out(path_, std::ios::trunc); }
  LogPart From(uint64_t offset, size_t max_bytes = 1 << 20) {
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    auto part = ReadCriLogFrom(fd, offset, max_bytes);
    ::close(fd);
    EXPECT_TRUE(part) << part.error().message;
    return part ? *part : LogPart{};
  }
  static std::string Record(const std::string& text, const char* tag = "F") {
    return "2024-11-23T19:40:00.000000001+00:00 stdout " + std::string(tag) + " " + text + "\n";
  }

  std::string path_;
};

TEST_F(CriLogFile, AFollowerGetsEachRecordOnceAndInOrder) {
  Append(Record("one") + Record("two"));
  LogPart first = From(0);
  EXPECT_EQ(first.text, "one\ntwo\n");
  EXPECT_FALSE(first.cut);
  EXPECT_EQ(first.end, 2 * Record("one").size());
  Append(Record("three"));
  LogPart next = From(first.end);
  EXPECT_EQ(next.text, "three\n");
  EXPECT_FALSE(next.cut);
  LogPart nothing = From(next.end);
  EXPECT_EQ(nothing.text, "");
  EXPECT_EQ(nothing.end, next.end);
}

TEST_F(CriLogFile, ARecordStillBeingWrittenWaitsForItsNewline) {
  Append(Record("whole"));
  const std::string half = "2024-11-23T19:40:00Z stdout F hal";
  Append(half);
  LogPart part = From(0);
  EXPECT_EQ(part.text, "whole\n");
  EXPECT_EQ(part.end, Record("whole").size());
  Append("f\n");
  EXPECT_EQ(From(part.end).text, "half\n");
}

TEST_F(CriLogFile, ALogEmptiedAtItsCapIsReadFromItsStartAsCut) {
  Append(Record("old line one") + Record("old line two"));
  const uint64_t seen = From(0).end;
  Empty();  // conmon empties the file at the cap and writes on from its start
  Append(Record("new"));
  LogPart past_end = From(seen);
  EXPECT_TRUE(past_end.cut);
  EXPECT_EQ(past_end.text, "new\n");
  EXPECT_EQ(past_end.end, Record("new").size());
  // Written past the old offset again: the offset now falls inside a record.
  Append(Record("newer, and long enough to reach past the old offset"));
  LogPart inside = From(seen);
  EXPECT_TRUE(inside.cut);
  EXPECT_EQ(inside.text.substr(0, 4), "new\n");
}

TEST_F(CriLogFile, AFollowerFarBehindGetsTheLatestWholeRecordsOnly) {
  for (int i = 0; i < 100; ++i)
    Append(Record("line " + std::to_string(i)));
  LogPart part = From(0, 200);
  EXPECT_TRUE(part.cut);
  EXPECT_LE(part.text.size(), 200u);
  EXPECT_EQ(part.text.substr(part.text.size() - 8), "line 99\n");
  EXPECT_EQ(part.text.find("line 0\n"), std::string::npos);
  // Every line it gives is whole: it starts right after a newline of the file.
  EXPECT_EQ(part.text.substr(0, 5), "line ");
}

}  // namespace
}  // namespace tessera::backends
