// Builders for every object the backend creates. Pure: values in, JSON out; tests validate
// each against the Kubernetes models and the CRDs' own schemas.
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "backends/kubernetes/objects.h"
#include "backends/kubernetes/published.h"
#include "kubernetes/client.h"

namespace tessera::k8s {
namespace {

bool IsDnsLabel(const std::string& name, size_t max) {
  if (name.empty() || name.size() > max) return false;
  for (char c : name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-'))
      return false;
  }
  return std::isalnum(static_cast<unsigned char>(name.front())) &&
         std::isalnum(static_cast<unsigned char>(name.back()));
}

bool IsAddressLiteral(const std::string& text) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, text.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, text.c_str(), buffer) == 1;
}

std::string HostCidr(const std::string& ip) {
  return ip + (ip.find(':') != std::string::npos ? "/128" : "/32");
}

Json Labels(const std::string& tenancy) {
  return {{kManagedBy, "tessera"}, {kTenancyLabel, tenancy}};
}

std::string NamespaceOf(const std::string& tenancy) {
  return "tenant-" + tenancy;
}

const NfsEntitlement* FindEntitlement(const std::vector<NfsEntitlement>& entitlements,
                                      const std::string& name) {
  for (const auto& e : entitlements) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<std::string> NfsIps(const std::vector<NfsEntitlement>& entitlements) {
  std::vector<std::string> ips;
  for (const auto& e : entitlements) {
    if (IsAddressLiteral(e.server) && std::find(ips.begin(), ips.end(), e.server) == ips.end())
      ips.push_back(e.server);
  }
  return ips;
}

std::vector<std::string> NfsHostnames(const std::vector<NfsEntitlement>& entitlements) {
  std::vector<std::string> names;
  for (const auto& e : entitlements) {
    if (!IsAddressLiteral(e.server) &&
        std::find(names.begin(), names.end(), e.server) == names.end())
      names.push_back(e.server);
  }
  return names;
}

}  // namespace

Result<Isolation> ParseIsolation(std::string_view name) {
  if (name == "runc") return Isolation::kRunc;
  if (name == "gvisor") return Isolation::kGvisor;
  if (name == "kata") return Isolation::kKata;
  return InvalidArgument("isolation \"" + std::string(name) + "\": expected runc, gvisor or kata");
}

std::optional<std::string> RuntimeClassFor(Isolation isolation) {
  switch (isolation) {
    case Isolation::kRunc:
      return std::nullopt;
    case Isolation::kGvisor:
      return std::string("gvisor");
    case Isolation::kKata:
      return std::string("kata-qemu-nvidia-gpu");
  }
  return std::nullopt;
}

Result<NfsMode> ParseNfsMode(std::string_view name) {
  if (name == "inline") return NfsMode::kInline;
  if (name == "pv") return NfsMode::kPersistentVolume;
  return InvalidArgument("--k8s-nfs-mode \"" + std::string(name) + "\": expected inline or pv");
}

Result<std::string> TenantNamespace(const std::string& tenancy) {
  if (!IsDnsLabel(tenancy, 63 - 7))
    return InvalidArgument("tenancy \"" + tenancy +
                           "\": must be a DNS-1123 label of at most 56 characters (lower-case "
                           "letters, digits, '-') to fit namespace tenant-<name>");
  return NamespaceOf(tenancy);
}

Json BuildNamespace(const std::string& tenancy) {
  Json labels = Labels(tenancy);
  labels["pod-security.kubernetes.io/enforce"] = "baseline";
  return {{"apiVersion", "v1"},
          {"kind", "Namespace"},
          {"metadata", {{"name", NamespaceOf(tenancy)}, {"labels", labels}}}};
}

