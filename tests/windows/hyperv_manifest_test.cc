// deploy/device-plugin/windows-hyperv.yaml says what `tessera windows hyperv-gpu` generates: the
// example Pod's annotations, image and runtime class are the generator's output for the fixture
// host it names, and its resource is the one the device plugin serves with --windows-isolation
// hyperv. (The objects' schemas are checked by k8s_schema_test.)
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "windows/process.h"

namespace tessera::testing {
namespace {

TEST(HyperVManifest, ExamplePodCarriesWhatTheGeneratorPrints) {
  std::vector<YAML::Node> docs = YAML::LoadAllFromFile(std::string(TESSERA_SOURCE_DIR) +
                                                       "/deploy/device-plugin/windows-hyperv.yaml");
  YAML::Node runtime_class, pod;
  for (const YAML::Node& d : docs) {
    if (d["kind"].as<std::string>() == "RuntimeClass") runtime_class = d;
    if (d["kind"].as<std::string>() == "Pod") pod = d;
  }
  ASSERT_TRUE(runtime_class && pod);

  ProcessResult r = RunProcess({TesseraBinary(), "windows", "hyperv-gpu", "--snapshot",
                                std::string(TESSERA_FIXTURES_DIR) + "/windows/ws2022-dda-t4.json",
                                "--gpu", "1", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json generated = nlohmann::json::parse(r.out);

  std::map<std::string, std::string> annotations;
  for (const auto& a : pod["metadata"]["annotations"])
    annotations[a.first.as<std::string>()] = a.second.as<std::string>();
  EXPECT_EQ(annotations, generated["pod_annotations"].get<decltype(annotations)>());
  EXPECT_EQ(runtime_class["handler"].as<std::string>(),
            generated["runtime_handler"].get<std::string>());
  EXPECT_EQ(pod["spec"]["runtimeClassName"].as<std::string>(),
            runtime_class["metadata"]["name"].as<std::string>());
  const YAML::Node& container = pod["spec"]["containers"][0];
  EXPECT_EQ(container["image"].as<std::string>(), generated["image"].get<std::string>());
  EXPECT_EQ(container["resources"]["limits"]["tessera.dev/hyperv-gpu"].as<int>(), 1);
}

}  // namespace
}  // namespace tessera::testing
