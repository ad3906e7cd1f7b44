// Reading back podman's k8s-file logs: what GET /v1/containers/{id}/logs returns for a container
// the local backend started.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tessera::backends
