// The plugin's configuration: strict YAML (unknown fields are errors, since a misspelt option
// silently ignored is how a node ends up advertising the wrong thing), environment overrides
// and validation.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "common/bounded_yaml.h"
#include "common/untrusted_text.h"
#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {
namespace {

std::string Field(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "." + name;
}

Status RejectUnknown(const YAML::Node& node, const std::string& where,
                     std::initializer_list<const char*> known) {
  if (!node.IsMap()) return InvalidArgument((where.empty() ? "config" : where) + ": want a map");
  std::set<std::string> seen;
  for (const auto& item : node) {
    if (!item.first.IsScalar()) return InvalidArgument(where + ": keys must be names");
    const std::string& key = item.first.Scalar();
    // yaml-cpp keeps the first of two equal keys; a silently dropped section is worse than an
    // error.
    if (!seen.insert(key).second) {
      return InvalidArgument(Field(where, Excerpt(key, 40)) + ": duplicate key");
    }
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      return InvalidArgument(Field(where, Excerpt(key, 40)) + ": unknown field");
    }
  }
  return Ok();
}

Result<std::string> String(const YAML::Node& node, const std::string& where) {
  if (!node.IsScalar()) return InvalidArgument(where + ": want a string");
  return node.Scalar();
}

Result<bool> Bool(const YAML::Node& node, const std::string& where) {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (s == "true" || s == "True" || s == "yes") return true;
    if (s == "false" || s == "False" || s == "no") return false;
  }
  return InvalidArgument(where + ": want true or false");
}

Result<int64_t> Integer(const YAML::Node& node, const std::string& where, int64_t min,
                        int64_t max) {
  if (!node.IsScalar() || node.Scalar().empty() || node.Scalar().size() > 19) {
    return InvalidArgument(where + ": want an integer");
  }
  const std::string& s = node.Scalar();
  size_t start = s[0] == '-' ? 1 : 0;
  if (start == s.size() || s.find_first_not_of("0123456789", start) != std::string::npos) {
    return InvalidArgument(where + ": want an integer, got \"" + Excerpt(s, 40) + "\"");
  }
  errno = 0;
  long long value = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE || value < min || value > max) {
    return InvalidArgument(where + ": " + s + " is out of range " + std::to_string(min) + ".." +
                           std::to_string(max));
  }
  return static_cast<int64_t>(value);
}

// PCI IDs as 4 hex digits ("10de", "0x10de").
Result<uint16_t> HexId(const YAML::Node& node, const std::string& where) {
  if (!node.IsScalar()) return InvalidArgument(where + ": want a hex ID such as \"10de\"");
  std::string s = node.Scalar();
  if (s.rfind("0x", 0) == 0 || s.rfind("0X", 0) == 0) s = s.substr(2);
  if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789abcdefABCDEF") != s.npos) {
    return InvalidArgument(where + ": \"" + Excerpt(node.Scalar(), 40) +
                           "\" is not a 16-bit hex ID");
  }
  return static_cast<uint16_t>(std::strtoul(s.c_str(), nullptr, 16));
}

Result<std::vector<std::string>> StringList(const YAML::Node& node, const std::string& where) {
  std::vector<std::string> out;
  if (node.IsScalar()) {  // "cdi-cri,envvar" as in the env var
    std::string text = node.Scalar();
    size_t start = 0;
    while (start <= text.size()) {
      size_t comma = text.find(',', start);
      if (comma == std::string::npos) comma = text.size();
      std::string item = text.substr(start, comma - start);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      if (!item.empty()) out.push_back(item);
      start = comma + 1;
    }
    return out;
  }
  if (!node.IsSequence()) return InvalidArgument(where + ": want a list");
  size_t i = 0;
  for (const auto& item : node) {
    auto s = String(item, where + "[" + std::to_string(i++) + "]");
    if (!s) return s.error();
    out.push_back(*s);
  }
  return out;
}

Result<std::vector<ListStrategy>> Strategies(const std::vector<std::string>& names,
                                             const std::string& where) {
  std::vector<ListStrategy> out;
  for (const auto& name : names) {
    auto strategy = ParseListStrategy(name);
    if (!strategy) return strategy.error().WithContext(where);
    if (std::find(out.begin(), out.end(), *strategy) == out.end()) out.push_back(*strategy);
  }
  if (out.empty()) return InvalidArgument(where + ": at least one strategy is needed");
  return out;
}

