// Published ports with real podman containers: a busybox httpd reached from the host through its
// published address once ready; another tenancy cannot reach its tenancy-network address while
// its own tenancy can; its port is free again once it ended; a kill -9 and restart of the service
// keeps a running container's port; 50 concurrent submissions get 50 distinct ports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "client/client.h"
#include "serve/cli_process.h"
#include "serve/podman_serve_fixture.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

constexpr const char* kBody = "hello from a published port";

class ServePortsE2e : public PodmanServeTest {
 protected:
  ServePortsE2e() : PodmanServeTest("ports") {}

  // A range of its own per test process (parallel suites skip each other's ports if they meet),
  // below the ephemeral ports the tests' own connections take.
  void StartWithRange(int size) {
    low_ = 20000 + static_cast<int>(::getpid() % 200) * 50;
    StartServe({"--publish-ports", std::to_string(low_) + "-" + std::to_string(low_ + size - 1)});
  }

  // An httpd serving kBody on 8080, published, with a readiness probe.
  json Httpd(const std::string& tenancy) const {
    const std::string script = std::string("mkdir -p /www && echo '") + kBody +
                               "' > /www/index.html && exec httpd -f -p 8080 -h /www";
    return {{"tenancy", tenancy},
            {"image", image_},
            {"command", {"sh", "-c", script}},
            {"ports", {{{"containerPort", 8080}, {"name", "http"}}}},
            {"ready", {{"httpGet", {{"path", "/index.html"}, {"port", 8080}}}}}};
  }

  // Waits (generously) until GET /v1/containers/{id} says ready: true.
  json WaitReady(const std::string& id) {
    json record;
    EXPECT_TRUE(WaitUntil(
        [&] {
          record = Get("/v1/containers/" + id);
          return record.value("ready", false);
        },
        std::chrono::seconds(180)))
        << record << "\n"
        << serve_->log();
    return record;
  }

  // GET http://ADDRESS:PORT/index.html from the host; the body ("" when it failed).
  static std::string Fetch(const json& port) {
    client::Connection connection(client::Endpoint{
        port.value("host_address", ""), static_cast<uint16_t>(port.value("host_port", 0))});
    auto response = connection.Call("GET", "/index.html");
    return response && response->status == 200 ? response->body : "";
  }

  // The container's address on its tenancy network, from podman.
  static std::string TenancyAddress(const std::string& id) {
    auto inspected = Podman::Get().Run({"inspect", "--format",
                                        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                                        "tessera-" + id});
    std::string address = inspected.output;
    while (!address.empty() && (address.back() == '\n' || address.back() == ' '))
      address.pop_back();
    return inspected.status == 0 ? address : "";
  }

  // Runs `wget` of http://ADDRESS:8080/index.html in a container of `tenancy`; its exit code.
  // (This busybox's `wget -T` crashes: the service's duration limit bounds it instead.)
  int WgetFrom(const std::string& tenancy, const std::string& address) {
    const std::string id = SubmitAccepted(
        {{"tenancy", tenancy},
         {"image", image_},
         {"maxDurationSeconds", 60},
         {"command", {"wget", "-q", "-O", "-", "http://" + address + ":8080/index.html"}}});
    auto ended = WaitFor(id, {"exited", "failed"});
    return ended.value("exit_code", json(-1)).is_number() ? ended["exit_code"].get<int>() : -1;
  }

  int low_ = 0;
};

TEST_F(ServePortsE2e, ReachedThroughItsPublishedAddressAndFencedFromOtherTenancies) {
  StartWithRange(20);
  const std::string id = SubmitAccepted(Httpd("ports-a"));
  auto record = WaitReady(id);
  ASSERT_EQ(record.value("state", ""), "running") << record;
  const json port = record["ports"][0];
  EXPECT_EQ(port.value("host_address", ""), "127.0.0.1");
  EXPECT_EQ(port.value("host_port", 0), low_) << record;
  EXPECT_EQ(Fetch(port), std::string(kBody) + "\n");

  // The tenancy network: its own tenancy reaches the container's address, another does not.
  const std::string address = TenancyAddress(id);
  ASSERT_FALSE(address.empty());
  EXPECT_EQ(WgetFrom("ports-a", address), 0);
  EXPECT_NE(WgetFrom("ports-b", address), 0);

  // Once it ended its port is free, and the next container gets it.
  int status = 0;
  CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
  EXPECT_EQ(status, 202);
  WaitFor(id, {"exited", "failed"});
  EXPECT_EQ(Fetch(port), "") << "the port still answers after its container ended";
  const std::string next = SubmitAccepted(Httpd("ports-a"));
  auto next_record = WaitReady(next);
  EXPECT_EQ(next_record["ports"][0].value("host_port", 0), low_) << next_record;
  EXPECT_EQ(Fetch(next_record["ports"][0]), std::string(kBody) + "\n");
}

TEST_F(ServePortsE2e, KeepsItsPortAcrossAKillAndRestartOfTheService) {
  StartWithRange(20);
  const std::string id = SubmitAccepted(Httpd("ports-a"));
  auto record = WaitReady(id);
  const json port = record["ports"][0];
  ASSERT_EQ(Fetch(port), std::string(kBody) + "\n");

  serve_->Kill(SIGKILL);
  Restart();
  auto after = WaitReady(id);
  EXPECT_EQ(after.value("state", ""), "running") << after;
  EXPECT_EQ(after["ports"][0], port) << after;
  EXPECT_EQ(Fetch(port), std::string(kBody) + "\n");

  const std::string next = SubmitAccepted(Httpd("ports-a"));
  auto next_record = WaitReady(next);
  EXPECT_NE(next_record["ports"][0].value("host_port", 0), port.value("host_port", 0))
      << next_record;
  EXPECT_EQ(Fetch(next_record["ports"][0]), std::string(kBody) + "\n");
}

