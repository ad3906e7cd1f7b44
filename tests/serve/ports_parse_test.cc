// POST /v1/containers `ports` and `ready` (pure): what is accepted, and every hostile shape
// refused with the field named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "api/api.h"
#include "api/ports_json.h"

namespace tessera::api {
namespace {

using nlohmann::json;

json Body(json ports, json ready = nullptr) {
  json body = {{"tenancy", "team-a"}, {"image", "busybox"}, {"ports", std::move(ports)}};
  if (!ready.is_null()) body["ready"] = std::move(ready);
  return body;
}

// The error message of a refused body ("" when it was accepted).
std::string Refusal(const json& body) {
  auto spec = ParseContainerSpec(body.dump());
  if (spec) return "";
  EXPECT_EQ(spec.error().category, ErrorCategory::kInvalidArgument);
  return spec.error().message;
}

TEST(PortsParse, AcceptsPortsAndAProbe) {
  auto spec = ParseContainerSpec(Body({{{"containerPort", 8080}, {"name", "http"}},
                                       {{"containerPort", 53}, {"protocol", "udp"}},
                                       {{"containerPort", 53}}},
                                      {{"httpGet", {{"path", "/healthz?full=1"}, {"port", 8080}}}})
                                     .dump());
  ASSERT_TRUE(spec) << spec.error().message;
  ASSERT_EQ(spec->ports.size(), 3u);
  EXPECT_EQ(spec->ports[0], (fleet::PortRequest{8080, "http", "tcp"}));
  EXPECT_EQ(spec->ports[1], (fleet::PortRequest{53, "", "udp"}));
  EXPECT_EQ(spec->ports[2], (fleet::PortRequest{53, "", "tcp"}));
  ASSERT_TRUE(spec->ready);
  EXPECT_EQ(*spec->ready, (fleet::ReadinessProbe{"/healthz?full=1", 8080}));
}

TEST(PortsParse, PathDefaultsToRoot) {
  auto spec =
      ParseContainerSpec(Body({{{"containerPort", 80}}}, {{"httpGet", {{"port", 80}}}}).dump());
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->ready->path, "/");
}

TEST(PortsParse, RefusesSeventeenPorts) {
  json ports = json::array();
  for (int i = 0; i < 17; ++i)
    ports.push_back({{"containerPort", 8000 + i}});
  EXPECT_NE(Refusal(Body(ports)).find("ports: more than 16"), std::string::npos);
  ports.erase(ports.end() - 1);
  EXPECT_EQ(Refusal(Body(ports)), "");
}

TEST(PortsParse, RefusesPortsOutOfRange) {
  for (const json& port : {json(0), json(65536), json(-1), json(80.5), json("80"), json(nullptr)})
    EXPECT_NE(Refusal(Body({{{"containerPort", port}}})).find("ports[0].containerPort"),
              std::string::npos)
        << port;
  EXPECT_NE(Refusal(Body({{{"name", "web"}}})).find("ports[0].containerPort: required"),
            std::string::npos);
}

TEST(PortsParse, RefusesTheSamePortTwice) {
  EXPECT_NE(Refusal(Body({{{"containerPort", 80}}, {{"containerPort", 80}, {"protocol", "tcp"}}}))
                .find("ports[1]: containerPort 80/tcp is given twice"),
            std::string::npos);
  EXPECT_NE(Refusal(Body({{{"containerPort", 80}, {"name", "web"}},
                          {{"containerPort", 81}, {"name", "web"}}}))
                .find("ports[1].name"),
            std::string::npos);
}

TEST(PortsParse, RefusesBadNames) {
  for (const char* name :
       {"", "Web", "web_1", "-web", "web-", "a--b", "1234", "sixteen-chars-xx", "web\n", "wéb"})
    EXPECT_NE(Refusal(Body({{{"containerPort", 80}, {"name", name}}})).find("ports[0].name"),
              std::string::npos)
        << name;
  EXPECT_EQ(Refusal(Body({{{"containerPort", 80}, {"name", "fifteen-chars-x"}}})), "");
}

TEST(PortsParse, RefusesUnknownFieldsAndProtocols) {
  EXPECT_NE(Refusal(Body({{{"containerPort", 80}, {"hostPort", 80}}}))
                .find("ports[0].hostPort: unknown field"),
            std::string::npos);
  EXPECT_NE(
      Refusal(Body({{{"containerPort", 80}, {"protocol", "sctp"}}})).find("ports[0].protocol"),
      std::string::npos);
  EXPECT_NE(Refusal(Body({{{"containerPort", 80}, {"protocol", "TCP"}}})).find("ports[0].protocol"),
            std::string::npos);
  EXPECT_NE(Refusal(Body(json::object())).find("ports: must be an array"), std::string::npos);
  EXPECT_NE(Refusal(Body({80})).find("ports[0]: must be an object"), std::string::npos);
}

TEST(PortsParse, RefusesPortsWithoutANetwork) {
  json body = Body({{{"containerPort", 80}}});
  body["network"] = "none";
  EXPECT_NE(Refusal(body).find("ports: need the tenancy network"), std::string::npos);
  body.erase("ports");
  EXPECT_EQ(Refusal(body), "");
}

TEST(PortsParse, ReadinessPortIsOneOfItsTcpPorts) {
  EXPECT_NE(
      Refusal(Body({{{"containerPort", 53}, {"protocol", "udp"}}}, {{"httpGet", {{"port", 53}}}}))
          .find("ready.httpGet.port: 53 is none of the container's tcp ports"),
      std::string::npos);
  EXPECT_NE(Refusal(Body({{{"containerPort", 80}}}, {{"httpGet", {{"port", 81}}}}))
                .find("ready.httpGet.port: 81"),
            std::string::npos);
  json no_ports = {
      {"tenancy", "team-a"}, {"image", "busybox"}, {"ready", {{"httpGet", {{"port", 80}}}}}};
  EXPECT_NE(Refusal(no_ports).find("ready.httpGet.port"), std::string::npos);
}

TEST(PortsParse, RefusesHostileProbePaths) {
  const std::string long_path = "/" + std::string(256, 'a');
  for (const std::string& path :
       {std::string("/a\r\nHost: evil"), std::string("/a b"), std::string("healthz"),
        std::string(""), long_path, std::string("/\x7f"), std::string("/\xc3\xa9")})
    EXPECT_NE(
        Refusal(Body({{{"containerPort", 80}}}, {{"httpGet", {{"path", path}, {"port", 80}}}}))
            .find("ready.httpGet.path"),
        std::string::npos)
        << path.size();
  EXPECT_EQ(Refusal(Body({{{"containerPort", 80}}},
                         {{"httpGet", {{"path", long_path.substr(0, 256)}, {"port", 80}}}})),
            "");
}

TEST(PortsParse, RefusesOtherProbeShapes) {
  EXPECT_NE(Refusal(Body({{{"containerPort", 80}}}, {{"tcpSocket", {{"port", 80}}}}))
                .find("ready.tcpSocket: unknown field"),
            std::string::npos);
  EXPECT_NE(
      Refusal(Body({{{"containerPort", 80}}}, json::object())).find("ready.httpGet: required"),
      std::string::npos);
  EXPECT_NE(Refusal(Body({{{"containerPort", 80}}}, {{"httpGet", {{"path", "/"}}}}))
                .find("ready.httpGet.port: required"),
            std::string::npos);
  EXPECT_NE(Refusal(Body({{{"containerPort", 80}}}, {{"httpGet", {{"port", 80}, {"host", "x"}}}}))
                .find("ready.httpGet.host: unknown field"),
            std::string::npos);
}

TEST(PublishedPortsJson, HostSideOnceKnown) {
  fleet::ContainerRecord record;
  record.spec.ports = {{8080, "http", "tcp"}, {53, "", "udp"}};
  json before = PublishedPortsToJson(record);
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0]["host_port"], 0);
  EXPECT_EQ(before[0]["host_address"], "");
  EXPECT_FALSE(before[0].contains("address"));
  record.published = {{8080, "tcp", "http", "127.0.0.1", 30001}, {53, "udp", "", "::1", 30002}};
  json after = PublishedPortsToJson(record);
  EXPECT_EQ(after[0]["address"], "127.0.0.1:30001");
  EXPECT_EQ(after[0]["name"], "http");
  EXPECT_EQ(after[1]["address"], "[::1]:30002");
  EXPECT_EQ(after[1]["protocol"], "udp");
}

}  // namespace
}  // namespace tessera::api