Status ParseRule(const YAML::Node& node, const std::string& where, NamingRule* rule) {
  if (auto s = RejectUnknown(node, where, {"name", "match"}); !s) return s;
  if (!node["name"]) return InvalidArgument(where + ".name: required");
  auto name = String(node["name"], where + ".name");
  if (!name) return name.error();
  rule->name = *name;
  if (const auto match = node["match"]) {
    std::string m = where + ".match";
    if (auto s = RejectUnknown(match, m, {"vendor", "device", "model", "driver", "kind"}); !s) {
      return s;
    }
    if (match["vendor"]) {
      auto id = HexId(match["vendor"], m + ".vendor");
      if (!id) return id.error();
      rule->vendor_id = *id;
    }
    if (match["device"]) {
      auto id = HexId(match["device"], m + ".device");
      if (!id) return id.error();
      rule->device_id = *id;
    }
    for (auto [key, out] : {std::pair{"model", &rule->model}, std::pair{"driver", &rule->driver},
                            std::pair{"kind", &rule->kind}}) {
      if (!match[key]) continue;
      auto s = String(match[key], m + "." + key);
      if (!s) return s.error();
      *out = *s;
    }
    if (!rule->kind.empty() && rule->kind != "gpu" && rule->kind != "accelerator" &&
        rule->kind != "nvswitch") {
      return InvalidArgument(m + ".kind: \"" + Excerpt(rule->kind, 60) +
                             "\": want gpu, accelerator or nvswitch");
    }
  }
  return Ok();
}

Status ParseSharedResources(const YAML::Node& list, const std::string& where,
                            std::vector<SharedResource>* out) {
  if (!list.IsSequence()) return InvalidArgument(where + ": want a list");
  size_t i = 0;
  for (const auto& item : list) {
    std::string w = where + "[" + std::to_string(i++) + "]";
    if (auto s = RejectUnknown(item, w, {"name", "replicas", "rename"}); !s) return s;
    SharedResource shared;
    if (!item["name"]) return InvalidArgument(w + ".name: required");
    auto name = String(item["name"], w + ".name");
    if (!name) return name.error();
    shared.name = *name;
    if (!item["replicas"]) return InvalidArgument(w + ".replicas: required");
    auto replicas = Integer(item["replicas"], w + ".replicas", 2, 1024);
    if (!replicas) return replicas.error();
    shared.replicas = static_cast<int>(*replicas);
    if (item["rename"]) {
      auto rename = String(item["rename"], w + ".rename");
      if (!rename) return rename.error();
      shared.rename = *rename;
    }
    out->push_back(std::move(shared));
  }
  return Ok();
}

Status ParseMps(const YAML::Node& mps, const std::string& where, MpsSharing* out) {
  if (auto s = RejectUnknown(mps, where,
                             {"renameByDefault", "resources", "root", "controlBinary", "shmSizeMiB",
                              "readyTimeoutMs", "checkIntervalMs", "commandTimeoutMs"});
      !s) {
    return s;
  }
  if (mps["renameByDefault"]) {
    auto b = Bool(mps["renameByDefault"], where + ".renameByDefault");
    if (!b) return b.error();
    out->rename_by_default = *b;
  }
  if (mps["resources"]) {
    if (auto s = ParseSharedResources(mps["resources"], where + ".resources", &out->resources); !s)
      return s;
  }
  for (auto [key, field] :
       {std::pair{"root", &out->root}, std::pair{"controlBinary", &out->control_binary}}) {
    if (!mps[key]) continue;
    auto text = String(mps[key], where + "." + key);
    if (!text) return text.error();
    if (text->empty() || text->size() > 1024 ||
        (std::string_view(key) == "root" && text->front() != '/'))
      return InvalidArgument(where + "." + key + ": want a path (root: an absolute one)");
    *field = *text;
  }
  if (mps["shmSizeMiB"]) {
    auto mib = Integer(mps["shmSizeMiB"], where + ".shmSizeMiB", 1, 65536);
    if (!mib) return mib.error();
    out->shm_bytes = static_cast<uint64_t>(*mib) << 20;
  }
  for (auto [key, field] : {std::pair{"readyTimeoutMs", &out->ready_timeout_ms},
                            std::pair{"checkIntervalMs", &out->check_interval_ms},
                            std::pair{"commandTimeoutMs", &out->command_timeout_ms}}) {
    if (!mps[key]) continue;
    auto ms = Integer(mps[key], where + "." + key, 100, 600000);
    if (!ms) return ms.error();
    *field = static_cast<int>(*ms);
  }
  return Ok();
}

