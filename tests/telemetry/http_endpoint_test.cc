// The node agent's endpoint over real sockets: the bearer token from a file (refused without it,
// with a wrong one, re-read when the file changes; /healthz open), and connections that send
// nothing or a byte at a time, which cost one slot each until their deadline and delay no
// scrape. Through tessera-lease-sync's flags: tests/kubernetes/node_telemetry_test.cc.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "client/client.h"
#include "common/file_descriptor.h"
#include "support/fixture_host.h"
#include "support/raw_tcp.h"
#include "support/test_pki.h"
#include "support/wait.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

using std::chrono::milliseconds;
using testing::ClosedByPeerWithin;
using testing::ConnectLoopback;
using testing::RawExchange;
using testing::StatusOf;

constexpr char kToken[] = "node-metrics-token-0123456789abcdef";

std::string Get(const std::string& path, const std::string& token = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: node\r\n" +
         (token.empty() ? "" : "Authorization: Bearer " + token + "\r\n") + "\r\n";
}

class NodeEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = dir_.path() + "/token";
    std::ofstream(token_file_) << kToken << "\n";
  }

  void Start(EndpointOptions options) {
    options.host = "127.0.0.1";
    auto started = StartMetricsEndpoint(std::move(options), [this](std::string_view path) {
      ++handled_;
      if (path == "/healthz") return EndpointResponse{200, "text/plain", "ok\n"};
      return EndpointResponse{200, "text/plain; version=0.0.4", "node_up 1\n"};
    });
    ASSERT_TRUE(started) << started.error().message;
    endpoint_ = std::move(*started);
  }

  int Status(const std::string& request) {
    return StatusOf(RawExchange(endpoint_->port(), request, milliseconds(10000)));
  }

  testing::TempDir dir_;
  std::string token_file_;
  std::atomic<int> handled_{0};
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

TEST_F(NodeEndpointTest, RefusesWithoutOrWithAWrongTokenBeforeAnyWork) {
  EndpointOptions options;
  options.token_file = token_file_;
  Start(options);
  const std::string refused = RawExchange(endpoint_->port(), Get("/metrics"), milliseconds(10000));
  EXPECT_EQ(StatusOf(refused), 401) << refused;
  EXPECT_NE(refused.find("WWW-Authenticate: Bearer"), std::string::npos) << refused;
  EXPECT_EQ(Status(Get("/metrics", "wrong-token")), 401);
  EXPECT_EQ(Status(Get("/v1/telemetry", std::string(kToken) + "x")), 401);
  EXPECT_EQ(
      Status("GET /metrics HTTP/1.1\r\nAuthorization: Basic " + std::string(kToken) + "\r\n\r\n"),
      401);
  EXPECT_EQ(handled_, 0);  // the handler never ran for a refused caller
  const std::string answer =
      RawExchange(endpoint_->port(), Get("/metrics?x=1", kToken), milliseconds(10000));
  EXPECT_EQ(StatusOf(answer), 200) << answer;
  EXPECT_EQ(testing::BodyOf(answer), "node_up 1\n");
  EXPECT_EQ(Status(Get("/healthz")), 200);  // open
  EXPECT_EQ(handled_, 2);
}

