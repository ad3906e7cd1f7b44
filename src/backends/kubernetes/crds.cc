// The CustomResourceDefinitions of group tessera.dev (cluster-scoped, v1alpha1). deploy/crds/
// holds the same objects as YAML; a test keeps them equal.

#include "backends/kubernetes/objects.h"
#include "kubernetes/client.h"

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
            const std::string& description = "", int priority = 0) {
  Json c = {{"name", name}, {"type", type}, {"jsonPath", path}};
  if (!description.empty()) c["description"] = description;
  // Priority 1: shown by `kubectl get -o wide` only.
  if (priority > 0) c["priority"] = priority;
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

namespace {

// GpuLease.spec: which GPUs of which node a tenancy holds, and for which Pod.
Json GpuLeaseSpecSchema() {
  return {{"type", "object"},
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
             {{"type", "object"}, {"properties", {{"namespace", Str()}, {"name", Str()}}}}}}}};
}

// GpuLease.status.measured: the node agent's running totals and per-GPU cursors and gauges.
Json GpuLeaseMeasuredSchema() {
  Json cursor = {{"type", "object"},
                 {"properties",
                  {{"sampleUs", {{"type", "integer"}, {"minimum", 0}}},
                   {"energyMj", {{"type", "integer"}, {"minimum", 0}}},
                   {"sampledMs", {{"type", "integer"}, {"minimum", 0}}}}}};
  Json gauges = {{"type", "object"},
                 {"properties",
                  {{"utilPercent", {{"type", "number"}, {"minimum", 0}, {"maximum", 100}}},
                   {"memoryUsed", {{"type", "integer"}, {"minimum", 0}}},
                   {"memoryTotal", {{"type", "integer"}, {"minimum", 0}}},
                   {"powerWatts", {{"type", "number"}, {"minimum", 0}}}}}};
  return {
      {"type", "object"},
      {"description",
       "what the node agent measured of the Pod's GPU processes (NVML, attributed by "
       "cgroup): SM-seconds, GPU memory GiB-seconds, energy, and per GPU the cursor of "
       "the last counted pass, written in one patch so a restarted agent counts nothing "
       "twice"},
      {"properties",
       {{"smSeconds", {{"type", "number"}, {"minimum", 0}}},
        {"memoryGibSeconds", {{"type", "number"}, {"minimum", 0}}},
        {"energyJoules", {{"type", "number"}, {"minimum", 0}}},
        {"updatedMs", {{"type", "integer"}, {"minimum", 0}}},
        {"cursors", {{"type", "object"}, {"maxProperties", 64}, {"additionalProperties", cursor}}},
        {"gauges",
         {{"type", "object"},
          {"description", "the last pass's figures of each of its GPUs"},
          {"maxProperties", 64},
          {"additionalProperties", gauges}}}}}};
}

// GpuLease.status: the lease state machine, its check Job, the pinned claim, what kubelet gave
// the Pod and what the node agent measured.
Json GpuLeaseStatusSchema() {
  Json states = Json::array();
  for (const char* s : kLeaseStates)
    states.push_back(s);
  return {{"type", "object"},
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
            {"measured", GpuLeaseMeasuredSchema()},
            {"lastTransitionTime", {{"type", "string"}, {"format", "date-time"}}}}}};
}

}  // namespace

Json GpuLeaseCrd() {
  Json schema = {{"type", "object"},
                 {"required", Json::array({"spec"})},
                 {"properties",
                  {{"apiVersion", Str()},
                   {"kind", Str()},
                   {"metadata", {{"type", "object"}}},
                   {"spec", GpuLeaseSpecSchema()},
                   {"status", GpuLeaseStatusSchema()}}}};
  Json columns = Json::array(
      {Column("Tenancy", "string", ".spec.tenancy"), Column("Node", "string", ".spec.node"),
       Column("GPUs", "string", ".spec.gpuIds"), Column("State", "string", ".status.state"),
       Column("Reason", "string", ".status.reason", "why the state"),
       Column("Age", "date", ".metadata.creationTimestamp")});
  return Crd("gpuleases", "gpulease", "GpuLease", Json::array({"gl"}), schema, columns);
}

namespace {

// GpuContainer spec.ports (what was asked) and status.ports (`published`: where each is reached).
Json ContainerPortsSchema(bool published) {
  Json properties = {{"containerPort", {{"type", "integer"}, {"minimum", 1}, {"maximum", 65535}}},
                     {"protocol", {{"type", "string"}, {"enum", Json::array({"tcp", "udp"})}}},
                     {"name", {{"type", "string"}, {"maxLength", 15}}}};
  if (published) {
    properties["hostAddress"] = {
        {"type", "string"},
        {"maxLength", 253},
        {"description", "the Service's address for this port, once known"}};
    properties["hostPort"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 65535}};
  }
  return {{"type", "array"},
          {"maxItems", 16},
          {"description", published ? "where each published port is reached"
                                    : "ports to publish (a Service in the tenant namespace)"},
          {"items",
           {{"type", "object"},
            {"required", Json::array({"containerPort"})},
            {"properties", properties}}}};
}