Status ParseSharing(const YAML::Node& node, const std::string& where, SharingConfig* sharing) {
  if (auto s = RejectUnknown(node, where, {"timeSlicing", "mps"}); !s) return s;
  if (const auto mps = node["mps"]) {
    if (auto s = ParseMps(mps, where + ".mps", &sharing->mps); !s) return s;
  }
  const auto ts = node["timeSlicing"];
  if (!ts) return Ok();
  std::string t = where + ".timeSlicing";
  if (auto s = RejectUnknown(ts, t, {"renameByDefault", "failRequestsGreaterThanOne", "resources"});
      !s) {
    return s;
  }
  if (ts["renameByDefault"]) {
    auto b = Bool(ts["renameByDefault"], t + ".renameByDefault");
    if (!b) return b.error();
    sharing->rename_by_default = *b;
  }
  if (ts["failRequestsGreaterThanOne"]) {
    auto b = Bool(ts["failRequestsGreaterThanOne"], t + ".failRequestsGreaterThanOne");
    if (!b) return b.error();
    sharing->fail_requests_greater_than_one = *b;
  }
  if (const auto list = ts["resources"]) {
    if (auto s = ParseSharedResources(list, t + ".resources", &sharing->resources); !s) return s;
  }
  return Ok();
}

// GPU faults: the fault table, the recovery commands, kubelet's PodResources and the health file.
Status ParseFaultHandling(const YAML::Node& node, const std::string& where, HealthConfig* health) {
  for (auto [key, field] : {std::pair{"faultTable", &health->fault_table},
                            std::pair{"podResourcesSocket", &health->pod_resources_socket},
                            std::pair{"stateFile", &health->state_file}}) {
    if (!node[key]) continue;
    auto s = String(node[key], Field(where, key));
    if (!s) return s.error();
    *field = *s;
  }
  for (auto [key, field] : {std::pair{"resetCommand", &health->reset_command},
                            std::pair{"selfTestCommand", &health->self_test_command}}) {
    if (!node[key]) continue;
    auto list = StringList(node[key], Field(where, key));
    if (!list) return list.error();
    *field = *list;
  }
  if (node["recoveryIntervalMs"]) {
    auto ms = Integer(node["recoveryIntervalMs"], where + ".recoveryIntervalMs", 10, 600000);
    if (!ms) return ms.error();
    health->recovery_interval_ms = static_cast<int>(*ms);
  }
  return Ok();
}

Status ParseHealth(const YAML::Node& node, const std::string& where, HealthConfig* health) {
  if (auto s = RejectUnknown(node, where,
                             {"enabled", "pollIntervalMs", "nvml", "nvmlLibrary", "ignoredXids",
                              "faultTable", "resetCommand", "selfTestCommand", "podResourcesSocket",
                              "stateFile", "recoveryIntervalMs"});
      !s) {
    return s;
  }
  if (auto s = ParseFaultHandling(node, where, health); !s) return s;
  if (node["enabled"]) {
    auto b = Bool(node["enabled"], where + ".enabled");
    if (!b) return b.error();
    health->enabled = *b;
  }
  if (node["pollIntervalMs"]) {
    auto ms = Integer(node["pollIntervalMs"], where + ".pollIntervalMs", 10, 60000);
    if (!ms) return ms.error();
    health->poll_interval_ms = static_cast<int>(*ms);
  }
  if (node["nvml"]) {
    auto b = Bool(node["nvml"], where + ".nvml");
    if (!b) return b.error();
    health->nvml = *b;
  }
  if (node["nvmlLibrary"]) {
    auto s = String(node["nvmlLibrary"], where + ".nvmlLibrary");
    if (!s) return s.error();
    health->nvml_library = *s;
  }
  if (const auto xids = node["ignoredXids"]) {
    if (!xids.IsSequence()) return InvalidArgument(where + ".ignoredXids: want a list of numbers");
    health->ignored_xids.clear();
    size_t i = 0;
    for (const auto& item : xids) {
      auto xid = Integer(item, where + ".ignoredXids[" + std::to_string(i++) + "]", 0,
                         INT64_C(0x7fffffffffffffff));
      if (!xid) return xid.error();
      health->ignored_xids.insert(static_cast<uint64_t>(*xid));
    }
  }
  return Ok();
}

