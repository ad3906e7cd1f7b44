// The client's reading of an HTTP response from a server it has no reason to trust: whole and
// byte by byte, Content-Length and chunked, and bounded: an oversized header or body, garbage and
// a cut-off answer are errors that quote nothing the server sent.
#include "client/http_response.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::client {
namespace {

Result<Response> ReadAll(const std::string& bytes, size_t step, bool close_at_end = false) {
  ResponseReader reader;
  for (size_t at = 0; at < bytes.size() && !reader.done(); at += step) {
    if (auto fed = reader.Feed(std::string_view(bytes).substr(at, step)); !fed) return fed.error();
  }
  if (close_at_end && !reader.done()) {
    if (auto finished = reader.Finish(); !finished) return finished.error();
  }
  if (!reader.done()) return Unavailable("not done");
  return reader.Take();
}

TEST(ResponseReader, ReadsAContentLengthAnswerWholeAndByteByByte) {
  const std::string answer =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Tessera: yes\r\n"
      "Content-Length: 13\r\n\r\n{\"gpus\": [1]}";
  for (size_t step : {answer.size(), size_t{1}, size_t{7}}) {
    auto response = ReadAll(answer, step);
    ASSERT_TRUE(response.ok()) << step << ": " << response.error().message;
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->headers["x-tessera"], "yes");
    EXPECT_EQ(response->headers["content-type"], "application/json");
    EXPECT_EQ(response->body, "{\"gpus\": [1]}");
  }
}

TEST(ResponseReader, ReadsAChunkedAnswer) {
  const std::string answer =
      "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  auto response = ReadAll(answer, 3);
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(response->body, "hello world");
}

TEST(ResponseReader, ABodyWithoutALengthEndsWithTheConnection) {
  auto cut = ReadAll("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npartial", 4, true);
  ASSERT_TRUE(cut.ok()) << cut.error().message;
  EXPECT_EQ(cut->body, "partial");
  ResponseReader reader;
  ASSERT_TRUE(reader.Feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort").ok());
  EXPECT_FALSE(reader.Finish().ok());
  EXPECT_FALSE(reader.done());
}

// A server killed after the request went out: the connection ends with no answer, or half a
// header. Neither is a response (a parser left to itself would call it a 200).
TEST(ResponseReader, AConnectionClosedBeforeAHeaderIsNoAnswer) {
  ResponseReader nothing;
  EXPECT_FALSE(nothing.Finish().ok());
  EXPECT_FALSE(nothing.done());
  ResponseReader half;
  ASSERT_TRUE(half.Feed("HTTP/1.1 200 OK\r\nContent-Ty").ok());
  EXPECT_FALSE(half.Finish().ok());
  EXPECT_FALSE(half.done());
}

TEST(ResponseReader, SaysWhetherTheServerClosesTheConnection) {
  ResponseReader reader;
  ASSERT_TRUE(reader.Feed("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n").ok());
  ASSERT_TRUE(reader.done());
  EXPECT_TRUE(reader.closes());
  ResponseReader kept;
  ASSERT_TRUE(kept.Feed("HTTP/1.1 204 No Content\r\n\r\n").ok());
  ASSERT_TRUE(kept.done());
  EXPECT_FALSE(kept.closes());
}

TEST(ResponseReader, RefusesGarbageWithoutQuotingIt) {
  for (const std::string& garbage :
       {std::string("SSH-2.0-OpenSSH_9.2\r\n\r\n"), std::string("HTTP/1.1 abc OK\r\n\r\n"),
        std::string("HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n"),
        std::string("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
        std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")}) {
    auto response = ReadAll(garbage, garbage.size());
    ASSERT_FALSE(response.ok()) << garbage;
    EXPECT_EQ(response.error().message.find("OpenSSH"), std::string::npos);
    EXPECT_EQ(response.error().message.find("zz"), std::string::npos);
  }
}

TEST(ResponseReader, RefusesAHeaderOverItsBoundEvenWithoutALineEnd) {
  ResponseReader reader;
  std::string line = "HTTP/1.1 200 OK\r\nX-Long: " + std::string(kMaxResponseHeaderBytes, 'a');
  EXPECT_FALSE(reader.Feed(line).ok());
  ResponseReader endless;
  ASSERT_TRUE(endless.Feed("HTTP/1.1 200 OK\r\n").ok());
  Status status = Ok();
  for (int i = 0; i < 10'000 && status.ok(); ++i)
    status = endless.Feed("X-Many: " + std::string(100, 'b') + "\r\n");
  EXPECT_FALSE(status.ok());
}

TEST(ResponseReader, RefusesABodyOverItsBoundAsSoonAsItIsAnnounced) {
  ResponseReader reader;
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kMaxResponseBodyBytes + 1) +
      "\r\n\r\n";
  EXPECT_FALSE(reader.Feed(head).ok());
}

TEST(ResponseReader, LeavesBytesAfterTheResponseAlone) {
  ResponseReader reader;
  ASSERT_TRUE(
      reader.Feed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Oops\r\n\r\n").ok());
  ASSERT_TRUE(reader.done());
  auto response = reader.Take();
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "ok");
}

}  // namespace
}  // namespace tessera::client