TEST_F(NodeEndpointTest, SpeaksHttpsWithItsCertificateAndTakesARotationWithoutARestart) {
  testing::MakeTestPki(dir_.path());
  EndpointOptions options;
  options.token_file = token_file_;
  options.tls = {dir_.path() + "/server.crt", dir_.path() + "/server.key", "", "--metrics-tls-"};
  Start(options);
  const std::string server = "https://127.0.0.1:" + std::to_string(endpoint_->port());
  auto endpoint = client::ParseServer(server);
  ASSERT_TRUE(endpoint) << endpoint.error().message;
  client::Connection trusted(*endpoint, kToken, {dir_.path() + "/ca.crt", "", ""});
  auto scraped = trusted.Call("GET", "/metrics");
  ASSERT_TRUE(scraped) << scraped.error().message;
  EXPECT_EQ(scraped->status, 200);
  EXPECT_EQ(scraped->body, "node_up 1\n");
  client::Connection anonymous(*endpoint, "", {dir_.path() + "/ca.crt", "", ""});
  auto refused = anonymous.Call("GET", "/metrics");
  ASSERT_TRUE(refused) << refused.error().message;
  EXPECT_EQ(refused->status, 401);
  // A client that trusts another CA gets no answer at all.
  testing::TempDir other;
  testing::MakeTestPki(other.path());
  client::Connection stranger(*endpoint, kToken, {other.path() + "/ca.crt", "", ""});
  EXPECT_FALSE(stranger.Call("GET", "/metrics"));
  // Plain HTTP to the TLS port: no HTTP answer, and the handler never runs for it.
  const int handled_before = handled_;
  const std::string plain =
      RawExchange(endpoint_->port(), Get("/metrics", kToken), milliseconds(10000));
  EXPECT_EQ(plain.rfind("HTTP/1.1 200", 0), std::string::npos) << plain;
  EXPECT_EQ(handled_, handled_before);
  // Rotation: the other CA's server files renamed into place, as a Secret's update does. New
  // connections (after the once-a-second look) get the new certificate: the stranger is served
  // and the old CA's client is not.
  for (const char* name : {"server.crt", "server.key"}) {
    std::filesystem::copy_file(other.path() + "/" + name, dir_.path() + "/" + name + ".new");
    std::filesystem::rename(dir_.path() + "/" + name + ".new", dir_.path() + "/" + name);
  }
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        client::Connection rotated(*endpoint, kToken, {other.path() + "/ca.crt", "", ""});
        auto answer = rotated.Call("GET", "/metrics");
        return answer && answer->status == 200;
      },
      std::chrono::seconds(30)));
  client::Connection before(*endpoint, kToken, {dir_.path() + "/ca.crt", "", ""});
  EXPECT_FALSE(before.Call("GET", "/metrics"));
}

TEST_F(NodeEndpointTest, TokenFileIsReadAgainWhenItChanges) {
  EndpointOptions options;
  options.token_file = token_file_;
  Start(options);
  EXPECT_EQ(Status(Get("/metrics", kToken)), 200);
  // As kubelet updates a Secret volume: a new file renamed over the old name.
  std::ofstream(dir_.path() + "/token.new") << "rotated-token-abcdef0123456789\n";
  std::filesystem::rename(dir_.path() + "/token.new", token_file_);
  EXPECT_EQ(Status(Get("/metrics", kToken)), 401);
  EXPECT_EQ(Status(Get("/metrics", "rotated-token-abcdef0123456789")), 200);
  // Emptied or gone: every token is refused until the file holds one again.
  std::ofstream(token_file_, std::ios::trunc).flush();
  EXPECT_EQ(Status(Get("/metrics", "rotated-token-abcdef0123456789")), 401);
  std::filesystem::remove(token_file_);
  EXPECT_EQ(Status(Get("/metrics", "rotated-token-abcdef0123456789")), 401);
  EXPECT_EQ(Status(Get("/healthz")), 200);
}

TEST_F(NodeEndpointTest, StartRefusesAMissingOrEmptyTokenFileAndAnonymousOffLoopback) {
  EndpointOptions options;
  options.token_file = dir_.path() + "/absent";
  auto started = StartMetricsEndpoint(options, [](std::string_view) { return EndpointResponse{}; });
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error().category, ErrorCategory::kInvalidArgument);
  std::ofstream(dir_.path() + "/blank") << " \n";
  options.token_file = dir_.path() + "/blank";
  EXPECT_FALSE(StartMetricsEndpoint(options, [](std::string_view) { return EndpointResponse{}; }));
  EndpointOptions anonymous;
  anonymous.host = "0.0.0.0";
  started = StartMetricsEndpoint(anonymous, [](std::string_view) { return EndpointResponse{}; });
  ASSERT_FALSE(started);
  EXPECT_NE(started.error().message.find("not a loopback address"), std::string::npos);
  anonymous.anonymous_off_loopback = true;
  EXPECT_TRUE(StartMetricsEndpoint(anonymous, [](std::string_view) { return EndpointResponse{}; }));
}