Json BuildCiliumNetworkPolicy(const std::string& tenancy,
                              const std::vector<NfsEntitlement>& entitlements) {
  const std::string ns = NamespaceOf(tenancy);
  Json same_namespace = {{"matchLabels", {{"k8s:io.kubernetes.pod.namespace", ns}}}};
  Json dns_ports =
      Json::array({{{"port", "53"}, {"protocol", "UDP"}}, {{"port", "53"}, {"protocol", "TCP"}}});
  Json dns_to = Json::array();
  for (const char* app : {"kube-dns", "coredns"}) {
    dns_to.push_back(
        {{"matchLabels",
          {{"k8s:io.kubernetes.pod.namespace", "kube-system"}, {"k8s:k8s-app", app}}}});
  }
  Json dns_rule = {{"toEndpoints", dns_to}, {"toPorts", Json::array({{{"ports", dns_ports}}})}};
  auto hostnames = NfsHostnames(entitlements);
  if (!hostnames.empty()) {
    // toFQDNs needs Cilium's DNS proxy to see the lookups.
    dns_rule["toPorts"][0]["rules"] = {{"dns", Json::array({{{"matchPattern", "*"}}})}};
  }
  Json egress = Json::array({{{"toEndpoints", Json::array({same_namespace})}}, dns_rule});
  Json nfs_ports =
      Json::array({{{"ports", Json::array({{{"port", "2049"}, {"protocol", "TCP"}}})}}});
  auto ips = NfsIps(entitlements);
  if (!ips.empty()) {
    Json cidrs = Json::array();
    for (const auto& ip : ips)
      cidrs.push_back(HostCidr(ip));
    egress.push_back({{"toCIDR", cidrs}, {"toPorts", nfs_ports}});
  }
  if (!hostnames.empty()) {
    Json fqdns = Json::array();
    for (const auto& name : hostnames)
      fqdns.push_back({{"matchName", name}});
    egress.push_back({{"toFQDNs", fqdns}, {"toPorts", nfs_ports}});
  }
  return {
      {"apiVersion", "cilium.io/v2"},
      {"kind", "CiliumNetworkPolicy"},
      {"metadata", {{"name", "tenant-isolation"}, {"namespace", ns}, {"labels", Labels(tenancy)}}},
      {"spec",
       {{"endpointSelector", Json::object()},
        {"ingress", Json::array({{{"fromEndpoints", Json::array({same_namespace})}}})},
        {"egress", egress}}}};
}

Json BuildNetworkPolicy(const std::string& tenancy,
                        const std::vector<NfsEntitlement>& entitlements) {
  const std::string ns = NamespaceOf(tenancy);
  Json same = Json::array({{{"podSelector", Json::object()}}});
  Json dns_peer = {
      {"namespaceSelector", {{"matchLabels", {{"kubernetes.io/metadata.name", "kube-system"}}}}},
      {"podSelector",
       {{"matchExpressions", Json::array({{{"key", "k8s-app"},
                                           {"operator", "In"},
                                           {"values", Json::array({"kube-dns", "coredns"})}}})}}}};
  Json egress = Json::array({{{"to", same}},
                             {{"to", Json::array({dns_peer})},
                              {"ports", Json::array({{{"protocol", "UDP"}, {"port", 53}},
                                                     {{"protocol", "TCP"}, {"port", 53}}})}}});
  auto ips = NfsIps(entitlements);
  if (!ips.empty()) {
    Json peers = Json::array();
    for (const auto& ip : ips)
      peers.push_back({{"ipBlock", {{"cidr", HostCidr(ip)}}}});
    egress.push_back(
        {{"to", peers}, {"ports", Json::array({{{"protocol", "TCP"}, {"port", 2049}}})}});
  }
  Json metadata = {{"name", "tenant-isolation"}, {"namespace", ns}, {"labels", Labels(tenancy)}};
  auto hostnames = NfsHostnames(entitlements);
  if (!hostnames.empty()) {
    // NetworkPolicy has no DNS names: these servers stay unreachable until given as IPs.
    std::string list;
    for (const auto& name : hostnames)
      list += (list.empty() ? "" : ",") + name;
    metadata["annotations"] = {{"tessera.dev/nfs-servers-not-allowed", list}};
  }
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata", metadata},
          {"spec",
           {{"podSelector", Json::object()},
            {"policyTypes", Json::array({"Ingress", "Egress"})},
            {"ingress", Json::array({{{"from", same}}})},
            {"egress", egress}}}};
}

