// The CRI configs `tessera windows hyperv-gpu` prints are runtime.v1 messages: parsed here with the
// CRI API's own definitions (tests/windows/cri/runtime_v1_subset.proto, compiled with protoc) by
// protobuf's JSON parser in strict mode, which rejects any field the message does not define.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime_v1_subset.pb.h"
#include "windows/process.h"

namespace tessera::testing {
namespace {

const std::string kFixtures = std::string(TESSERA_FIXTURES_DIR) + "/windows/";

struct Fixture {
  const char* file;
  const char* gpu;
  const char* instance_id;  // what the container's device names
};
const Fixture kFixturesUnderTest[] = {
    {"ws2022-dda-t4.json", "1", "PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018"},
    {"ws2022-dda-rmrr.json", "1",
     "PCIP\\VEN_10DE&DEV_25B6&SUBSYS_157E10DE&REV_A1\\4&3A7D1E0&0&0010"},
    {"ws2022-no-acs.json", "0", "PCIP\\VEN_10DE&DEV_24B0&SUBSYS_14AD10DE&REV_A1\\4&11B1C58&0&0008"},
    {"ws2019-17763-dda.json", "1",
     "PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018"},
    {"ws2022-t4-not-dismounted.json", "1",
     "PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018"},
};

// The text of the here-string that the script pipes into `file`.
std::string HereString(const std::string& script, const std::string& file) {
  size_t end = script.find("'@ | Set-Content -Encoding ascii " + file);
  if (end == std::string::npos) return "";
  size_t start = script.rfind("@'\n", end);
  return start == std::string::npos ? "" : script.substr(start + 3, end - start - 3);
}

template <typename Message>
Message ParseStrictly(const std::string& json, const std::string& what) {
  Message message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // as strict as it gets: an unknown field is an error
  auto status = google::protobuf::util::JsonStringToMessage(json, &message, options);
  EXPECT_TRUE(status.ok()) << what << ": " << status.ToString() << "\n" << json;
  return message;
}

std::string Script(const Fixture& f) {
  ProcessResult r = RunProcess({TesseraBinary(), "windows", "hyperv-gpu", "--snapshot",
                                kFixtures + f.file, "--gpu", f.gpu, "--format", "crictl",
                                // Refused fixtures too: their chain, marked, is what is parsed.
                                "--force"});
  EXPECT_FALSE(r.out.empty()) << f.file << ": " << r.err;
  return r.out;
}

TEST(CriConfigs, EveryFixturesPodAndContainerParseAsRuntimeV1Messages) {
  for (const Fixture& f : kFixturesUnderTest) {
    std::string script = Script(f);
    std::string pod_json = HereString(script, "pod.json");
    std::string container_json = HereString(script, "container.json");
    ASSERT_FALSE(pod_json.empty()) << f.file << ":\n" << script;
    ASSERT_FALSE(container_json.empty()) << f.file << ":\n" << script;

    auto pod = ParseStrictly<runtime::v1::PodSandboxConfig>(pod_json, f.file);
    EXPECT_EQ(pod.metadata().name(), "tessera-hyperv-gpu") << f.file;
    EXPECT_EQ(pod.metadata().namespace_(), "default") << f.file;
    const auto& annotations = pod.annotations();
    ASSERT_EQ(annotations.count("io.microsoft.virtualmachine.fullyphysicallybacked"), 1u);
    EXPECT_EQ(annotations.at("io.microsoft.virtualmachine.fullyphysicallybacked"), "true");
    EXPECT_EQ(annotations.at("io.microsoft.virtualmachine.computetopology.memory.sizeinmb"),
              "4096");
    EXPECT_EQ(
        annotations.count("io.microsoft.virtualmachine.computetopology.memory.highmmiogapinmb"), 1u)
        << f.file;
    EXPECT_EQ(annotations.count("io.microsoft.virtualmachine.kerneldrivers"), 1u) << f.file;

    auto container = ParseStrictly<runtime::v1::ContainerConfig>(container_json, f.file);
    EXPECT_EQ(container.metadata().name(), "gpu");
    ASSERT_EQ(container.devices_size(), 1);
    EXPECT_EQ(container.devices(0).host_path(), std::string("vpci-instance-id://") + f.instance_id)
        << f.file;
    EXPECT_EQ(container.devices(0).container_path(), "");
    EXPECT_EQ(container.devices(0).permissions(), "");
    ASSERT_EQ(container.mounts_size(), 1);
    EXPECT_EQ(container.mounts(0).container_path(), "C:\\device-util.exe");
    EXPECT_EQ(container.mounts(0).host_path(),
              "C:\\Program Files\\containerd\\bin\\device-util.exe");
    EXPECT_TRUE(container.mounts(0).readonly());
    EXPECT_FALSE(container.image().image().empty());

    // The script runs them with the hypervisor runtime handler.
    EXPECT_NE(script.find("crictl runp --runtime 'runhcs-wcow-hypervisor' pod.json"),
              std::string::npos)
        << f.file;
  }
}

TEST(CriConfigs, TheJsonFormatCarriesTheSameMessages) {
  ProcessResult r =
      RunProcess({TesseraBinary(), "windows", "hyperv-gpu", "--snapshot",
                  kFixtures + "ws2022-dda-t4.json", "--gpu", "1", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Cut the two objects out of the document without reformatting them.
  auto object_at = [&](const std::string& key) {
    size_t start = r.out.find("\"" + key + "\": {");
    EXPECT_NE(start, std::string::npos) << key;
    start = r.out.find('{', start);
    int depth = 0;
    for (size_t i = start; i < r.out.size(); ++i) {
      if (r.out[i] == '{') ++depth;
      if (r.out[i] == '}' && --depth == 0) return r.out.substr(start, i - start + 1);
    }
    return std::string();
  };
  auto pod = ParseStrictly<runtime::v1::PodSandboxConfig>(object_at("pod_sandbox_config"), "pod");
  EXPECT_EQ(pod.annotations().size(), 6u);
  auto container =
      ParseStrictly<runtime::v1::ContainerConfig>(object_at("container_config"), "container");
  EXPECT_EQ(container.command_size(), 5);
}

TEST(CriConfigs, TheStrictParserRefusesWhatRuntimeV1DoesNotDefine) {
  // Proof that the check above can fail: one unknown field, one camelCase-only typo, one wrong
  // type.
  for (const char* bad :
       {R"({"metadata":{"name":"p"},"runtime_handler":"runhcs-wcow-hypervisor"})",
        R"({"metadata":{"name":"p","uidd":"x"}})", R"({"annotations":{"a":1}})"}) {
    runtime::v1::PodSandboxConfig pod;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    EXPECT_FALSE(google::protobuf::util::JsonStringToMessage(bad, &pod, options).ok()) << bad;
  }
  runtime::v1::ContainerConfig container;
  google::protobuf::util::JsonParseOptions options;
  EXPECT_FALSE(google::protobuf::util::JsonStringToMessage(
                   R"({"devices":[{"host_path":"x","idType":"vpci"}]})", &container, options)
                   .ok());
}

}  // namespace
}  // namespace tessera::testing
