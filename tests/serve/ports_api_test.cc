// Published ports through the API of a real tessera-serve with the null backend (containers end
// as soon as they start): the record's ports with their host side from --publish-ports, a port
// another program holds skipped, a range too small, refused bodies and flags, many submissions.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "serve/container_wait.h"
#include "serve/null_serve_fixture.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

// A range of its own per test process, so parallel suites rarely meet (and skip each other's
// ports when they do); below Linux's ephemeral ports (32768-60999), which the tests' own client
// connections take at random.
int RangeBase() {
  return 10000 + static_cast<int>(::getpid() % 250) * 40;
}

// A listening TCP socket on 127.0.0.1:`port` (another program holding it); -1 when it could not.
int ListenOn(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, 1) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class ServePortsApi : public NullServeTest {
 protected:
  void StartWithRange(int low, int high) {
    StartServe({"--publish-ports", std::to_string(low) + "-" + std::to_string(high)});
  }

  // Submits and waits until the container has ended; returns its record.
  json RunToEnd(const json& body) {
    int status = 0;
    auto created = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 202) << created;
    return WaitForContainerState(*admin_, *serve_, created.value("id", ""), {"exited", "failed"},
                                 std::chrono::seconds(60));
  }

  static json WithPorts(json ports) {
    return {{"tenancy", "web"}, {"image", "busybox"}, {"ports", std::move(ports)}};
  }
};

TEST_F(ServePortsApi, RecordShowsItsPortsWithTheirHostSide) {
  const int low = RangeBase();
  StartWithRange(low, low + 39);
  json body = WithPorts({{{"containerPort", 8080}, {"name", "http"}},
                         {{"containerPort", 9000}, {"protocol", "udp"}}});
  body["ready"] = {{"httpGet", {{"path", "/healthz"}, {"port", 8080}}}};
  auto record = RunToEnd(body);
  ASSERT_EQ(record.value("state", ""), "exited") << record;
  ASSERT_TRUE(record["ports"].is_array()) << record;
  ASSERT_EQ(record["ports"].size(), 2u) << record;
  std::set<int> host_ports;
  for (const auto& port : record["ports"]) {
    const int host_port = port.value("host_port", 0);
    EXPECT_GE(host_port, low) << record;
    EXPECT_LE(host_port, low + 39) << record;
    EXPECT_EQ(port.value("host_address", ""), "127.0.0.1");
    EXPECT_EQ(port.value("address", ""), "127.0.0.1:" + std::to_string(host_port));
    host_ports.insert(host_port);
  }
  EXPECT_EQ(host_ports.size(), 2u) << "two ports of one container share a host port: " << record;
  EXPECT_EQ(record["ports"][0].value("container_port", 0), 8080);
  EXPECT_EQ(record["ports"][0].value("name", ""), "http");
  EXPECT_EQ(record["ports"][1].value("protocol", ""), "udp");
  // Readiness is reported for a spec with a probe; an ended container is not ready.
  ASSERT_TRUE(record.contains("ready")) << record;
  EXPECT_EQ(record["ready"], false);

  auto plain = RunToEnd({{"tenancy", "web"}, {"image", "busybox"}});
  EXPECT_EQ(plain["ports"], json::array()) << plain;
  EXPECT_FALSE(plain.contains("ready")) << plain;
}

TEST_F(ServePortsApi, PortsSurviveARestart) {
  const int low = RangeBase();
  StartWithRange(low, low + 39);
  auto record = RunToEnd(WithPorts({{{"containerPort", 8080}, {"name", "http"}}}));
  const std::string id = record.value("id", "");
  ASSERT_FALSE(id.empty());
  serve_->Kill(SIGKILL);
  std::string log;
  ASSERT_TRUE(serve_->Start(&log)) << log;
  admin_ = serve_->Connect(serve_->admin_token());
  int status = 0;
  auto again = CallJson(*admin_, "GET", "/v1/containers/" + id, "", &status);
  ASSERT_EQ(status, 200) << again;
  EXPECT_EQ(again["ports"], record["ports"]);
}

TEST_F(ServePortsApi, SkipsAPortAnotherProgramHolds) {
  const int low = RangeBase();
  const int held = ListenOn(low);
  ASSERT_GE(held, 0) << "port " << low << " is taken already";
  StartWithRange(low, low + 39);
  auto record = RunToEnd(WithPorts({{{"containerPort", 80}}}));
  ::close(held);
  ASSERT_EQ(record.value("state", ""), "exited") << record;
  const int host_port = record["ports"][0].value("host_port", 0);
  EXPECT_NE(host_port, low) << record;
  EXPECT_GT(host_port, low) << record;
}