Result<Json> BuildPod(const PodRequest& request, const std::vector<NfsEntitlement>& entitlements) {
  auto ns = TenantNamespace(request.tenancy);
  if (!ns) return ns.error();
  if (request.name.empty() || request.image.empty())
    return InvalidArgument("pod: name and image are required");
  if (request.gpus < 0) return InvalidArgument("pod: gpus must not be negative");
  if (auto ports = CheckContainerPorts(request.ports, request.ready); !ports) return ports.error();
  Json labels = Labels(request.tenancy);
  if (!request.lease_name.empty()) labels["tessera.dev/lease"] = request.lease_name;
  Json container = {{"name", "main"},
                    {"image", request.image},
                    {"securityContext", {{"allowPrivilegeEscalation", false}}}};
  if (!request.command.empty()) container["command"] = request.command;
  if (!request.env.empty()) {
    Json env = Json::array();
    for (const auto& [k, v] : request.env)
      env.push_back({{"name", k}, {"value", v}});
    container["env"] = env;
  }
  if (!request.resource_claim.empty()) {
    // The claim names the exact GPUs; the container takes all of them.
    container["resources"] = {{"claims", Json::array({{{"name", "gpus"}}})}};
  } else if (request.gpus > 0) {
    container["resources"] = {{"limits", {{request.gpu_resource, std::to_string(request.gpus)}}}};
  }
  Json mounts = Json::array(), volumes = Json::array();
  for (const auto& volume : request.volumes) {
    const NfsEntitlement* e = FindEntitlement(entitlements, volume.name);
    if (!e)
      return PermissionDenied("volume \"" + volume.name + "\": tenancy \"" + request.tenancy +
                              "\" is not entitled to it");
    bool read_only = volume.read_only || e->read_only;
    mounts.push_back(
        {{"name", volume.name}, {"mountPath", volume.mount_path}, {"readOnly", read_only}});
    if (request.nfs_mode == NfsMode::kPersistentVolume) {
      volumes.push_back(
          {{"name", volume.name},
           {"persistentVolumeClaim", {{"claimName", volume.name}, {"readOnly", read_only}}}});
    } else {
      volumes.push_back(
          {{"name", volume.name},
           {"nfs", {{"server", e->server}, {"path", e->path}, {"readOnly", read_only}}}});
    }
  }
  if (!mounts.empty()) container["volumeMounts"] = mounts;
  AddPortsAndProbe(container, request.ports, request.ready);
  Json spec = {{"restartPolicy", "Never"},
               {"automountServiceAccountToken", false},
               {"enableServiceLinks", false},
               {"containers", Json::array({container})}};
  if (!volumes.empty()) spec["volumes"] = volumes;
  if (!request.resource_claim.empty()) {
    spec["resourceClaims"] =
        Json::array({{{"name", "gpus"}, {"resourceClaimName", request.resource_claim}}});
  }
  if (auto runtime_class = RuntimeClassFor(request.isolation))
    spec["runtimeClassName"] = *runtime_class;
  if (!request.node.empty()) {
    // matchFields on metadata.name: the placement chose this node, the scheduler must agree.
    spec["affinity"] = {
        {"nodeAffinity",
         {{"requiredDuringSchedulingIgnoredDuringExecution",
           {{"nodeSelectorTerms",
             Json::array({{{"matchFields",
                            Json::array({{{"key", "metadata.name"},
                                          {"operator", "In"},
                                          {"values", Json::array({request.node})}}})}}})}}}}}};
  }
  return Json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", request.name}, {"namespace", *ns}, {"labels", labels}}},
              {"spec", spec}};
}

Json BuildNfsPersistentVolume(const std::string& tenancy, const NfsEntitlement& e) {
  const char* mode = e.read_only ? "ReadOnlyMany" : "ReadWriteMany";
  return {
      {"apiVersion", "v1"},
      {"kind", "PersistentVolume"},
      {"metadata", {{"name", "tessera-" + tenancy + "-" + e.name}, {"labels", Labels(tenancy)}}},
      {"spec",
       {{"capacity", {{"storage", "1Ti"}}},  // NFS ignores it; the API requires one
        {"accessModes", Json::array({mode})},
        {"persistentVolumeReclaimPolicy", "Retain"},
        {"storageClassName", ""},
        {"nfs", {{"server", e.server}, {"path", e.path}, {"readOnly", e.read_only}}},
        {"claimRef", {{"namespace", NamespaceOf(tenancy)}, {"name", e.name}}}}}};
}

Json BuildNfsPersistentVolumeClaim(const std::string& tenancy, const NfsEntitlement& e) {
  const char* mode = e.read_only ? "ReadOnlyMany" : "ReadWriteMany";
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata",
           {{"name", e.name}, {"namespace", NamespaceOf(tenancy)}, {"labels", Labels(tenancy)}}},
          {"spec",
           {{"accessModes", Json::array({mode})},
            {"storageClassName", ""},
            {"volumeName", "tessera-" + tenancy + "-" + e.name},
            {"resources", {{"requests", {{"storage", "1Ti"}}}}}}}};
}