TEST_F(NodeEndpointTest, HundredIdleConnectionsAndASlowlorisDelayNoScrape) {
  EndpointOptions options;
  options.token_file = token_file_;
  options.timeout = milliseconds(2000);
  Start(options);
  std::deque<FileDescriptor> idle;
  for (int i = 0; i < 100; ++i) {
    idle.emplace_back(ConnectLoopback(endpoint_->port()));
    ASSERT_GE(idle.back().get(), 0);
  }
  // A byte of a request header every 100 ms, a header that never ends: cut at the deadline.
  FileDescriptor slow(ConnectLoopback(endpoint_->port()));
  ASSERT_GE(slow.get(), 0);
  std::atomic<bool> stop{false};
  std::thread slowloris([&] {
    const std::string header = "GET /metrics HTTP/1.1\r\nX-Slow: " + std::string(4096, 'x');
    for (size_t i = 0; i < header.size() && !stop; ++i) {
      if (::send(slow.get(), &header[i], 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
  });
  const auto begin = std::chrono::steady_clock::now();
  const std::string answer =
      RawExchange(endpoint_->port(), Get("/metrics", kToken), milliseconds(10000));
  const auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_EQ(StatusOf(answer), 200) << answer;
  EXPECT_LE(took, std::chrono::seconds(1));
  // The slow client is cut at its deadline, not served.
  EXPECT_TRUE(ClosedByPeerWithin(slow.get(), milliseconds(15000)));
  stop = true;
  slowloris.join();
  EXPECT_TRUE(ClosedByPeerWithin(idle.front().get(), milliseconds(15000)));
}

TEST_F(NodeEndpointTest, AtTheCapIdleConnectionsAreClosedAtTheirDeadlineAndTheScrapeFollows) {
  EndpointOptions options;
  options.max_connections = 4;
  options.timeout = milliseconds(500);
  Start(options);
  std::deque<FileDescriptor> idle;
  for (int i = 0; i < 4; ++i)
    idle.emplace_back(ConnectLoopback(endpoint_->port()));
  // Queued behind the four until their deadline frees the slots; then answered. Accepting is
  // paused meanwhile: no answer comes before the idle ones' deadline (a lower bound, which no
  // load can break).
  bool closed = false;
  const auto begin = std::chrono::steady_clock::now();
  const std::string answer =
      RawExchange(endpoint_->port(), Get("/metrics"), milliseconds(15000), &closed);
  EXPECT_GE(std::chrono::steady_clock::now() - begin, milliseconds(300));
  EXPECT_EQ(StatusOf(answer), 200) << answer;
  EXPECT_TRUE(closed);
  for (auto& fd : idle)
    EXPECT_TRUE(ClosedByPeerWithin(fd.get(), milliseconds(15000)));
}

TEST_F(NodeEndpointTest, OnlyGetAndHeadAndBoundedHeaders) {
  Start(EndpointOptions{});
  const std::string post =
      RawExchange(endpoint_->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                  milliseconds(10000));
  EXPECT_EQ(StatusOf(post), 405) << post;
  const std::string head =
      RawExchange(endpoint_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n", milliseconds(10000));
  EXPECT_EQ(StatusOf(head), 200) << head;
  EXPECT_EQ(testing::BodyOf(head), "");
  // A header past 8 KiB: closed without an answer.
  bool closed = false;
  const std::string big = RawExchange(
      endpoint_->port(), "GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n",
      milliseconds(10000), &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(StatusOf(big), 0) << big.substr(0, 200);
  EXPECT_EQ(Status(Get("/metrics")), 200);
}

}  // namespace
}  // namespace tessera::telemetry
