// deploy/dra: the manifests parse, mount what the plugin needs from the host, pass only flags
// the plugin has, grant what it calls, and the DeviceClasses select the attributes it publishes.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>

#include "support/fixture_host.h"

namespace tessera::dra {
namespace {

std::vector<YAML::Node> Load(const std::string& name) {
  return YAML::LoadAllFromFile(std::string(TESSERA_SOURCE_DIR) + "/deploy/dra/" + name);
}

TEST(DraManifests, DaemonSetMountsHostPathsAndPassesKnownFlags) {
  auto docs = Load("daemonset.yaml");
  ASSERT_EQ(docs.size(), 1u);
  const auto& pod = docs[0]["spec"]["template"]["spec"];
  EXPECT_EQ(pod["serviceAccountName"].as<std::string>(), "tessera-dra-plugin");
  std::set<std::string> host_paths;
  for (const auto& volume : pod["volumes"]) {
    if (volume["hostPath"]) host_paths.insert(volume["hostPath"]["path"].as<std::string>());
  }
  for (const char* path :
       {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.tessera.dev",
        "/var/run/cdi", "/dev", "/sys", "/run/tessera"}) {
    EXPECT_TRUE(host_paths.count(path)) << path;
  }
  std::string help =
      testing::RunCommand(std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-dra-plugin --help");
  for (const auto& arg : pod["containers"][0]["args"]) {
    std::string flag = arg.as<std::string>();
    flag = flag.substr(0, flag.find('='));
    EXPECT_NE(help.find(flag + " "), std::string::npos) << flag;
  }
  EXPECT_EQ(pod["containers"][0]["env"][0]["name"].as<std::string>(), "NODE_NAME");
}

TEST(DraManifests, RbacGrantsSlicesAndClaimReads) {
  std::map<std::string, std::set<std::string>> verbs;
  for (const auto& doc : Load("rbac.yaml")) {
    if (doc["kind"].as<std::string>() != "ClusterRole") continue;
    for (const auto& rule : doc["rules"]) {
      for (const auto& resource : rule["resources"]) {
        for (const auto& verb : rule["verbs"])
          verbs[resource.as<std::string>()].insert(verb.as<std::string>());
      }
    }
  }
  for (const char* verb : {"create", "update", "delete", "get", "list", "watch"}) {
    EXPECT_TRUE(verbs["resourceslices"].count(verb)) << verb;
  }
  EXPECT_TRUE(verbs["resourceclaims"].count("get"));
  EXPECT_TRUE(verbs["nodes"].count("get"));
}

TEST(DraManifests, DeviceClassesSelectOurDriverAndType) {
  std::map<std::string, std::string> expressions;
  for (const auto& doc : Load("deviceclasses.yaml")) {
    EXPECT_EQ(doc["apiVersion"].as<std::string>(), "resource.k8s.io/v1");
    expressions[doc["metadata"]["name"].as<std::string>()] =
        doc["spec"]["selectors"][0]["cel"]["expression"].as<std::string>();
  }
  EXPECT_EQ(
      expressions["gpu.tessera.dev"],
      R"(device.driver == "gpu.tessera.dev" && device.attributes["gpu.tessera.dev"].type == "gpu")");
  EXPECT_EQ(
      expressions["vfio.gpu.tessera.dev"],
      R"(device.driver == "gpu.tessera.dev" && device.attributes["gpu.tessera.dev"].type == "vfio")");
}

}  // namespace
}  // namespace tessera::dra