Json BuildGpuLease(const LeaseSpec& lease) {
  return {{"apiVersion", std::string(kGroup) + "/" + kVersion},
          {"kind", "GpuLease"},
          {"metadata",
           {{"name", lease.name},
            {"labels",
             {{kManagedBy, "tessera"},
              {kTenancyLabel, lease.tenancy},
              {"tessera.dev/node", lease.node}}}}},
          {"spec",
           {{"tenancy", lease.tenancy},
            {"node", lease.node},
            {"gpuIds", lease.gpu_ids},
            {"resource", lease.resource},
            {"podRef", {{"namespace", lease.pod_namespace}, {"name", lease.pod_name}}}}}};
}

Json BuildTenancy(const std::string& name, const std::vector<NfsEntitlement>& entitlements) {
  Json nfs = Json::array();
  for (const auto& e : entitlements) {
    nfs.push_back(
        {{"name", e.name}, {"server", e.server}, {"path", e.path}, {"readOnly", e.read_only}});
  }
  return {{"apiVersion", std::string(kGroup) + "/" + kVersion},
          {"kind", "Tenancy"},
          {"metadata", {{"name", name}, {"labels", {{kManagedBy, "tessera"}}}}},
          {"spec", {{"name", name}, {"storage", {{"nfs", nfs}}}}}};
}

std::string FirmwareCheckJobName(const std::string& lease_name) {
  std::string name = "gpu-check-" + lease_name;
  if (name.size() > 63) name.resize(63);
  while (!name.empty() && name.back() == '-')
    name.pop_back();
  return name;
}

Json BuildFirmwareCheckJob(const LeaseSpec& lease, const FirmwareCheckOptions& options) {
  Json command = options.command;
  for (const std::string& arg : {std::string("--root"), options.host_root,
                                 std::string("--baseline-dir"), options.baseline_dir})
    command.push_back(arg);
  for (const auto& id : DevicesToCheck(lease)) {
    command.push_back("--gpu");
    command.push_back(id);
  }
  Json labels = {{kManagedBy, "tessera"}, {"tessera.dev/lease", lease.name}};
  Json container = {
      {"name", "check"},
      {"image", options.image},
      {"command", command},
      {"securityContext", {{"privileged", true}}},
      {"volumeMounts", Json::array({{{"name", "dev"}, {"mountPath", "/dev"}},
                                    {{"name", "sys"}, {"mountPath", options.host_root + "/sys"}},
                                    {{"name", "firmware-baselines"},
                                     {"mountPath", options.baseline_dir},
                                     {"readOnly", true}}})}};
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata",
           {{"name", FirmwareCheckJobName(lease.name)},
            {"namespace", options.namespace_},
            {"labels", labels}}},
          {"spec",
           {{"backoffLimit", 0},
            {"ttlSecondsAfterFinished", 3600},
            {"template",
             {{"metadata", {{"labels", labels}}},
              {"spec",
               {{"restartPolicy", "Never"},
                // nodeName: the check must run where the GPUs are, and those GPUs are
                // Unhealthy to the scheduler while the lease is checking.
                {"nodeName", lease.node},
                {"tolerations", Json::array({{{"operator", "Exists"}}})},
                {"containers", Json::array({container})},
                {"volumes", Json::array({{{"name", "dev"}, {"hostPath", {{"path", "/dev"}}}},
                                         {{"name", "sys"}, {"hostPath", {{"path", "/sys"}}}},
                                         // OrCreate: with no baselines the check must fail and say
                                         // so, not leave a Pod that cannot start and a Job that
                                         // never finishes.
                                         {{"name", "firmware-baselines"},
                                          {"hostPath",
                                           {{"path", options.baseline_dir},
                                            {"type", "DirectoryOrCreate"}}}}})}}}}}}}};
}

std::vector<std::string> DevicesToCheck(const LeaseSpec& lease) {
  std::vector<std::string> out = lease.gpu_ids;
  out.insert(out.end(), lease.allocated_devices.begin(), lease.allocated_devices.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tessera::k8s
