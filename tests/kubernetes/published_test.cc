// Published ports' objects, built from values: the Pod's ports and readiness probe, the Service
// of each type selecting that Pod alone, the ingress policies that let the operator's source in
// on the published ports only (never another tenancy's namespace), the operator's flags, and the
// Service read back with every field checked.
#include "backends/kubernetes/published.h"

#include <gtest/gtest.h>

namespace tessera::k8s {
namespace {

PodRequest PodWithPorts() {
  PodRequest request;
  request.tenancy = "team-a";
  request.name = "tessera-c-0123456789abcdef";
  request.image = "registry.example/app:1";
  request.gpus = 0;
  request.ports = {{8080, "http", "tcp"}, {5353, "", "udp"}};
  request.ready = HttpReadiness{"/healthz", 8080};
  return request;
}

Publication SamplePublication(ServiceType type) {
  Publication p;
  p.tenancy = "team-a";
  p.name = "tessera-c-0123456789abcdef";
  p.labels = {{"tessera.dev/instance", "test"}, {"tessera.dev/container-id", "c-0123456789abcdef"}};
  p.ports = {{8080, "http", "tcp"}, {5353, "", "udp"}};
  p.type = type;
  auto ingress = ParseIngressSources(
      {"203.0.113.0/24,2001:db8::/32", "kubernetes.io/metadata.name=ingress-nginx"});
  EXPECT_TRUE(ingress.ok());
  p.ingress = *ingress;
  return p;
}

TEST(PublishedPorts, ThePodDeclaresItsPortsAndReadinessProbe) {
  auto pod = BuildPod(PodWithPorts(), {});
  ASSERT_TRUE(pod.ok()) << pod.error().message;
  const Json& container = (*pod)["spec"]["containers"][0];
  EXPECT_EQ(container["ports"],
            (Json::array({{{"containerPort", 8080}, {"protocol", "TCP"}, {"name", "http"}},
                          {{"containerPort", 5353}, {"protocol", "UDP"}}})));
  EXPECT_EQ(container["readinessProbe"]["httpGet"], (Json{{"path", "/healthz"}, {"port", 8080}}));
  EXPECT_EQ(container["readinessProbe"]["periodSeconds"], 5);
  EXPECT_EQ(container["readinessProbe"]["failureThreshold"], 3);
  // Without ports or probe, the container has neither.
  PodRequest plain = PodWithPorts();
  plain.ports.clear();
  plain.ready.reset();
  auto bare = BuildPod(plain, {});
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE((*bare)["spec"]["containers"][0].contains("ports"));
  EXPECT_FALSE((*bare)["spec"]["containers"][0].contains("readinessProbe"));
}

TEST(PublishedPorts, PortsAndProbesAPodCannotHaveAreRefused) {
  auto refused = [](auto change, const std::string& says) {
    PodRequest request = PodWithPorts();
    change(request);
    auto pod = BuildPod(request, {});
    ASSERT_FALSE(pod.ok()) << says;
    EXPECT_EQ(pod.error().category, ErrorCategory::kInvalidArgument);
    EXPECT_NE(pod.error().message.find(says), std::string::npos) << pod.error().message;
    EXPECT_LT(pod.error().message.size(), 240u);
  };
  refused([](PodRequest& r) { r.ports[0].port = 70000; }, "want 1..65535");
  refused([](PodRequest& r) { r.ports[0].protocol = "sctp"; }, "want tcp or udp");
  refused([](PodRequest& r) { r.ports.push_back({8080, "", "tcp"}); }, "given twice");
  refused([](PodRequest& r) { r.ports[1].name = "http"; }, "given twice");
  refused([](PodRequest& r) { r.ports[0].name = "8080"; }, "with a letter");
  refused([](PodRequest& r) { r.ports[0].name = std::string(5000, 'a'); }, "name");
  refused([](PodRequest& r) { r.ready->port = 5353; }, "not one of the container's TCP ports");
  refused([](PodRequest& r) { r.ready->path = "healthz"; }, "absolute printable path");
  refused([](PodRequest& r) { r.ready->path = "/a\nb"; }, "absolute printable path");
  refused([](PodRequest& r) { r.ready->path = "/" + std::string(300, 'a'); }, "256 bytes");
}

TEST(PublishedPorts, TheServiceSelectsThatPodAloneWithTheOperatorsType) {
  for (auto type : {ServiceType::kClusterIP, ServiceType::kNodePort, ServiceType::kLoadBalancer}) {
    auto service = BuildService(SamplePublication(type));
    ASSERT_TRUE(service.ok()) << service.error().message;
    EXPECT_EQ((*service)["kind"], "Service");
    EXPECT_EQ((*service)["metadata"]["name"], "tessera-c-0123456789abcdef");
    EXPECT_EQ((*service)["metadata"]["namespace"], "tenant-team-a");
    EXPECT_EQ((*service)["metadata"]["labels"]["tessera.dev/container-id"], "c-0123456789abcdef");
    EXPECT_EQ((*service)["metadata"]["labels"][kTenancyLabel], "team-a");
    EXPECT_EQ((*service)["spec"]["type"], ServiceTypeName(type));
    EXPECT_EQ((*service)["spec"]["selector"],
              (Json{{"tessera.dev/instance", "test"},
                    {"tessera.dev/container-id", "c-0123456789abcdef"}}));
    EXPECT_EQ(
        (*service)["spec"]["ports"],
        (Json::array(
            {{{"name", "http"}, {"protocol", "TCP"}, {"port", 8080}, {"targetPort", 8080}},
             {{"name", "udp-5353"}, {"protocol", "UDP"}, {"port", 5353}, {"targetPort", 5353}}})));
    // NodePort and LoadBalancer keep the client's address for the ingress policy.
    EXPECT_EQ((*service)["spec"].value("externalTrafficPolicy", ""),
              type == ServiceType::kClusterIP ? "" : "Local");
  }
  auto colliding = SamplePublication(ServiceType::kClusterIP);
  colliding.ports[0].name = "udp-5353";
  EXPECT_FALSE(BuildService(colliding).ok());
}

TEST(PublishedPorts, PoliciesLetTheSourceInOnThePublishedPortsOnly) {
  const Publication p = SamplePublication(ServiceType::kLoadBalancer);
  Json policy = BuildPublishedNetworkPolicy(p);
  EXPECT_EQ(policy["metadata"]["name"], "published-tessera-c-0123456789abcdef");
  EXPECT_EQ(policy["metadata"]["namespace"], "tenant-team-a");
  EXPECT_EQ(policy["spec"]["podSelector"]["matchLabels"], p.labels);
  EXPECT_EQ(policy["spec"]["policyTypes"], Json::array({"Ingress"}));
  ASSERT_EQ(policy["spec"]["ingress"].size(), 1u);
  const Json& rule = policy["spec"]["ingress"][0];
  EXPECT_EQ(rule["ports"], (Json::array({{{"protocol", "TCP"}, {"port", 8080}},
                                         {{"protocol", "UDP"}, {"port", 5353}}})));
  ASSERT_EQ(rule["from"].size(), 3u);
  EXPECT_EQ(rule["from"][0]["ipBlock"]["cidr"], "203.0.113.0/24");
  EXPECT_EQ(rule["from"][1]["ipBlock"]["cidr"], "2001:db8::/32");
  // The namespace selector never matches a tenancy's namespace.
  const Json& selector = rule["from"][2]["namespaceSelector"];
  EXPECT_EQ(selector["matchLabels"], (Json{{"kubernetes.io/metadata.name", "ingress-nginx"}}));
  EXPECT_EQ(selector["matchExpressions"],
            (Json::array({{{"key", kTenancyLabel}, {"operator", "DoesNotExist"}}})));

  Json cilium = BuildPublishedCiliumNetworkPolicy(p);
  EXPECT_EQ(cilium["kind"], "CiliumNetworkPolicy");
  EXPECT_EQ(cilium["spec"]["endpointSelector"]["matchLabels"],
            (Json{{"k8s:tessera.dev/instance", "test"},
                  {"k8s:tessera.dev/container-id", "c-0123456789abcdef"}}));
  ASSERT_EQ(cilium["spec"]["ingress"].size(), 2u);
  const Json cilium_ports =
      Json::array({{{"ports", Json::array({{{"port", "8080"}, {"protocol", "TCP"}},
                                           {{"port", "5353"}, {"protocol", "UDP"}}})}}});
  EXPECT_EQ(cilium["spec"]["ingress"][0]["fromCIDR"],
            Json::array({"203.0.113.0/24", "2001:db8::/32"}));
  EXPECT_EQ(cilium["spec"]["ingress"][0]["toPorts"], cilium_ports);
  const Json& endpoints = cilium["spec"]["ingress"][1]["fromEndpoints"][0];
  EXPECT_EQ(
      endpoints["matchLabels"],
      (Json{{"k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name", "ingress-nginx"}}));
  EXPECT_EQ(endpoints["matchExpressions"][0]["key"],
            "k8s:io.cilium.k8s.namespace.labels.tessera.dev/tenancy");
  EXPECT_EQ(cilium["spec"]["ingress"][1]["toPorts"], cilium_ports);
  EXPECT_FALSE(cilium["spec"].contains("egress"));
}

TEST(PublishedPorts, TheOperatorsFlagsAreChecked) {
  auto sources =
      ParseIngressSources({"10.0.0.0/8", "kubernetes.io/metadata.name=ingress-nginx,team=edge"});
  ASSERT_TRUE(sources.ok()) << sources.error().message;
  EXPECT_EQ(sources->cidrs, std::vector<std::string>{"10.0.0.0/8"});
  ASSERT_EQ(sources->namespaces.size(), 1u);
  EXPECT_EQ(sources->namespaces[0].at("team"), "edge");
  EXPECT_TRUE(ParseIngressSources({})->empty());
  for (const std::string& bad : std::vector<std::string>{
           "10.0.0.0/33", "10.0.0.0", "example.com/8", "a=b,c", "=x", "Bad_Prefix.example/x=y",
           "k=" + std::string(64, 'v'), std::string(10000, '1')}) {
    auto refused = ParseIngressSources({bad});
    ASSERT_FALSE(refused.ok()) << bad.substr(0, 40);
    EXPECT_LT(refused.error().message.size(), 300u);
  }
  EXPECT_EQ(*ParseServiceType("NodePort"), ServiceType::kNodePort);
  EXPECT_FALSE(ParseServiceType("ExternalName").ok());
}

Json ApiService(const std::string& type) {
  auto service = BuildService(SamplePublication(ServiceType::kClusterIP));
  Json out = *service;
  out["spec"]["type"] = type;
  out["spec"]["clusterIP"] = "10.96.0.12";
  if (type != "ClusterIP") {
    out["spec"]["ports"][0]["nodePort"] = 30080;
    out["spec"]["ports"][1]["nodePort"] = 30053;
  }
  return out;
}

TEST(PublishedPorts, WhereEachTypeIsReached) {
  auto cluster = ServiceAddressesOf(ApiService("ClusterIP"), "192.0.2.7");
  ASSERT_TRUE(cluster.ok()) << cluster.error().message;
  ASSERT_EQ(cluster->size(), 2u);
  EXPECT_EQ((*cluster)[0].host, "10.96.0.12");
  EXPECT_EQ((*cluster)[0].host_port, 8080);
  EXPECT_EQ((*cluster)[1].protocol, "udp");
  EXPECT_EQ((*cluster)[1].host_port, 5353);
  auto node = ServiceAddressesOf(ApiService("NodePort"), "192.0.2.7");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)[0].host, "192.0.2.7");
  EXPECT_EQ((*node)[0].host_port, 30080);
  // Not scheduled yet: no node address.
  EXPECT_EQ((*ServiceAddressesOf(ApiService("NodePort"), ""))[0].host_port, 0);
  Json lb = ApiService("LoadBalancer");
  auto pending = ServiceAddressesOf(lb, "192.0.2.7");
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ((*pending)[0].host, "");
  EXPECT_EQ((*pending)[0].host_port, 0);
  lb["status"] = {{"loadBalancer", {{"ingress", Json::array({{{"ip", "198.51.100.4"}}})}}}};
  EXPECT_EQ((*ServiceAddressesOf(lb, ""))[0].host, "198.51.100.4");
  EXPECT_EQ((*ServiceAddressesOf(lb, ""))[0].host_port, 8080);
  lb["status"]["loadBalancer"]["ingress"][0] = {{"hostname", "a1.elb.example.com"}};
  EXPECT_EQ((*ServiceAddressesOf(lb, ""))[1].host, "a1.elb.example.com");
}

