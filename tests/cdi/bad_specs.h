// Specs that break one CDI rule each. `tessera cdi validate` and the CDI reference library must
// both reject every one of them (tests/cdi/validate_test.cc, reference_library_test.cc).
#pragma once

#include <string>
#include <vector>

namespace tessera::cdi::testing {

struct BadSpec {
  std::string name;       // test label and file stem
  std::string extension;  // "json" or "yaml"
  std::string text;
  std::string field;  // the field tessera names in its problem line
};

inline std::string DeviceNodeSpec(const std::string& version, const std::string& kind,
                                  const std::string& device_json) {
  return R"({"cdiVersion":")" + version + R"(","kind":")" + kind + R"(","devices":[)" +
         device_json + "]}";
}

inline const std::vector<BadSpec>& BadSpecs() {
  static const std::string kNode = R"({"deviceNodes":[{"path":"/dev/card0"}]})";
  auto device = [&](const std::string& name) {
    return R"({"name":")" + name + R"(","containerEdits":)" + kNode + "}";
  };
  auto spec = [&](const std::string& kind, const std::string& name) {
    return DeviceNodeSpec("0.3.0", kind, device(name));
  };
  auto edits = [](const std::string& version, const std::string& edits_json) {
    return R"({"cdiVersion":")" + version +
           R"(","kind":"vendor.com/gpu","devices":[{"name":"gpu0","containerEdits":)" + edits_json +
           "}]}";
  };
  static const std::vector<BadSpec> specs = {
      {"vendor-starts-with-digit", "json", spec("1vendor.com/gpu", "gpu0"), "kind"},
      {"vendor-bad-character", "json", spec("ven+dor.com/gpu", "gpu0"), "kind"},
      {"vendor-ends-with-dot", "json", spec("vendor./gpu", "gpu0"), "kind"},
      {"class-bad-character", "json", spec("vendor.com/g+pu", "gpu0"), "kind"},
      {"class-starts-with-digit", "json", spec("vendor.com/0gpu", "gpu0"), "kind"},
      {"kind-without-class", "json", spec("vendor.com", "gpu0"), "kind"},
      {"device-name-starts-with-dash", "json", spec("vendor.com/gpu", "-gpu0"), "name"},
      {"device-name-bad-character", "json", spec("vendor.com/gpu", "gpu/0"), "name"},
      {"device-name-ends-with-colon", "json", spec("vendor.com/gpu", "gpu0:"), "name"},
      {"device-name-empty", "json", spec("vendor.com/gpu", ""), "name"},
      {"duplicate-device", "json",
       DeviceNodeSpec("0.3.0", "vendor.com/gpu", device("gpu0") + "," + device("gpu0")), "name"},
      {"empty-device-edits", "json",
       DeviceNodeSpec("0.3.0", "vendor.com/gpu", R"({"name":"gpu0","containerEdits":{}})"),
       "containerEdits"},
      {"env-without-equals", "json", edits("0.3.0", R"({"env":["FOO"]})"), "containerEdits.env[0]"},
      {"env-empty-name", "json", edits("0.3.0", R"({"env":["=bar"]})"), "containerEdits.env[0]"},
      {"device-node-empty-path", "json",
       edits("0.3.0", R"({"deviceNodes":[{"path":"","type":"c"}]})"),
       "containerEdits.deviceNodes[0].path"},
      {"device-node-bad-type", "json",
       edits("0.3.0", R"({"deviceNodes":[{"path":"/dev/x","type":"x"}]})"),
       "containerEdits.deviceNodes[0].type"},
      {"device-node-bad-permissions", "json",
       edits("0.3.0", R"({"deviceNodes":[{"path":"/dev/x","permissions":"rwx"}]})"),
       "containerEdits.deviceNodes[0].permissions"},
      {"mount-empty-host-path", "json",
       edits("0.3.0", R"({"mounts":[{"hostPath":"","containerPath":"/x"}]})"),
       "containerEdits.mounts[0].hostPath"},
      {"mount-empty-container-path", "json",
       edits("0.3.0", R"({"mounts":[{"hostPath":"/x","containerPath":""}]})"),
       "containerEdits.mounts[0].containerPath"},
      {"hook-bad-name", "json",
       edits("0.3.0", R"({"hooks":[{"hookName":"preStart","path":"/bin/true"}]})"),
       "containerEdits.hooks[0].hookName"},
      {"hook-empty-path", "json",
       edits("0.3.0", R"({"hooks":[{"hookName":"prestart","path":""}]})"),
       "containerEdits.hooks[0].path"},
      {"hook-env-without-equals", "json",
       edits("0.3.0", R"({"hooks":[{"hookName":"prestart","path":"/bin/true","env":["X"]}]})"),
       "containerEdits.hooks[0].env[0]"},
      {"spec-env-without-equals", "json",
       R"({"cdiVersion":"0.3.0","kind":"vendor.com/gpu","devices":[{"name":"gpu0","containerEdits":)" +
           kNode + R"(}],"containerEdits":{"env":["NOPE"]}})",
       "containerEdits.env[0]"},
      {"unknown-version", "json", DeviceNodeSpec("0.0.9", "vendor.com/gpu", device("gpu0")),
       "cdiVersion"},
      {"missing-version", "json", R"({"kind":"vendor.com/gpu","devices":[)" + device("gpu0") + "]}",
       "cdiVersion"},
      {"host-path-needs-0.5.0", "json",
       edits("0.4.0", R"({"deviceNodes":[{"path":"/dev/x","hostPath":"/host/dev/x"}]})"),
       "cdiVersion"},
      {"mount-type-needs-0.4.0", "json",
       edits("0.3.0", R"({"mounts":[{"hostPath":"/x","containerPath":"/x","type":"bind"}]})"),
       "cdiVersion"},
      {"digit-name-needs-0.5.0", "json", DeviceNodeSpec("0.4.0", "vendor.com/gpu", device("0")),
       "cdiVersion"},
      {"annotations-need-0.6.0", "json",
       R"({"cdiVersion":"0.5.0","kind":"vendor.com/gpu","annotations":{"a":"b"},"devices":[)" +
           device("gpu0") + "]}",
       "cdiVersion"},
      {"dot-in-class-needs-0.6.0", "json",
       DeviceNodeSpec("0.5.0", "vendor.com/g.pu", device("gpu0")), "cdiVersion"},
      {"additional-gids-need-0.7.0", "json",
       edits("0.5.0", R"({"deviceNodes":[{"path":"/dev/x"}],"additionalGids":[44]})"),
       "cdiVersion"},
      {"unknown-top-level-field", "json",
       R"({"cdiVersion":"0.3.0","kind":"vendor.com/gpu","device":[],"devices":[)" + device("gpu0") +
           "]}",
       "device"},
      {"unknown-device-node-field", "json",
       edits("0.3.0", R"({"deviceNodes":[{"path":"/dev/x","hostpath":"/dev/x"}]})"),
       "containerEdits.deviceNodes[0].hostpath"},
      {"unknown-edits-field", "json", edits("0.3.0", R"({"devices":[{"path":"/dev/x"}]})"),
       "containerEdits.devices"},
      {"major-as-string", "json",
       edits("0.3.0", R"({"deviceNodes":[{"path":"/dev/x","type":"c","major":"195"}]})"),
       "containerEdits.deviceNodes[0].major"},
      {"env-not-a-list", "json", edits("0.3.0", R"({"env":"A=B"})"), "containerEdits.env"},
      {"missing-devices", "json", R"({"cdiVersion":"0.3.0","kind":"vendor.com/gpu"})", "devices"},
      {"duplicate-json-key", "json",
       R"({"cdiVersion":"0.3.0","kind":"vendor.com/gpu","kind":"vendor.com/gpu","devices":[)" +
           device("gpu0") + "]}",
       "-"},
      {"not-json", "json", R"({"cdiVersion":"0.3.0",)", "-"},
      {"yaml-unknown-field", "yaml",
       "cdiVersion: \"0.3.0\"\nkind: vendor.com/gpu\ndevices:\n- name: gpu0\n  containerEdits:\n"
       "    deviceNodes:\n    - path: /dev/x\n      color: blue\n",
       "containerEdits.deviceNodes[0].color"},
      {"yaml-empty-edits", "yaml",
       "cdiVersion: \"0.3.0\"\nkind: vendor.com/gpu\ndevices:\n- name: gpu0\n  containerEdits: "
       "{}\n",
       "containerEdits"},
  };
  return specs;
}

}  // namespace tessera::cdi::testing