TEST_F(ServePortsApi, FailsAContainerWhoseRangeIsTooSmall) {
  const int low = RangeBase();
  StartWithRange(low, low);
  auto record = RunToEnd(WithPorts({{{"containerPort", 80}}, {{"containerPort", 81}}}));
  EXPECT_EQ(record.value("state", ""), "failed") << record;
  EXPECT_NE(record.value("reason", "").find("no free host port"), std::string::npos) << record;
  // Nothing stays held by the failed container: one port fits.
  auto next = RunToEnd(WithPorts({{{"containerPort", 80}}}));
  EXPECT_EQ(next.value("state", ""), "exited") << next;
  EXPECT_EQ(next["ports"][0].value("host_port", 0), low) << next;
}

TEST_F(ServePortsApi, ATenancyHoldsNoMoreThanItsShareOfTheRange) {
  const int low = RangeBase();
  StartServe({"--publish-ports", std::to_string(low) + "-" + std::to_string(low + 9),
              "--publish-ports-per-tenancy", "2"});
  auto over = RunToEnd(
      WithPorts({{{"containerPort", 80}}, {{"containerPort", 81}}, {{"containerPort", 82}}}));
  EXPECT_EQ(over.value("state", ""), "failed") << over;
  EXPECT_NE(over.value("reason", "").find("holds 0 of its 2 published host ports"),
            std::string::npos)
      << over;
  auto within = RunToEnd(WithPorts({{{"containerPort", 80}}, {{"containerPort", 81}}}));
  EXPECT_EQ(within.value("state", ""), "exited") << within;
}

TEST_F(ServePortsApi, RefusesHostileBodiesNamingTheField) {
  StartServe();
  const std::vector<std::pair<json, std::string>> cases = {
      {WithPorts({{{"containerPort", 0}}}), "ports[0].containerPort"},
      {WithPorts({{{"containerPort", 65536}}}), "ports[0].containerPort"},
      {WithPorts({{{"containerPort", 80}}, {{"containerPort", 80}}}), "given twice"},
      {WithPorts({{{"containerPort", 80}, {"name", "Not_A_Label"}}}), "ports[0].name"},
      {json{{"tenancy", "web"},
            {"image", "busybox"},
            {"network", "none"},
            {"ports", {{{"containerPort", 80}}}}},
       "ports: need the tenancy network"},
      {json{{"tenancy", "web"},
            {"image", "busybox"},
            {"ports", {{{"containerPort", 53}, {"protocol", "udp"}}}},
            {"ready", {{"httpGet", {{"port", 53}}}}}},
       "ready.httpGet.port"},
      {json{{"tenancy", "web"},
            {"image", "busybox"},
            {"ports", {{{"containerPort", 80}}}},
            {"ready", {{"httpGet", {{"port", 80}, {"path", "/x\r\nHost: y"}}}}}},
       "ready.httpGet.path"},
  };
  for (const auto& [body, field] : cases) {
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 400) << body;
    EXPECT_NE(answer.dump().find(field), std::string::npos) << answer << " for " << body;
  }
}

TEST_F(ServePortsApi, ManyConcurrentSubmissionsAllGetPortsInRange) {
  const int low = RangeBase();
  StartWithRange(low, low + 39);
  std::vector<std::string> ids(50);
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t)
    threads.emplace_back([this, t, &ids] {
      auto connection = serve_->Connect(serve_->admin_token());
      for (int i = t * 5; i < t * 5 + 5; ++i) {
        int status = 0;
        auto created = CallJson(*connection, "POST", "/v1/containers",
                                WithPorts({{{"containerPort", 8000 + i}}}).dump(), &status);
        if (status == 202) ids[static_cast<size_t>(i)] = created.value("id", "");
      }
    });
  for (auto& thread : threads)
    thread.join();
  for (const auto& id : ids) {
    ASSERT_FALSE(id.empty());
    auto record = WaitForContainerState(*admin_, *serve_, id, {"exited", "failed"},
                                        std::chrono::seconds(120));
    EXPECT_EQ(record.value("state", ""), "exited") << record;
    const int host_port = record["ports"][0].value("host_port", 0);
    EXPECT_GE(host_port, low) << record;
    EXPECT_LE(host_port, low + 39) << record;
  }
}

TEST(ServePortsFlags, RefusesABadRangeOrAddress) {
  const std::string root = MaterializeHost("hgx-h100-dgx");
  for (const auto& extra :
       std::vector<std::vector<std::string>>{{"--publish-ports", "80-90"},
                                             {"--publish-ports", "32767-30000"},
                                             {"--publish-ports", "30000-70000"},
                                             {"--publish-address", "localhost"}}) {
    TempDir dir;
    ServeProcess serve(dir.path(), NullBackendFlags(root, dir.path(), extra));
    std::string log;
    EXPECT_FALSE(serve.Start(&log)) << extra[0] << " " << extra[1];
    EXPECT_NE(log.find(extra[0]), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace tessera::testing