// GpuContainer spec.ready: the HTTP readiness probe.
Json ReadySchema() {
  return {{"type", "object"},
          {"description", "ready once an HTTP GET of path on port answers 200..399"},
          {"required", Json::array({"httpGet"})},
          {"properties",
           {{"httpGet",
             {{"type", "object"},
              {"required", Json::array({"port"})},
              {"properties",
               {{"path", {{"type", "string"}, {"pattern", "^/"}, {"maxLength", 256}}},
                {"port", {{"type", "integer"}, {"minimum", 1}, {"maximum", 65535}}}}}}}}}};
}

}  // namespace

// One submission (tessera serve --backend kubernetes): spec is what the tenant asked for, status
// what became of it. Named after the container ID; a submission with an Idempotency-Key gets a
// name derived from (tenancy incarnation, key), so the API server's AlreadyExists keeps keys
// unique per tenancy.
Json GpuContainerCrd() {
  Json states = Json::array({"pending", "running", "exited", "failed"});
  Json volume = {
      {"type", "object"},
      {"required", Json::array({"name", "mountPath"})},
      {"properties", {{"name", Str()}, {"mountPath", Str()}, {"readOnly", {{"type", "boolean"}}}}}};
  Json schema = {
      {"type", "object"},
      {"required", Json::array({"spec"})},
      {"properties",
       {{"apiVersion", Str()},
        {"kind", Str()},
        {"metadata", {{"type", "object"}}},
        {"spec",
         {{"type", "object"},
          {"required", Json::array({"id", "tenancy", "tenancyUid", "image"})},
          {"properties",
           {{"id", {{"type", "string"}, {"description", "the container ID in the API"}}},
            {"tenancy", {{"type", "string"}, {"maxLength", 63}}},
            {"tenancyUid", {{"type", "string"}, {"description", "the tenancy's incarnation"}}},
            {"idempotencyKey", Str()},
            {"image", {{"type", "string"}, {"maxLength", 512}}},
            {"gpus", {{"type", "integer"}, {"minimum", 0}, {"maximum", 8}}},
            {"isolation", {{"type", "string"}, {"enum", Json::array({"runc", "gvisor", "kata"})}}},
            {"network", {{"type", "string"}, {"enum", Json::array({"tenancy", "none"})}}},
            {"command", {{"type", "array"}, {"items", Str()}}},
            {"env", {{"type", "object"}, {"additionalProperties", Str()}}},
            {"volumes", {{"type", "array"}, {"items", volume}}},
            {"priority", {{"type", "integer"}, {"minimum", -1000}, {"maximum", 1000}}},
            {"maxDurationSeconds", {{"type", "integer"}, {"minimum", 1}, {"maximum", 31622400}}},
            {"preemptible", {{"type", "boolean"}}},
            {"stopRequested", {{"type", "boolean"}}},
            {"createdTime", {{"type", "string"}, {"format", "date-time"}}},
            {"ports", ContainerPortsSchema(false)},
            {"ready", ReadySchema()}}}}},
        {"status",
         {{"type", "object"},
          {"properties",
           {{"state", {{"type", "string"}, {"enum", states}}},
            {"started", {{"type", "boolean"}}},
            {"node", Str()},
            {"gpus", {{"type", "array"}, {"items", Str()}}},
            {"claim", {{"type", "string"}, {"description", "the GpuLease holding its GPUs"}}},
            {"exitCode", {{"type", "integer"}}},
            {"reason", Str()},
            {"startedTime", {{"type", "string"}, {"format", "date-time"}}},
            {"finishedTime", {{"type", "string"}, {"format", "date-time"}}},
            {"ports", ContainerPortsSchema(true)},
            {"ready",
             {{"type", "boolean"}, {"description", "whether its readiness probe answers"}}},
            {"measured",
             {{"type", "object"},
              {"description",
               "what its GPU processes were measured to use (from its GpuLease's "
               "status.measured when it ended)"},
              {"properties",
               {{"smSeconds", {{"type", "number"}, {"minimum", 0}}},
                {"memoryGibSeconds", {{"type", "number"}, {"minimum", 0}}},
                {"energyJoules", {{"type", "number"}, {"minimum", 0}}}}}}}}}}}}}};
  Json columns = Json::array(
      {Column("ID", "string", ".spec.id"), Column("Tenancy", "string", ".spec.tenancy"),
       Column("Image", "string", ".spec.image", "", 1), Column("GPUs", "integer", ".spec.gpus"),
       Column("State", "string", ".status.state"), Column("Node", "string", ".status.node"),
       Column("Exit", "integer", ".status.exitCode", "exit code", 1),
       Column("Reason", "string", ".status.reason", "why it failed or stopped", 1),
       Column("Age", "date", ".metadata.creationTimestamp")});
  return Crd("gpucontainers", "gpucontainer", "GpuContainer", Json::array({"gpuc"}), schema,
             columns);
}

}  // namespace tessera::k8s