Status ParseTopology(const YAML::Node& node, const std::string& where, TopologyConfig* topology) {
  if (auto s = RejectUnknown(node, where, {"partitionTable", "modules"}); !s) return s;
  if (node["partitionTable"]) {
    auto s = String(node["partitionTable"], where + ".partitionTable");
    if (!s) return s.error();
    topology->partition_table = *s;
  }
  if (const auto modules = node["modules"]) {
    if (!modules.IsMap()) return InvalidArgument(where + ".modules: want module ID: PCI address");
    for (const auto& item : modules) {
      std::string key = item.first.IsScalar() ? item.first.Scalar() : "?";
      auto module = Integer(item.first, where + ".modules." + key, 1, topology::kMaxModules);
      if (!module) return module.error();
      auto pci = String(item.second, where + ".modules." + key);
      if (!pci) return pci.error();
      if (topology->modules.count(static_cast<int>(*module))) {
        return InvalidArgument(where + ".modules." + key + ": duplicate module");
      }
      topology->modules[static_cast<int>(*module)] = *pci;
    }
  }
  return Ok();
}

bool ValidDnsSubdomain(std::string_view domain) {
  if (domain.empty() || domain.size() > 253) return false;
  size_t start = 0;
  while (start <= domain.size()) {
    size_t dot = domain.find('.', start);
    if (dot == std::string_view::npos) dot = domain.size();
    std::string_view label = domain.substr(start, dot - start);
    if (label.empty() || label.size() > 63) return false;
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    if (label.front() == '-' || label.back() == '-') return false;
    start = dot + 1;
  }
  return true;
}

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

}  // namespace

const char* ListStrategyName(ListStrategy strategy) {
  switch (strategy) {
    case ListStrategy::kCdiCri:
      return "cdi-cri";
    case ListStrategy::kCdiAnnotations:
      return "cdi-annotations";
    case ListStrategy::kDeviceSpecs:
      return "device-specs";
    case ListStrategy::kEnvvar:
      return "envvar";
  }
  return "cdi-cri";
}

Result<ListStrategy> ParseListStrategy(std::string_view name) {
  for (auto s : {ListStrategy::kCdiCri, ListStrategy::kCdiAnnotations, ListStrategy::kDeviceSpecs,
                 ListStrategy::kEnvvar}) {
    if (name == ListStrategyName(s)) return s;
  }
  return InvalidArgument("device list strategy \"" + Excerpt(name, 40) +
                         "\": want cdi-cri, cdi-annotations, device-specs or envvar");
}

const char* AllocationPolicyName(AllocationPolicy policy) {
  return policy == AllocationPolicy::kPacked ? "packed" : "distributed";
}

Result<AllocationPolicy> ParseAllocationPolicy(std::string_view name) {
  if (name == "distributed") return AllocationPolicy::kDistributed;
  if (name == "packed") return AllocationPolicy::kPacked;
  return InvalidArgument("allocation policy \"" + Excerpt(name, 40) +
                         "\": want distributed or packed");
}

std::string CheckResourceName(std::string_view name) {
  size_t slash = name.find('/');
  if (slash == std::string_view::npos) return "\"" + Excerpt(name, 80) + "\" has no domain/";
  std::string_view domain = name.substr(0, slash), local = name.substr(slash + 1);
  if (!ValidDnsSubdomain(domain)) {
    return "\"" + Excerpt(name, 80) + "\": domain is not a lowercase DNS subdomain";
  }
  if (local.empty() || local.size() > 63 || !IsAlnum(local.front()) || !IsAlnum(local.back()) ||
      std::any_of(local.begin(), local.end(),
                  [](char c) { return !IsAlnum(c) && c != '-' && c != '_' && c != '.'; })) {
    return "\"" + Excerpt(name, 80) +
           "\": name must be 1-63 characters of [A-Za-z0-9_.-], starting and ending "
           "alphanumeric";
  }
  if (domain == "kubernetes.io" || domain == "requests") {
    return "\"" + Excerpt(name, 80) + "\": domain is reserved";
  }
  return {};
}