// The client: `tessera run -d -p` publishes, `ps -o wide` shows the address, which answers;
// attached, `tessera run -p` says where the port is while the container runs.
TEST_F(ServePortsE2e, TheClientPublishesAPortAndSaysWhereItIs) {
  StartWithRange(20);
  TempDir home;
  const std::string token = serve_->admin_token();
  const std::string script = std::string("mkdir -p /www && echo '") + kBody +
                             "' > /www/index.html && exec httpd -f -p 8080 -h /www";
  CliResult run =
      RunTessera(*serve_, token, home.path(),
                 {"run", "-d", "--tenancy", "ports-cli", "-p", "8080:http", "--ready-path",
                  "/index.html", "--ready-port", "8080", image_, "sh", "-c", script});
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string id = Trimmed(run.out);
  ASSERT_EQ(id.rfind("c-", 0), 0u) << run.out;
  auto record = WaitReady(id);
  const std::string address = "127.0.0.1:" + std::to_string(low_);
  CliResult ps = RunTessera(*serve_, token, home.path(), {"ps", "-o", "wide"});
  ASSERT_EQ(ps.status, 0) << ps.err;
  EXPECT_NE(ps.out.find(address), std::string::npos) << ps.out;
  EXPECT_EQ(Fetch(record["ports"][0]), std::string(kBody) + "\n");
  CliResult stop = RunTessera(*serve_, token, home.path(), {"stop", id});
  EXPECT_EQ(stop.status, 0) << stop.err;
  CliResult waited = RunTessera(*serve_, token, home.path(), {"wait", id});
  EXPECT_NE(waited.status, 0) << waited.out;  // stopped: SIGTERM's or SIGKILL's code

  // Attached: the address on stderr while it runs (its port is free again: the lowest). -p and
  // -e right before the image take one value each.
  CliResult attached =
      RunTessera(*serve_, token, home.path(),
                 {"run", "--tenancy", "ports-cli", "-e", "WORD=served", "-p", "8080", image_, "sh",
                  "-c", "httpd -p 8080 -h / && sleep 6 && echo $WORD"});
  EXPECT_EQ(attached.status, 0) << attached.err;
  EXPECT_EQ(attached.out, "served\n");
  EXPECT_NE(attached.err.find(" port 8080/tcp at " + address), std::string::npos) << attached.err;
}

// One tenancy cannot take the range from the others: past --publish-ports-per-tenancy its next
// container fails, naming the limit, while another tenancy's still gets its port.
TEST_F(ServePortsE2e, ATenancyCannotHoldMoreThanItsShareOfPorts) {
  low_ = 20000 + static_cast<int>(::getpid() % 200) * 50;
  StartServe({"--publish-ports", std::to_string(low_) + "-" + std::to_string(low_ + 19),
              "--publish-ports-per-tenancy", "2"});
  auto sleeper = [this](const std::string& tenancy, int ports) {
    json body = {{"tenancy", tenancy},
                 {"image", image_},
                 {"command", {"sleep", "120"}},
                 {"maxDurationSeconds", 150},
                 {"ports", json::array()}};
    for (int i = 0; i < ports; ++i)
      body["ports"].push_back({{"containerPort", 8000 + i}});
    return SubmitAccepted(body);
  };
  const std::string first = sleeper("ports-greedy", 2);
  EXPECT_EQ(WaitFor(first, {"running", "exited", "failed"}).value("state", ""), "running");
  const std::string refused = sleeper("ports-greedy", 1);
  auto record = WaitFor(refused, {"exited", "failed"});
  EXPECT_EQ(record.value("state", ""), "failed") << record;
  EXPECT_NE(record.value("reason", "").find("holds 2 of its 2 published host ports"),
            std::string::npos)
      << record;
  const std::string other = sleeper("ports-other", 1);
  EXPECT_EQ(WaitFor(other, {"running", "exited", "failed"}).value("state", ""), "running");
  for (const auto& id : {first, other}) {
    int status = 0;
    CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
    WaitFor(id, {"exited", "failed"});
  }
}

TEST_F(ServePortsE2e, FiftyConcurrentSubmissionsGetFiftyDistinctPorts) {
  StartWithRange(50);
  std::vector<std::string> ids(50);
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t)
    threads.emplace_back([this, t, &ids] {
      auto connection = serve_->Connect(serve_->admin_token());
      for (int i = t * 5; i < t * 5 + 5; ++i) {
        json body = {{"tenancy", "ports-many"},
                     {"image", image_},
                     {"command", {"sleep", "600"}},
                     {"ports", {{{"containerPort", 8080}}}}};
        int status = 0;
        auto created = CallJson(*connection, "POST", "/v1/containers", body.dump(), &status);
        if (status == 202) ids[static_cast<size_t>(i)] = created.value("id", "");
      }
    });
  for (auto& thread : threads)
    thread.join();
  // Ports are held from placement on: every record has its host port before it runs.
  std::set<int> ports;
  for (const auto& id : ids) {
    ASSERT_FALSE(id.empty());
    json record;
    EXPECT_TRUE(WaitUntil(
        [&] {
          record = Get("/v1/containers/" + id);
          return record["ports"][0].value("host_port", 0) > 0 ||
                 record.value("state", "") == "failed";
        },
        std::chrono::seconds(120)))
        << record;
    const int host_port = record["ports"][0].value("host_port", 0);
    EXPECT_GE(host_port, low_) << record;
    EXPECT_LT(host_port, low_ + 50) << record;
    ports.insert(host_port);
  }
  EXPECT_EQ(ports.size(), 50u);
  for (const auto& id : ids) {
    int status = 0;
    CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
  }
}

}  // namespace
}  // namespace tessera::testing
