// Published ports through the Kubernetes backend against the scripted API server: a container with
// ports gets a Service selecting its Pod and ingress policies (NetworkPolicy, CiliumNetworkPolicy)
// for the operator's source, owned by the Pod and deleted with the container; Exposed reads where
// each port is reached (ClusterIP, NodePort, LoadBalancer before and after it has an address) and
// the Pod's Ready condition, also after a restart of the backend; hostile Service answers are
// refused.
#include <gtest/gtest.h>

#include "backends/kubernetes/kubernetes_backend.h"
#include "backends/kubernetes/published.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/plain_config.h"

namespace tessera::backends {
namespace {

using k8s::Json;
using k8s::Resource;
using testing::FakeApiServer;

constexpr const char* kNs = "tenant-team-a";
constexpr const char* kPod = "tessera-c1";
constexpr const char* kPolicy = "published-tessera-c1";

struct PublishFixture {
  PublishFixture() : admin(testing::PlainConfig(server)) {}
  std::unique_ptr<ContainerBackend> Backend(k8s::ServiceType type, bool with_ingress = true) {
    KubernetesBackendOptions options;
    options.client = testing::PlainConfig(server);
    options.instance = "test";
    options.cilium = true;
    options.tenancy_controller = false;
    options.publish_service_type = type;
    if (with_ingress) {
      options.publish_ingress = *k8s::ParseIngressSources(
          {"203.0.113.0/24", "kubernetes.io/metadata.name=ingress-nginx"});
    }
    return CreateKubernetesBackend(options);
  }
  static StartRequest Request() {
    StartRequest request;
    request.id = "C1";
    request.tenancy = "team-a";
    request.image = "registry.example/web:1";
    request.ports = {{8080, "tcp", "http", "", 0}, {5353, "udp", "", "", 0}};
    request.ready = fleet::ReadinessProbe{"/healthz", 8080};
    return request;
  }
  bool Exists(const Resource& resource, const std::string& name) {
    auto got = admin.Get(resource, kNs, name);
    EXPECT_TRUE(got.ok() || got.error().category == ErrorCategory::kNotFound);
    return got.ok();
  }
  // What the API server and the kubelet fill in: the Service's cluster IP and node ports, the
  // Pod's node and Ready condition.
  void Allocate(bool node_ports) {
    Json ports = (*admin.Get(k8s::ServicesResource(), kNs, kPod))["spec"]["ports"];
    if (node_ports) {
      ports[0]["nodePort"] = 30080;
      ports[1]["nodePort"] = 30053;
    }
    ASSERT_TRUE(admin
                    .Patch(k8s::ServicesResource(), kNs, kPod,
                           {{"spec", {{"clusterIP", "10.96.0.12"}, {"ports", ports}}}})
                    .ok());
    Json status = {{"status",
                    {{"phase", "Running"},
                     {"hostIP", "192.0.2.7"},
                     {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
    ASSERT_TRUE(
        admin.Patch(Resource::Pods(), kNs, kPod, status, k8s::PatchType::kMerge, "status").ok());
  }
  FakeApiServer server;
  k8s::Client admin;
};

TEST(KubernetesPublishedPorts, AServiceAndIngressPoliciesGoWithTheContainer) {
  PublishFixture f;
  auto backend = f.Backend(k8s::ServiceType::kNodePort);
  ASSERT_TRUE(backend->Start(PublishFixture::Request(), nullptr).ok());
  auto pod = f.admin.Get(Resource::Pods(), kNs, kPod);
  ASSERT_TRUE(pod.ok());
  const Json& container = (*pod)["spec"]["containers"][0];
  EXPECT_EQ(container["ports"][0],
            (Json{{"containerPort", 8080}, {"protocol", "TCP"}, {"name", "http"}}));
  EXPECT_EQ(container["ports"][1], (Json{{"containerPort", 5353}, {"protocol", "UDP"}}));
  EXPECT_EQ(container["readinessProbe"]["httpGet"], (Json{{"path", "/healthz"}, {"port", 8080}}));
  const std::string uid = (*pod)["metadata"]["uid"];
  const Json identity = {{"tessera.dev/instance", "test"}, {"tessera.dev/container-id", "c1"}};

  auto service = f.admin.Get(k8s::ServicesResource(), kNs, kPod);
  ASSERT_TRUE(service.ok());
  EXPECT_EQ((*service)["spec"]["type"], "NodePort");
  EXPECT_EQ((*service)["spec"]["selector"], identity);
  EXPECT_EQ((*service)["spec"]["externalTrafficPolicy"], "Local");
  EXPECT_EQ((*service)["spec"]["ports"][0]["targetPort"], 8080);
  EXPECT_EQ((*service)["spec"]["ports"][1]["protocol"], "UDP");
  EXPECT_EQ((*service)["metadata"]["labels"]["tessera.dev/container-id"], "c1");
  // Owned by the Pod: the garbage collector deletes it with the Pod.
  EXPECT_EQ((*service)["metadata"]["ownerReferences"][0],
            (Json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", kPod}, {"uid", uid}}));

  auto policy = f.admin.Get(Resource::NetworkPolicies(), kNs, kPolicy);
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ((*policy)["spec"]["podSelector"]["matchLabels"], identity);
  const Json& rule = (*policy)["spec"]["ingress"][0];
  EXPECT_EQ(rule["from"][0]["ipBlock"]["cidr"], "203.0.113.0/24");
  EXPECT_EQ(rule["from"][1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "ingress-nginx");
  EXPECT_EQ(rule["ports"], (Json::array({{{"protocol", "TCP"}, {"port", 8080}},
                                         {{"protocol", "UDP"}, {"port", 5353}}})));
  EXPECT_EQ((*policy)["metadata"]["ownerReferences"][0]["uid"], uid);
  auto cilium = f.admin.Get(Resource::CiliumNetworkPolicies(), kNs, kPolicy);
  ASSERT_TRUE(cilium.ok());
  EXPECT_EQ((*cilium)["spec"]["ingress"][0]["fromCIDR"], Json::array({"203.0.113.0/24"}));
  EXPECT_EQ((*cilium)["metadata"]["ownerReferences"][0]["uid"], uid);
  // The tenancy's own isolation stays as it is.
  EXPECT_TRUE(f.Exists(Resource::NetworkPolicies(), "tenant-isolation"));

  ASSERT_TRUE(backend->Remove("C1").ok());
  EXPECT_FALSE(f.Exists(Resource::Pods(), kPod));
  EXPECT_FALSE(f.Exists(k8s::ServicesResource(), kPod));
  EXPECT_FALSE(f.Exists(Resource::NetworkPolicies(), kPolicy));
  EXPECT_FALSE(f.Exists(Resource::CiliumNetworkPolicies(), kPolicy));
  EXPECT_TRUE(f.Exists(Resource::NetworkPolicies(), "tenant-isolation"));
}

TEST(KubernetesPublishedPorts, WithoutAnIngressSourceOnlyTheServiceIsMade) {
  PublishFixture f;
  auto backend = f.Backend(k8s::ServiceType::kClusterIP, /*with_ingress=*/false);
  StartRequest plain = PublishFixture::Request();
  plain.id = "C2";
  plain.ports.clear();
  plain.ready.reset();
  ASSERT_TRUE(backend->Start(plain, nullptr).ok());
  EXPECT_FALSE(f.Exists(k8s::ServicesResource(), "tessera-c2"));  // no ports, no Service
  auto exposed = backend->Exposed("C2");
  ASSERT_TRUE(exposed.ok()) << exposed.error().message;
  EXPECT_TRUE(exposed->ports.empty());
  ASSERT_TRUE(backend->Start(PublishFixture::Request(), nullptr).ok());
  EXPECT_TRUE(f.Exists(k8s::ServicesResource(), kPod));
  EXPECT_FALSE(f.Exists(Resource::NetworkPolicies(), kPolicy));
  EXPECT_FALSE(f.Exists(Resource::CiliumNetworkPolicies(), kPolicy));
  EXPECT_FALSE(backend->Exposed("C9").ok());
}

TEST(KubernetesPublishedPorts, ExposedSaysWhereEachServiceTypeIsReached) {
  for (auto type : {k8s::ServiceType::kClusterIP, k8s::ServiceType::kNodePort,
                    k8s::ServiceType::kLoadBalancer}) {
    SCOPED_TRACE(k8s::ServiceTypeName(type));
    PublishFixture f;
    auto backend = f.Backend(type);
    ASSERT_TRUE(backend->Start(PublishFixture::Request(), nullptr).ok());
    // Before anything is allocated: the ports, no addresses, not ready.
    auto before = backend->Exposed("C1");
    ASSERT_TRUE(before.ok()) << before.error().message;
    ASSERT_EQ(before->ports.size(), 2u);
    EXPECT_EQ(before->ports[0], (fleet::PublishedPort{8080, "tcp", "http", "", 0}));
    EXPECT_EQ(before->ready, std::optional<bool>(false));
    f.Allocate(type != k8s::ServiceType::kClusterIP);
    auto after = backend->Exposed("C1");
    ASSERT_TRUE(after.ok()) << after.error().message;
    EXPECT_EQ(after->ready, std::optional<bool>(true));
    ASSERT_EQ(after->ports.size(), 2u);
    if (type == k8s::ServiceType::kClusterIP) {
      EXPECT_EQ(after->ports[0], (fleet::PublishedPort{8080, "tcp", "http", "10.96.0.12", 8080}));
      EXPECT_EQ(after->ports[1], (fleet::PublishedPort{5353, "udp", "", "10.96.0.12", 5353}));
    } else if (type == k8s::ServiceType::kNodePort) {
      EXPECT_EQ(after->ports[0], (fleet::PublishedPort{8080, "tcp", "http", "192.0.2.7", 30080}));
      EXPECT_EQ(after->ports[1], (fleet::PublishedPort{5353, "udp", "", "192.0.2.7", 30053}));
    } else {
      // No load balancer address yet: unknown, not the node's.
      EXPECT_EQ(after->ports[0], (fleet::PublishedPort{8080, "tcp", "http", "", 0}));
      Json assigned = {
          {"status", {{"loadBalancer", {{"ingress", Json::array({{{"ip", "198.51.100.4"}}})}}}}}};
      ASSERT_TRUE(
          f.admin
              .Patch(k8s::ServicesResource(), kNs, kPod, assigned, k8s::PatchType::kMerge, "status")
              .ok());
      auto assigned_now = backend->Exposed("C1");
      ASSERT_TRUE(assigned_now.ok()) << assigned_now.error().message;
      EXPECT_EQ(assigned_now->ports[0],
                (fleet::PublishedPort{8080, "tcp", "http", "198.51.100.4", 8080}));
      EXPECT_EQ(assigned_now->ports[1],
                (fleet::PublishedPort{5353, "udp", "", "198.51.100.4", 5353}));
    }
  }
}

TEST(KubernetesPublishedPorts, ARestartedBackendFindsAndCleansThem) {
  PublishFixture f;
  {
    auto first = f.Backend(k8s::ServiceType::kNodePort);
    ASSERT_TRUE(first->Start(PublishFixture::Request(), nullptr).ok());
    StartRequest second = PublishFixture::Request();
    second.id = "C2";
    ASSERT_TRUE(first->Start(second, nullptr).ok());
  }
  f.Allocate(true);
  auto restarted = f.Backend(k8s::ServiceType::kNodePort);
  auto exposed = restarted->Exposed("C1");
  ASSERT_TRUE(exposed.ok()) << exposed.error().message;
  EXPECT_EQ(exposed->ports[0], (fleet::PublishedPort{8080, "tcp", "http", "192.0.2.7", 30080}));
  EXPECT_EQ(exposed->ready, std::optional<bool>(true));
  ASSERT_TRUE(restarted->Remove("C1").ok());
  EXPECT_FALSE(f.Exists(k8s::ServicesResource(), kPod));
  EXPECT_FALSE(f.Exists(Resource::NetworkPolicies(), kPolicy));
  EXPECT_FALSE(f.Exists(Resource::CiliumNetworkPolicies(), kPolicy));
  // A container whose Pod went away first (no garbage collector here): its Remove still finds
  // what it published by its labels.
  ASSERT_TRUE(f.admin.Delete(Resource::Pods(), kNs, "tessera-c2").ok());
  EXPECT_TRUE(f.Exists(k8s::ServicesResource(), "tessera-c2"));
  auto removed = restarted->Remove("C2");
  ASSERT_FALSE(removed.ok());
  EXPECT_EQ(removed.error().category, ErrorCategory::kNotFound);
  EXPECT_FALSE(f.Exists(k8s::ServicesResource(), "tessera-c2"));
  EXPECT_FALSE(f.Exists(Resource::NetworkPolicies(), "published-tessera-c2"));
  EXPECT_FALSE(f.Exists(Resource::CiliumNetworkPolicies(), "published-tessera-c2"));
}

TEST(KubernetesPublishedPorts, HostileServiceAnswersAreRefused) {
  PublishFixture f;
  auto backend = f.Backend(k8s::ServiceType::kNodePort);
  ASSERT_TRUE(backend->Start(PublishFixture::Request(), nullptr).ok());
  f.Allocate(true);
  ASSERT_TRUE(backend->Exposed("C1").ok());
  const std::string path = std::string("/services/") + kPod + "($|\\?)";
  // Ill-typed: a node port as a string, an address that is no address.
  Json service = *f.admin.Get(k8s::ServicesResource(), kNs, kPod);
  service["spec"]["ports"][0]["nodePort"] = "30080";
  f.server.Script({{{"method", "GET"}, {"path", path}, {"status", 200}, {"body", service}}});
  auto refused = backend->Exposed("C1");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("spec.ports[0].nodePort"), std::string::npos)
      << refused.error().message;
  service = *f.admin.Get(k8s::ServicesResource(), kNs, kPod);
  service["spec"]["clusterIP"] = std::string(50000, '1');
  f.server.Script({{{"method", "GET"}, {"path", path}, {"status", 200}, {"body", service}}});
  refused = backend->Exposed("C1");
  ASSERT_FALSE(refused.ok());
  EXPECT_LT(refused.error().message.size(), 300u);  // the value is not echoed
  // Huge: 4 MiB of Service, cut off at the bound rather than read whole; deeply nested.
  f.server.Script({{{"method", "GET"}, {"path", path}, {"huge_bytes", 4 << 20}}});
  EXPECT_FALSE(backend->Exposed("C1").ok());
  f.server.Script({{{"method", "GET"}, {"path", path}, {"deep", 100000}}});
  EXPECT_FALSE(backend->Exposed("C1").ok());
  // The rules are spent: the live Service reads again.
  auto again = backend->Exposed("C1");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->ports[0].host_port, 30080);
}

}  // namespace
}  // namespace tessera::backends