namespace {

// The top level's scalars and lists of names: version, paths, strategies and policies.
Status ParseConfigScalars(const YAML::Node& root, Config* config) {
  if (root["version"]) {
    auto v = String(root["version"], "version");
    if (!v) return v.error();
    if (*v != "v1") return InvalidArgument("version: \"" + Excerpt(*v, 40) + "\": want v1");
  }
  for (auto [key, out] :
       {std::pair{"root", &config->root}, std::pair{"socketDir", &config->socket_dir},
        std::pair{"cdiDir", &config->cdi_dir}, std::pair{"leaseFile", &config->lease_file},
        std::pair{"annotationPlugin", &config->annotation_plugin}}) {
    if (!root[key]) continue;
    auto s = String(root[key], key);
    if (!s) return s.error();
    *out = *s;
  }
  if (root["writeCdiSpecs"]) {
    auto b = Bool(root["writeCdiSpecs"], "writeCdiSpecs");
    if (!b) return b.error();
    config->write_cdi_specs = *b;
  }
  if (root["deviceListStrategy"]) {
    auto names = StringList(root["deviceListStrategy"], "deviceListStrategy");
    if (!names) return names.error();
    auto strategies = Strategies(*names, "deviceListStrategy");
    if (!strategies) return strategies.error();
    config->device_list_strategy = *strategies;
  }
  if (root["allocationPolicy"]) {
    auto s = String(root["allocationPolicy"], "allocationPolicy");
    if (!s) return s.error();
    auto policy = ParseAllocationPolicy(*s);
    if (!policy) return policy.error().WithContext("allocationPolicy");
    config->allocation_policy = *policy;
  }
  if (root["migStrategy"]) {
    auto s = String(root["migStrategy"], "migStrategy");
    if (!s) return s.error();
    auto strategy = ParseMigStrategy(*s);
    if (!strategy) return strategy.error().WithContext("migStrategy");
    config->mig_strategy = *strategy;
  }
  return Ok();
}

// The top level's sections: naming rules, sharing, topology, health and gRPC threads.
Status ParseConfigSections(const YAML::Node& root, Config* config) {
  if (const auto list = root["resources"]) {
    if (!list.IsSequence()) return InvalidArgument("resources: want a list of naming rules");
    size_t i = 0;
    for (const auto& item : list) {
      NamingRule rule;
      if (auto s = ParseRule(item, "resources[" + std::to_string(i++) + "]", &rule); !s) {
        return s.error();
      }
      config->resources.push_back(std::move(rule));
    }
  }
  if (root["sharing"]) {
    if (auto s = ParseSharing(root["sharing"], "sharing", &config->sharing); !s) return s.error();
  }
  if (root["topology"]) {
    if (auto s = ParseTopology(root["topology"], "topology", &config->topology); !s) {
      return s.error();
    }
  }
  if (root["health"]) {
    if (auto s = ParseHealth(root["health"], "health", &config->health); !s) return s.error();
  }
  if (root["grpcThreads"]) {
    auto n = Integer(root["grpcThreads"], "grpcThreads", 1, 64);
    if (!n) return n.error();
    config->grpc_threads = static_cast<int>(*n);
  }
  return Ok();
}

}  // namespace

Result<Config> ParseConfig(std::string_view yaml) {
  auto loaded = LoadBoundedYaml(yaml);
  if (!loaded) return loaded.error().WithContext("config");
  const YAML::Node root = std::move(*loaded);
  Config config;
  if (root.IsNull()) return config;
  try {
    if (auto s = RejectUnknown(
            root, "",
            {"version", "root", "socketDir", "cdiDir", "writeCdiSpecs", "leaseFile",
             "deviceListStrategy", "annotationPlugin", "allocationPolicy", "migStrategy",
             "resources", "sharing", "topology", "health", "grpcThreads"});
        !s) {
      return s.error();
    }
    if (auto s = ParseConfigScalars(root, &config); !s) return s.error();
    if (auto s = ParseConfigSections(root, &config); !s) return s.error();
  } catch (const YAML::Exception& e) {
    return InvalidArgument("config: " + std::string(e.what()));
  }
  if (auto s = ValidateConfig(config); !s) return s.error();
  return config;
}

