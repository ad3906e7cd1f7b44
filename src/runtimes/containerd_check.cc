// Checks of a containerd config.toml (parsed with toml++). Config version 2 keeps the CRI
// plugin at plugins."io.containerd.grpc.v1.cri"; version 3 (containerd 2.x) at
// plugins."io.containerd.cri.v1.runtime". Both are read.
#include <toml++/toml.h>

#include <sstream>

#include "common/toml_text.h"
#include "runtimes/check_builder.h"
#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

std::string Basename(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string StringAt(const toml::table* table, std::string_view key) {
  if (!table) return "";
  if (auto value = (*table)[key].value<std::string>()) return *value;
  return "";
}

std::vector<std::string> StringsAt(const toml::table* table, std::string_view key) {
  std::vector<std::string> out;
  if (!table) return out;
  if (auto* array = (*table)[key].as_array()) {
    for (auto& item : *array) {
      if (auto s = item.value<std::string>()) out.push_back(*s);
    }
  }
  return out;
}

std::optional<Runtime> KindOfType(const std::string& runtime_type) {
  if (runtime_type.find("runsc") != std::string::npos) return Runtime::kGvisor;
  if (runtime_type.find("kata") != std::string::npos) return Runtime::kKata;
  if (runtime_type.find("runc") != std::string::npos) return Runtime::kRunc;
  return std::nullopt;
}

// What the options say the runtime really runs.
std::optional<Runtime> KindOfBinary(const ContainerdRuntime& runtime) {
  std::string binary = Basename(runtime.binary_name);
  if (binary.find("runsc") != std::string::npos) return Runtime::kGvisor;
  if (binary.find("kata") != std::string::npos) return Runtime::kKata;
  if (binary.find("runc") != std::string::npos || binary == "crun") return Runtime::kRunc;
  if (runtime.type_url.find("runsc") != std::string::npos) return Runtime::kGvisor;
  if (runtime.config_path.find("runsc") != std::string::npos) return Runtime::kGvisor;
  if (runtime.config_path.find("kata") != std::string::npos) return Runtime::kKata;
  return std::nullopt;
}

const char* ExpectedType(Runtime kind) {
  switch (kind) {
    case Runtime::kRunc:
      return "io.containerd.runc.v2";
    case Runtime::kGvisor:
      return "io.containerd.runsc.v1";
    case Runtime::kKata:
      return "io.containerd.kata-qemu-nvidia-gpu.v2";
  }
  return "";
}

ContainerdConfigFacts ExtractFacts(const toml::table& root) {
  ContainerdConfigFacts facts;
  if (auto version = root["version"].value<int64_t>()) facts.config_version = int(*version);
  const toml::table* cri = nullptr;
  if (auto* plugins = root["plugins"].as_table()) {
    for (const char* name : {"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"}) {
      if (auto* table = (*plugins)[name].as_table()) {
        cri = table;
        break;
      }
    }
  }
  if (!cri) return facts;
  if (auto enable = (*cri)["enable_cdi"].value<bool>()) facts.enable_cdi = *enable;
  facts.cdi_spec_dirs = StringsAt(cri, "cdi_spec_dirs");
  auto* runtimes = (*cri)["containerd"]["runtimes"].as_table();
  if (!runtimes) return facts;
  for (auto& [key, node] : *runtimes) {
    auto* table = node.as_table();
    if (!table) continue;
    ContainerdRuntime runtime;
    runtime.name = std::string(key.str());
    runtime.runtime_type = StringAt(table, "runtime_type");
    runtime.pod_annotations = StringsAt(table, "pod_annotations");
    auto* options = (*table)["options"].as_table();
    runtime.binary_name = StringAt(options, "BinaryName");
    runtime.type_url = StringAt(options, "TypeUrl");
    runtime.config_path = StringAt(options, "ConfigPath");
    facts.runtimes.push_back(std::move(runtime));
  }
  return facts;
}

using checks::Make;

void CheckRuntimeTypes(const ContainerdConfigFacts& facts, std::vector<Check>& out) {
  for (const auto& runtime : facts.runtimes) {
    std::string id = "containerd.runtime_type." + runtime.name;
    std::string title = "runtime \"" + runtime.name + "\": shim type matches the binary it runs";
    auto declared = KindOfType(runtime.runtime_type);
    auto actual = KindOfBinary(runtime);
    std::string evidence = "runtime_type = \"" + runtime.runtime_type + "\"";
    if (!runtime.binary_name.empty()) evidence += ", BinaryName = \"" + runtime.binary_name + "\"";
    if (!runtime.type_url.empty()) evidence += ", TypeUrl = \"" + runtime.type_url + "\"";
    if (!runtime.config_path.empty()) evidence += ", ConfigPath = \"" + runtime.config_path + "\"";
    if (runtime.runtime_type.empty()) {
      out.push_back(Make(id, title, Verdict::kWarn, evidence,
                         "set runtime_type explicitly (containerd falls back to its default "
                         "runtime)"));
    } else if (declared && actual && *declared != *actual) {
      std::string fix = std::string("set runtime_type = \"") + ExpectedType(*actual) + "\"";
      if (*declared == Runtime::kRunc && *actual == Runtime::kGvisor)
        evidence += ": the runc shim drives runsc, containers hang on start";
      out.push_back(Make(id, title, Verdict::kFail, evidence, fix));
    } else {
      out.push_back(Make(id, title, Verdict::kPass, evidence));
    }
  }
}

bool NvproxyEnabled(const std::string& runsc_toml, std::string& evidence) {
  toml::table table;
  try {
    table = toml::parse(AsciiForToml(runsc_toml));
  } catch (const toml::parse_error& error) {
    std::ostringstream s;
    s << "does not parse: " << error.description() << " at line " << error.source().begin.line;
    evidence = s.str();
    return false;
  }
  auto node = table["runsc_config"]["nvproxy"];
  if (auto text = node.value<std::string>()) {
    evidence = "[runsc_config] nvproxy = \"" + *text + "\"";
    return *text == "true";
  }
  if (auto flag = node.value<bool>()) {
    evidence = std::string("[runsc_config] nvproxy = ") + (*flag ? "true" : "false");
    return *flag;
  }
  evidence = "no [runsc_config] nvproxy";
  return false;
}

void CheckNvproxy(const ContainerdConfigFacts& facts, const FileReader& read_file,
                  std::vector<Check>& out) {
  for (const auto& runtime : facts.runtimes) {
    if (KindOf(runtime) != Runtime::kGvisor) continue;
    std::string id = "gvisor.nvproxy." + runtime.name;
    std::string title = "runtime \"" + runtime.name + "\": runsc runs with nvproxy";
    const std::string fix =
        "point options.ConfigPath at a runsc.toml with [runsc_config] "
        "nvproxy = \"true\" (tessera runtime-config runsc-toml)";
    if (runtime.config_path.empty()) {
      out.push_back(Make(id, title, Verdict::kFail,
                         "no options.ConfigPath: runsc starts without nvproxy and GPU "
                         "containers see no device",
                         fix));
      continue;
    }
    std::optional<std::string> text = read_file ? read_file(runtime.config_path) : std::nullopt;
    if (!text) {
      out.push_back(Make(id, title, Verdict::kFail, runtime.config_path + ": not found", fix));
      continue;
    }
    std::string evidence;
    bool enabled = NvproxyEnabled(*text, evidence);
    out.push_back(Make(id, title, enabled ? Verdict::kPass : Verdict::kFail,
                       runtime.config_path + ": " + evidence, enabled ? "" : fix));
  }
}

void CheckCdi(const ContainerdCheckInput& input, const ContainerdConfigFacts& facts,
              std::vector<Check>& out) {
  const std::string id = "containerd.cdi";
  const std::string title = "containerd injects CDI devices";
  std::string evidence =
      "enable_cdi = " +
      std::string(facts.enable_cdi ? (*facts.enable_cdi ? "true" : "false") : "(unset)");
  if (!facts.cdi_spec_dirs.empty()) {
    evidence += ", cdi_spec_dirs = [";
    for (size_t i = 0; i < facts.cdi_spec_dirs.size(); ++i)
      evidence += (i ? ", " : "") + facts.cdi_spec_dirs[i];
    evidence += "]";
  }
  const bool cdi_expected =
      facts.enable_cdi.value_or(false) || !facts.cdi_spec_dirs.empty() || input.cdi_specs_present;
  static const Version k17{{1, 7}};
  static const Version k20{{2, 0}};
  const std::string enable_fix =
      "set enable_cdi = true and cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"] in the CRI "
      "plugin table, then restart containerd";
  if (input.containerd_version) {
    const Version& v = *input.containerd_version;
    evidence = "containerd " + v.ToString() + ", " + evidence;
    if (v.Compare(k17) < 0) {
      if (cdi_expected) {
        out.push_back(Make(id, title, Verdict::kFail,
                           evidence + "; CDI needs containerd >= 1.7 (device-plugin CDI "
                                      "devices are ignored)",
                           "upgrade containerd to 1.7 or later, or have the device plugin "
                           "return device specs instead of CDI names"));
      } else {
        out.push_back(Make(id, title, Verdict::kWarn,
                           evidence + "; containerd < 1.7 cannot use CDI",
                           "upgrade containerd to 1.7 or later"));
      }
      return;
    }
    if (v.Compare(k20) < 0 && !facts.enable_cdi.value_or(false)) {
      out.push_back(Make(id, title, Verdict::kFail,
                         evidence + "; containerd 1.7 ignores CDI devices unless enable_cdi",
                         enable_fix));
      return;
    }
    if (facts.enable_cdi && !*facts.enable_cdi) {
      out.push_back(Make(id, title, Verdict::kFail, evidence + "; CDI switched off", enable_fix));
      return;
    }
    out.push_back(Make(id, title, Verdict::kPass, evidence));
    return;
  }
  // Version unknown: config version 3 is containerd 2.x (CDI on by default).
  if (facts.config_version >= 3 ? (facts.enable_cdi && !*facts.enable_cdi)
                                : !facts.enable_cdi.value_or(false)) {
    out.push_back(Make(id, title, Verdict::kWarn,
                       evidence + " (containerd version unknown; config version " +
                           std::to_string(facts.config_version) + ")",
                       enable_fix));
    return;
  }
  out.push_back(Make(id, title, Verdict::kPass, evidence));
}