TEST(PublishedPorts, HostileServiceAnswersAreRefused) {
  auto refused = [](const Json& service, const std::string& field) {
    auto read = ServiceAddressesOf(service, "192.0.2.7");
    ASSERT_FALSE(read.ok()) << field;
    EXPECT_NE(read.error().message.find(field), std::string::npos) << read.error().message;
    EXPECT_LT(read.error().message.size(), 200u);
  };
  Json bad = ApiService("NodePort");
  bad["spec"]["ports"][0]["nodePort"] = "30080";
  refused(bad, "spec.ports[0].nodePort");
  bad = ApiService("NodePort");
  bad["spec"]["ports"][1]["port"] = 1 << 20;
  refused(bad, "spec.ports[1].port");
  bad = ApiService("ClusterIP");
  bad["spec"]["clusterIP"] = std::string(100000, '1');
  refused(bad, "spec.clusterIP");
  bad = ApiService("ClusterIP");
  bad["spec"]["clusterIP"] = "not-an-ip";
  refused(bad, "spec.clusterIP");
  bad = ApiService("ClusterIP");
  bad["spec"]["type"] = Json::array();
  refused(bad, "spec.type");
  bad = ApiService("ClusterIP");
  bad["spec"]["ports"] = Json::array();
  for (int i = 0; i < 1000; ++i)
    bad["spec"]["ports"].push_back({{"port", 1 + i}});
  refused(bad, "spec.ports");
  bad = ApiService("ClusterIP");
  bad["spec"]["ports"][0]["name"] = std::string(1 << 16, 'n');
  refused(bad, "spec.ports[0].name");
  bad = ApiService("LoadBalancer");
  bad["status"] = {
      {"loadBalancer", {{"ingress", Json::array({{{"hostname", std::string(5000, 'h')}}})}}}};
  refused(bad, "hostname");
  bad["status"]["loadBalancer"]["ingress"][0] = {{"ip", "999.1.1.1"}};
  refused(bad, "ingress[0].ip");
  bad["status"]["loadBalancer"]["ingress"] = "198.51.100.4";
  refused(bad, "status.loadBalancer.ingress");
  EXPECT_FALSE(ServiceAddressesOf(Json::array(), "").ok());

  Json pod = {{"status", {{"hostIP", std::string(100, '9')}}}};
  EXPECT_FALSE(PodExposureOf(pod).ok());
  pod = {{"status", {{"conditions", Json::array({{{"type", "Ready"}, {"status", 1}}})}}}};
  EXPECT_FALSE(PodExposureOf(pod).ok());
  pod = {{"status", {{"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
  EXPECT_TRUE(PodExposureOf(pod)->ready);
}

}  // namespace
}  // namespace tessera::k8s