Status ApplyEnvironment(const std::map<std::string, std::string>& env, Config* config) {
  auto get = [&](const char* key) -> const std::string* {
    auto it = env.find(key);
    return it == env.end() ? nullptr : &it->second;
  };
  for (auto [key, out] : {std::pair{"TESSERA_DP_ROOT", &config->root},
                          std::pair{"TESSERA_DP_SOCKET_DIR", &config->socket_dir},
                          std::pair{"TESSERA_DP_CDI_DIR", &config->cdi_dir},
                          std::pair{"TESSERA_DP_LEASE_FILE", &config->lease_file}}) {
    if (const std::string* value = get(key); value && !value->empty()) *out = *value;
  }
  if (const std::string* value = get("TESSERA_DP_DEVICE_LIST_STRATEGY"); value && !value->empty()) {
    auto names = StringList(YAML::Node(*value), "TESSERA_DP_DEVICE_LIST_STRATEGY");
    if (!names) return names.error();
    auto strategies = Strategies(*names, "TESSERA_DP_DEVICE_LIST_STRATEGY");
    if (!strategies) return strategies.error();
    config->device_list_strategy = *strategies;
  }
  if (const std::string* value = get("TESSERA_DP_ALLOCATION_POLICY"); value && !value->empty()) {
    auto policy = ParseAllocationPolicy(*value);
    if (!policy) return policy.error().WithContext("TESSERA_DP_ALLOCATION_POLICY");
    config->allocation_policy = *policy;
  }
  if (const std::string* value = get("TESSERA_DP_MIG_STRATEGY"); value && !value->empty()) {
    auto strategy = ParseMigStrategy(*value);
    if (!strategy) return strategy.error().WithContext("TESSERA_DP_MIG_STRATEGY");
    config->mig_strategy = *strategy;
  }
  if (const std::string* value = get("TESSERA_DP_PARTITION_TABLE"); value) {
    config->topology.partition_table = *value;
  }
  if (const std::string* value = get("TESSERA_DP_NVML"); value && !value->empty()) {
    auto b = Bool(YAML::Node(*value), "TESSERA_DP_NVML");
    if (!b) return b.error();
    config->health.nvml = *b;
  }
  if (const std::string* value = get("TESSERA_DP_NVML_LIBRARY"); value && !value->empty()) {
    config->health.nvml_library = *value;
  }
  return ValidateConfig(*config);
}

Status ValidateConfig(const Config& config) {
  if (config.device_list_strategy.empty()) {
    return InvalidArgument("deviceListStrategy: at least one strategy is needed");
  }
  for (size_t i = 0; i < config.resources.size(); ++i) {
    const auto& rule = config.resources[i];
    std::string name = rule.name;
    // {model} is filled in per device; check the rest of the name with a stand-in.
    if (size_t at = name.find("{model}"); at != std::string::npos) name.replace(at, 7, "M");
    if (auto problem = CheckResourceName(name); !problem.empty()) {
      return InvalidArgument("resources[" + std::to_string(i) + "].name: " + problem);
    }
  }
  for (const auto& [kind, list] : {std::pair{"timeSlicing", &config.sharing.resources},
                                   std::pair{"mps", &config.sharing.mps.resources}}) {
    for (size_t i = 0; i < list->size(); ++i) {
      const auto& shared = (*list)[i];
      std::string where = std::string("sharing.") + kind + ".resources[" + std::to_string(i) + "]";
      if (shared.replicas < 2) return InvalidArgument(where + ".replicas: must be at least 2");
      if (auto problem = CheckResourceName(shared.name); !problem.empty()) {
        return InvalidArgument(where + ".name: " + problem);
      }
      if (!shared.rename.empty()) {
        if (auto problem = CheckResourceName(shared.rename); !problem.empty()) {
          return InvalidArgument(where + ".rename: " + problem);
        }
      }
    }
  }
  // One GPU cannot be time-sliced and behind an MPS daemon at once (NVIDIA's plugin refuses the
  // same, PR #507).
  for (const auto& mps : config.sharing.mps.resources) {
    for (const auto& ts : config.sharing.resources) {
      if (ts.name == mps.name)
        return InvalidArgument("sharing: " + mps.name +
                               " is shared by both timeSlicing and mps; choose one");
    }
  }
  if (config.annotation_plugin.empty() ||
      std::any_of(config.annotation_plugin.begin(), config.annotation_plugin.end(),
                  [](char c) { return !IsAlnum(c) && c != '-' && c != '.'; })) {
    return InvalidArgument("annotationPlugin: \"" + Excerpt(config.annotation_plugin, 60) +
                           "\": want [A-Za-z0-9.-]+");
  }
  return Ok();
}

}  // namespace tessera::deviceplugin
