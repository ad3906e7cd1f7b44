// A container's Service and ingress policies through the API server, and reading them back
// (publication.h).
#include "backends/kubernetes/publication.h"

#include <spdlog/spdlog.h>

#include "backends/kubernetes/controller.h"

namespace tessera::k8s {
namespace {

constexpr uint64_t kMaxServiceBytes = 256 << 10;  // one Service as the API server sends it

std::string NamespaceFor(const Publication& p) {
  return "tenant-" + p.tenancy;
}

Status Gone(const Status& deleted) {
  if (!deleted && deleted.error().category != ErrorCategory::kNotFound) return deleted.error();
  return Ok();
}

}  // namespace

Status CreatePublication(Client& client, const Publication& p, bool cilium) {
  const std::string ns = NamespaceFor(p);
  auto service = BuildService(p);
  if (!service) return service.error();
  auto created = client.Create(ServicesResource(), ns, *service);
  if (!created && created.error().category != ErrorCategory::kAlreadyExists) return created.error();
  if (p.ingress.empty()) return Ok();
  if (auto r =
          EnsureObject(client, Resource::NetworkPolicies(), ns, BuildPublishedNetworkPolicy(p));
      !r)
    return r.error();
  if (cilium) {
    if (auto r = EnsureObject(client, Resource::CiliumNetworkPolicies(), ns,
                              BuildPublishedCiliumNetworkPolicy(p));
        !r)
      return r.error();
  }
  return Ok();
}

void AdoptPublication(Client& client, const Publication& p, bool cilium,
                      const std::string& pod_uid) {
  if (pod_uid.empty()) return;
  const Json owned = {
      {"metadata", {{"ownerReferences", Json::array({PodOwnerReference(p.name, pod_uid)})}}}};
  const std::string ns = NamespaceFor(p);
  std::vector<std::pair<Resource, std::string>> objects = {{ServicesResource(), p.name}};
  if (!p.ingress.empty()) {
    objects.emplace_back(Resource::NetworkPolicies(), PublishedPolicyName(p.name));
    if (cilium)
      objects.emplace_back(Resource::CiliumNetworkPolicies(), PublishedPolicyName(p.name));
  }
  for (const auto& [resource, name] : objects) {
    auto patched = client.Patch(resource, ns, name, owned, PatchType::kMerge);
    if (!patched)
      spdlog::warn("{} {}/{}: owner not set: {}", resource.plural, ns, name,
                   patched.error().message);
  }
}

Status DeletePublication(Client& client, const std::string& ns, const std::string& pod_name,
                         bool cilium) {
  if (auto r = Gone(client.Delete(ServicesResource(), ns, pod_name)); !r) return r;
  if (auto r = Gone(client.Delete(Resource::NetworkPolicies(), ns, PublishedPolicyName(pod_name)));
      !r)
    return r;
  if (!cilium) return Ok();
  return Gone(client.Delete(Resource::CiliumNetworkPolicies(), ns, PublishedPolicyName(pod_name)));
}

Status DeletePublicationsLabelled(Client& client, const std::string& label_selector, bool cilium) {
  std::vector<Resource> resources = {ServicesResource(), Resource::NetworkPolicies()};
  if (cilium) resources.push_back(Resource::CiliumNetworkPolicies());
  for (const auto& resource : resources) {
    auto listed = client.List(resource, "", label_selector);
    if (!listed) return listed.error();
    for (const auto& item : ArrayField(*listed, "items")) {
      const Json& metadata = ObjectField(item, "metadata");
      const std::string ns = StringField(metadata, "namespace");
      const std::string name = StringField(metadata, "name");
      if (ns.empty() || name.empty()) continue;
      if (auto r = Gone(client.Delete(resource, ns, name)); !r) return r;
    }
  }
  return Ok();
}

Result<backends::Exposure> ReadExposure(Client& client, const Json& pod) {
  auto facts = PodExposureOf(pod);
  if (!facts) return facts.error();
  backends::Exposure out;
  out.ready = facts->ready;
  const Json& metadata = ObjectField(pod, "metadata");
  const std::string ns = StringField(metadata, "namespace");
  const std::string name = StringField(metadata, "name");
  if (facts->ports.empty() || ns.empty() || name.empty()) return out;
  CallLimits limits;
  limits.max_body_bytes = kMaxServiceBytes;
  auto service = client.Get(ServicesResource(), ns, name, limits);
  if (!service && service.error().category != ErrorCategory::kNotFound) return service.error();
  std::vector<ServiceAddress> addresses;
  if (service) {
    auto read = ServiceAddressesOf(*service, facts->host_ip);
    if (!read) return InvalidArgument("service " + ns + "/" + name + ": " + read.error().message);
    addresses = std::move(*read);
  }
  // One entry per container port, in the Pod's order; the Service says where each is reached.
  for (const auto& port : facts->ports) {
    fleet::PublishedPort published;
    published.container_port = port.port;
    published.protocol = port.protocol;
    published.name = port.name;
    for (const auto& address : addresses) {
      if (address.container_port == port.port && address.protocol == port.protocol) {
        published.host_address = address.host;
        published.host_port = address.host_port;
      }
    }
    out.ports.push_back(std::move(published));
  }
  return out;
}

}  // namespace tessera::k8s
