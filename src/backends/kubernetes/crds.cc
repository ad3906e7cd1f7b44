// The CustomResourceDefinitions of group tessera.dev (cluster-scoped, v1alpha1). deploy/crds/
// holds the same objects as YAML; a test keeps them equal.
#include "backends/kubernetes/kubernetes.h"

namespace tessera::k8s {
namespace {

Json Str() {
  return {{"type", "string"}};
}

Json Crd(const std::string& plural, const std::string& singular, const std::string& kind,
         const Json& short_names, const Json& schema, const Json& columns) {
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", plural + "." + kGroup}, {"labels", {{kManagedBy, "tessera"}}}}},
          {"spec",
           {{"group", kGroup},
            {"scope", "Cluster"},
            {"names",
             {{"plural", plural},
              {"singular", singular},
              {"kind", kind},
              {"listKind", kind + "List"},
              {"shortNames", short_names}}},
            {"versions", Json::array({{{"name", kVersion},
                                       {"served", true},
                                       {"storage", true},
                                       {"subresources", {{"status", Json::object()}}},
                                       {"additionalPrinterColumns", columns},
                                       {"schema", {{"openAPIV3Schema", schema}}}}})}}}};
}

Json Column(const std::string& name, const std::string& type, const std::string& path,
            const std::string& description = "") {
  Json c = {{"name", name}, {"type", type}, {"jsonPath", path}};
  if (!description.empty()) c["description"] = description;
  return c;
}

}  // namespace

Json TenancyCrd() {
  Json nfs_item = {
      {"type", "object"},
      {"required", Json::array({"name", "server", "path"})},
      {"properties",
       {{"name",
         {{"type", "string"}, {"pattern", "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}, {"maxLength", 63}}},
        {"server", {{"type", "string"}, {"minLength", 1}}},
        {"path", {{"type", "string"}, {"pattern", "^/"}}},
        {"readOnly", {{"type", "boolean"}}}}}};
  Json schema = {{"type", "object"},
                 {"required", Json::array({"spec"})},
                 {"properties",
                  {{"apiVersion", Str()},
                   {"kind", Str()},
                   {"metadata", {{"type", "object"}}},
                   {"spec",
                    {{"type", "object"},
                     {"required", Json::array({"name"})},
                     {"properties",
                      {{"name",
                        {{"type", "string"},
                         {"pattern", "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                         {"maxLength", 56},
                         {"description", "namespace is tenant-<name>"}}},
                       {"storage",
                        {{"type", "object"},
                         {"properties",
                          {{"nfs",
                            {{"type", "array"},
                             {"items", nfs_item},
                             {"description", "NFS exports the tenancy may mount"}}}}}}}}}}},
                   {"status",
                    {{"type", "object"},
                     {"properties",
                      {{"phase", {{"type", "string"}, {"enum", Json::array({"Pending", "Ready"})}}},
                       {"namespace", Str()},
                       {"message", Str()},
                       {"observedGeneration", {{"type", "integer"}, {"format", "int64"}}}}}}}}}};
  Json columns = Json::array({Column("Tenancy", "string", ".spec.name"),
                              Column("Namespace", "string", ".status.namespace"),
                              Column("Phase", "string", ".status.phase"),
                              Column("Age", "date", ".metadata.creationTimestamp")});
  return Crd("tenancies", "tenancy", "Tenancy", Json::array({"tn"}), schema, columns);
}

Json GpuLeaseCrd() {
  Json states = Json::array();
  for (const char* s : kLeaseStates)
    states.push_back(s);
  Json schema = {
      {"type", "object"},
      {"required", Json::array({"spec"})},
      {"properties",
       {{"apiVersion", Str()},
        {"kind", Str()},
        {"metadata", {{"type", "object"}}},
        {"spec",
         {{"type", "object"},
          {"required", Json::array({"tenancy", "node", "gpuIds"})},
          {"properties",
           {{"tenancy", Str()},
            {"node", Str()},
            {"gpuIds",
             {{"type", "array"},
              {"minItems", 1},
              {"items", {{"type", "string"}, {"description", "PCI address"}}}}},
            {"resource", Str()},
            {"podRef",
             {{"type", "object"}, {"properties", {{"namespace", Str()}, {"name", Str()}}}}}}}}},
        {"status",
         {{"type", "object"},
          {"properties",
           {{"state", {{"type", "string"}, {"enum", states}}},
            {"reason", Str()},
            {"checkJob", Str()},
            {"claim",
             {{"type", "object"},
              {"description", "the pinned ResourceClaim (DRA) in the tenant namespace"},
              {"properties", {{"name", Str()}, {"uid", Str()}}}}},
            {"allocatedDevices",
             {{"type", "array"},
              {"maxItems", 64},
              {"items",
               {{"type", "string"},
                {"maxLength", 256},
                {"description",
                 "a device kubelet gave the Pod (PodResources): PCI address, or the raw device "
                 "ID when the node does not know it"}}}}},
            {"lastTransitionTime", {{"type", "string"}, {"format", "date-time"}}}}}}}}}};
  Json columns = Json::array(
      {Column("Tenancy", "string", ".spec.tenancy"), Column("Node", "string", ".spec.node"),
       Column("GPUs", "string", ".spec.gpuIds"), Column("State", "string", ".status.state"),
       Column("Reason", "string", ".status.reason", "why the state"),
       Column("Age", "date", ".metadata.creationTimestamp")});
  return Crd("gpuleases", "gpulease", "GpuLease", Json::array({"gl"}), schema, columns);
}

}  // namespace tessera::k8s