void CheckKata(const ContainerdConfigFacts& facts, std::vector<Check>& out) {
  for (const auto& runtime : facts.runtimes) {
    if (KindOf(runtime) != Runtime::kKata) continue;
    std::string id = "kata.pod_annotations." + runtime.name;
    std::string title = "runtime \"" + runtime.name + "\": Kata receives its pod annotations";
    bool passes = false;
    for (const auto& a : runtime.pod_annotations) {
      if (a == "io.katacontainers.*") passes = true;
    }
    std::string evidence = "pod_annotations = [";
    for (size_t i = 0; i < runtime.pod_annotations.size(); ++i)
      evidence += (i ? ", " : "") + runtime.pod_annotations[i];
    evidence += "]";
    out.push_back(Make(id, title, passes ? Verdict::kPass : Verdict::kWarn, evidence,
                       passes ? ""
                              : "add pod_annotations = [\"io.katacontainers.*\"] (VM "
                                "size and GPU count annotations are dropped otherwise)"));
  }
}

}  // namespace

bool ContainerdConfigFacts::HasRuntimeOfKind(Runtime kind) const {
  for (const auto& runtime : runtimes) {
    if (KindOf(runtime) == kind) return true;
  }
  return false;
}

std::optional<Runtime> KindOf(const ContainerdRuntime& runtime) {
  if (auto actual = KindOfBinary(runtime)) return actual;
  return KindOfType(runtime.runtime_type);
}

ContainerdCheckResult CheckContainerdConfig(const ContainerdCheckInput& input) {
  ContainerdCheckResult result;
  toml::table root;
  try {
    root = toml::parse(AsciiForToml(input.config_text), std::string_view(input.config_path));
  } catch (const toml::parse_error& error) {
    std::ostringstream evidence;
    evidence << input.config_path << ":" << error.source().begin.line << ":"
             << error.source().begin.column << ": " << error.description();
    result.checks.push_back(Make("containerd.config", "containerd config parses", Verdict::kFail,
                                 evidence.str(), "fix the TOML syntax; containerd will not start"));
    return result;
  }
  ContainerdConfigFacts facts = ExtractFacts(root);
  result.checks.push_back(Make("containerd.config", "containerd config parses", Verdict::kPass,
                               input.config_path + ": version " +
                                   std::to_string(facts.config_version) + ", " +
                                   std::to_string(facts.runtimes.size()) + " runtime(s)"));
  CheckRuntimeTypes(facts, result.checks);
  CheckNvproxy(facts, input.read_file, result.checks);
  CheckCdi(input, facts, result.checks);
  CheckKata(facts, result.checks);
  result.facts = std::move(facts);
  return result;
}

}  // namespace tessera::runtimes
