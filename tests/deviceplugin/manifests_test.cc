// deploy/device-plugin: the manifests parse, mount what the plugin needs from the host, and the
// config they ship is one the plugin accepts.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>

#include "deviceplugin/deviceplugin.h"

namespace tessera::deviceplugin {
namespace {

std::vector<YAML::Node> Load(const std::string& name) {
  return YAML::LoadAllFromFile(std::string(TESSERA_SOURCE_DIR) + "/deploy/device-plugin/" + name);
}

TEST(Manifests, DaemonSetMountsHostPathsAndShipsAValidConfig) {
  auto docs = Load("daemonset.yaml");
  YAML::Node daemonset, configmap;
  for (const auto& doc : docs) {
    if (doc["kind"].as<std::string>() == "DaemonSet") daemonset = doc;
    if (doc["kind"].as<std::string>() == "ConfigMap") configmap = doc;
  }
  ASSERT_TRUE(daemonset && configmap);
  std::set<std::string> host_paths;
  for (const auto& volume : daemonset["spec"]["template"]["spec"]["volumes"]) {
    if (volume["hostPath"]) host_paths.insert(volume["hostPath"]["path"].as<std::string>());
  }
  for (const char* path : {"/var/lib/kubelet/device-plugins", "/var/run/cdi", "/dev", "/sys"}) {
    EXPECT_TRUE(host_paths.count(path)) << path;
  }
  const auto& pod = daemonset["spec"]["template"]["spec"];
  EXPECT_EQ(pod["serviceAccountName"].as<std::string>(), "tessera-device-plugin");
  auto config = ParseConfig(configmap["data"]["config.yaml"].as<std::string>());
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_FALSE(config->write_cdi_specs);
}

TEST(Manifests, RbacBindsTheServiceAccount) {
  std::set<std::string> kinds;
  for (const auto& doc : Load("rbac.yaml")) {
    kinds.insert(doc["kind"].as<std::string>());
    if (doc["kind"].as<std::string>() == "ClusterRoleBinding") {
      EXPECT_EQ(doc["subjects"][0]["name"].as<std::string>(), "tessera-device-plugin");
      EXPECT_EQ(doc["subjects"][0]["namespace"].as<std::string>(), "tessera-system");
    }
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"Namespace", "ServiceAccount", "ClusterRole",
                                          "ClusterRoleBinding"}));
}

}  // namespace
}  // namespace tessera::deviceplugin
