// Published ports on a cluster (tessera-serve --backend kubernetes): a container that asks for
// ports gets a Service in its tenancy's namespace selecting its Pod alone, of the type the
// operator chose (--publish-service-type), and, when the operator named where published ports may
// be reached from (--publish-ingress-from), a NetworkPolicy (and a CiliumNetworkPolicy with
// --k8s-cilium) that lets that source in on those ports only. Without a source nothing outside
// the tenancy's namespace reaches them (its tenant-isolation policy). Builders are pure; the
// readers check every field the API server sends back.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backends/kubernetes/objects.h"
#include "common/error.h"
#include "kubernetes/client.h"

namespace tessera::k8s {

enum class ServiceType { kClusterIP, kNodePort, kLoadBalancer };
// "ClusterIP", "NodePort" or "LoadBalancer".
Result<ServiceType> ParseServiceType(std::string_view name);
const char* ServiceTypeName(ServiceType type);

// Where published ports may be reached from, beyond the container's own tenancy: address blocks
// (ipBlock / fromCIDR) and namespaces chosen by labels (every label of one selector must match).
// Namespaces of tenancies (labelled tessera.dev/tenancy) never match a selector.
struct IngressSources {
  std::vector<std::string> cidrs;
  std::vector<std::map<std::string, std::string>> namespaces;
  bool empty() const { return cidrs.empty() && namespaces.empty(); }
};
// Each value: CIDRs ("10.0.0.0/8", comma-separated for several) or one namespace label selector
// ("kubernetes.io/metadata.name=ingress-nginx", comma-separated labels that must all match).
// InvalidArgument naming the value.
Result<IngressSources> ParseIngressSources(const std::vector<std::string>& values);

// Whether `ports` and `ready` fit a Pod: ports 1..65535, tcp or udp, unique per protocol, names
// IANA service names (at most 15 lower-case letters, digits and '-', a letter among them) unique
// in the Pod, the probe's path an absolute printable path of at most 256 bytes and its port a TCP
// port of `ports`.
Status CheckContainerPorts(const std::vector<ContainerPort>& ports,
                           const std::optional<HttpReadiness>& ready);
// The container's `ports` and its readinessProbe (httpGet; checked before).
void AddPortsAndProbe(Json& container, const std::vector<ContainerPort>& ports,
                      const std::optional<HttpReadiness>& ready);

// One container's publication.
struct Publication {
  std::string tenancy;
  std::string name;  // the Pod's name, and its Service's
  Json labels;       // the Pod's identifying labels (instance, container ID): on every object,
                     // and the selector of that Pod alone
  std::vector<ContainerPort> ports;
  ServiceType type = ServiceType::kClusterIP;
  IngressSources ingress;
};
// The Service: one port per container port (port = targetPort = the container port; named as
// the container port, else "<protocol>-<port>"). NodePort and LoadBalancer keep the client's
// address (externalTrafficPolicy Local), so the ingress source's CIDRs mean what they say.
Result<Json> BuildService(const Publication& publication);
// "published-<Pod name>", both policies' name.
std::string PublishedPolicyName(const std::string& pod_name);
// Ingress to that Pod from the ingress source, on the published ports only. Build them only when
// the source is not empty.
Json BuildPublishedNetworkPolicy(const Publication& publication);
Json BuildPublishedCiliumNetworkPolicy(const Publication& publication);
// metadata.ownerReferences entry naming a Pod (the garbage collector deletes what it owns).
Json PodOwnerReference(const std::string& name, const std::string& uid);

// Services: not among the client's resources (only the backend uses them).
Resource ServicesResource();

// Where one port of the Service is reached: ClusterIP: clusterIP:port; NodePort: the Pod's node
// (status.hostIP):nodePort; LoadBalancer: the first ingress address (IP, else hostname):port.
// host "" and host_port 0 until known.
struct ServiceAddress {
  int container_port = 0;
  std::string protocol;  // tcp or udp
  std::string name;
  std::string host;
  int host_port = 0;
};
// From the Service as the API server answered it and the Pod's hostIP; InvalidArgument naming
// the field when one is ill-typed or out of bounds.
Result<std::vector<ServiceAddress>> ServiceAddressesOf(const Json& service,
                                                       const std::string& host_ip);
// What Exposed reads of the Pod: its node's address, its Ready condition, its container's ports.
struct PodExposure {
  std::string host_ip;
  bool ready = false;
  std::vector<ContainerPort> ports;
};
Result<PodExposure> PodExposureOf(const Json& pod);

}  // namespace tessera::k8s
