// Pure rules: names, podman argv, entitlement parsing and resolution.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

using Args = std::vector<std::string>;

TEST(TenancyNames, AcceptsDnsLabels) {
  EXPECT_TRUE(ValidateTenancyName("a").ok());
  EXPECT_TRUE(ValidateTenancyName("team-42").ok());
  EXPECT_TRUE(ValidateTenancyName("9lives").ok());
  EXPECT_TRUE(ValidateTenancyName(std::string(kMaxTenancyNameLength, 'a')).ok());
}

TEST(TenancyNames, RefusesOthersNamingTheField) {
  for (const char* bad : {"", "A", "-a", "a-", "a_b", "a.b", "a b", "ä"}) {
    auto s = ValidateTenancyName(bad, "tenancy");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.error().category, ErrorCategory::kInvalidArgument);
    EXPECT_EQ(s.error().message.rfind("tenancy: ", 0), 0u) << s.error().message;
  }
  EXPECT_FALSE(ValidateTenancyName(std::string(kMaxTenancyNameLength + 1, 'a')).ok());
}

TEST(TenancyNetwork, IsAnInternalLabelledBridgePerTenancy) {
  EXPECT_EQ(NetworkName("blue"), "tessera-t-blue");
  EXPECT_EQ(NetworkCreateArgs("blue"),
            (Args{"network", "create", "--driver", "bridge", "--internal", "--label",
                  "io.tessera.tenancy=blue", "tessera-t-blue"}));
  EXPECT_EQ(NetworkRemoveArgs("blue"), (Args{"network", "rm", "tessera-t-blue"}));
}

TEST(TenancyNetwork, ContainersJoinOnlyTheirOwnNetworkOrNone) {
  EXPECT_EQ(ContainerNetworkArgs("blue", NetworkMode::kTenancy),
            (Args{"--network", "tessera-t-blue"}));
  EXPECT_EQ(ContainerNetworkArgs("blue", NetworkMode::kNone), (Args{"--network", "none"}));
}

TEST(TenancyNetwork, NetworkModeIsStrict) {
  EXPECT_EQ(*NetworkModeFromJson(nlohmann::json()), NetworkMode::kTenancy);
  EXPECT_EQ(*NetworkModeFromJson("none"), NetworkMode::kNone);
  EXPECT_EQ(*NetworkModeFromJson("tenancy"), NetworkMode::kTenancy);
  auto host = NetworkModeFromJson("host");
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.error().message.rfind("network: ", 0), 0u);
  EXPECT_FALSE(NetworkModeFromJson(1).ok());
}

TEST(TenancyNetwork, RemovedOnlyWhenDeletedAndEmpty) {
  EXPECT_EQ(CheckNetworkRemovable("a", false, 0).error().category,
            ErrorCategory::kFailedPrecondition);
  auto busy = CheckNetworkRemovable("a", true, 2);
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.error().message.find("2 container"), std::string::npos);
  EXPECT_TRUE(CheckNetworkRemovable("a", true, 0).ok());
}

TEST(TenancyNetwork, FirewallRulesDropOnlyRoutedTraffic) {
  auto rules = IsolationRules("cni-podman3", "blue");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0], (Args{"-i", "cni-podman3", "!", "-o", "cni-podman3", "-m", "comment",
                            "--comment", "tessera-t-blue", "-j", "DROP"}));
  EXPECT_EQ(rules[1], (Args{"-o", "cni-podman3", "!", "-i", "cni-podman3", "-m", "comment",
                            "--comment", "tessera-t-blue", "-j", "DROP"}));
}

TEST(TenancyNetwork, ParsesPodmanInspect) {
  auto info = ParseNetworkInspect(R"([{"name":"tessera-t-a","driver":"bridge",
    "network_interface":"cni-podman4","subnets":[{"subnet":"10.89.3.0/24"}],"internal":true,
    "labels":{"io.tessera.tenancy":"a"},"future_field":1}])");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->bridge, "cni-podman4");
  EXPECT_TRUE(info->internal);
  EXPECT_EQ(info->subnets, (Args{"10.89.3.0/24"}));
  EXPECT_EQ(info->labels.at("io.tessera.tenancy"), "a");
  EXPECT_EQ(ParseNetworkInspect("[]").error().category, ErrorCategory::kNotFound);
}

const char* kEntitlements = R"({"nfs":[
  {"name":"datasets","server":"10.0.0.5","path":"/exports/datasets","readOnly":true},
  {"name":"scratch","server":"nfs.example.com","path":"/scratch/a","port":20049}]})";

TEST(StorageEntitlements, ParsesAndRoundTrips) {
  auto parsed = ParseStorageEntitlements(kEntitlements);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  ASSERT_EQ(parsed->nfs.size(), 2u);
  EXPECT_EQ(parsed->nfs[0], (NfsExport{"datasets", "10.0.0.5", "/exports/datasets", 0, true}));
  EXPECT_EQ(parsed->nfs[1], (NfsExport{"scratch", "nfs.example.com", "/scratch/a", 20049, false}));
  auto again = ParseStorageEntitlements(StorageEntitlementsToJson(*parsed));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *parsed);
  EXPECT_TRUE(ParseStorageEntitlements(R"({"nfs":[]})")->nfs.empty());
}

void ExpectRefused(const std::string& body, const std::string& message_start) {
  auto parsed = ParseStorageEntitlements(body);
  ASSERT_FALSE(parsed.ok()) << body;
  EXPECT_EQ(parsed.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_EQ(parsed.error().message.rfind(message_start, 0), 0u)
      << body << " -> " << parsed.error().message;
}

TEST(StorageEntitlements, RefusesBadBodiesNamingTheField) {
  ExpectRefused("[]", "body:");
  ExpectRefused("{", "body: invalid JSON");
  ExpectRefused(R"({"nfs":[],"smb":[]})", "body.smb: unknown field");
  ExpectRefused(R"({"nfs":{}})", "nfs: expected a list");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s","path":"/p","extra":1}]})",
                "nfs[0].extra: unknown field");
  ExpectRefused(R"({"nfs":[{"server":"s","path":"/p"}]})", "nfs[0].name: missing");
  ExpectRefused(R"({"nfs":[{"name":"A","server":"s","path":"/p"}]})", "nfs[0].name:");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s,ro","path":"/p"}]})", "nfs[0].server:");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s","path":"p"}]})", "nfs[0].path:");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s","path":"/p/../q"}]})", "nfs[0].path:");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s","path":"/p,x"}]})", "nfs[0].path:");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s","path":"/p","readOnly":"yes"}]})",
                "nfs[0].readOnly: expected true or false");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s","path":"/p","port":0}]})", "nfs[0].port:");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s","path":"/p","port":70000}]})", "nfs[0].port:");
  ExpectRefused(R"({"nfs":[{"name":"a","server":"s","path":"/p"},
                           {"name":"a","server":"t","path":"/q"}]})",
                "nfs[1].name: \"a\" is listed twice");
  ExpectRefused(R"({"nfs":[],"nfs":[]})", "body: duplicate key \"nfs\"");
}

TEST(VolumeRequests, ParseStrictly) {
  auto parsed = ParseVolumeRequests(
      R"([{"name":"datasets","mountPath":"/data","readOnly":true},{"name":"scratch","mountPath":"/scratch"}])");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0], (VolumeRequest{"datasets", "/data", true}));
  EXPECT_EQ((*parsed)[1], (VolumeRequest{"scratch", "/scratch", std::nullopt}));

  auto unknown = ParseVolumeRequests(R"([{"name":"a","mountPath":"/a","driver":"x"}])");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message.rfind("volumes[0].driver: unknown field", 0), 0u);
  auto missing = ParseVolumeRequests(R"([{"name":"a"}])");
  EXPECT_EQ(missing.error().message, "volumes[0].mountPath: missing");
  EXPECT_FALSE(ParseVolumeRequests(R"({"name":"a"})").ok());
}

TEST(MountPaths, RefuseRelativeTraversalAndRuntimeOwnedPlaces) {
  EXPECT_TRUE(ValidateMountPath("/data").ok());
  EXPECT_TRUE(ValidateMountPath("/mnt/a/b").ok());
  EXPECT_TRUE(ValidateMountPath("/devices").ok());  // only /dev itself and below is refused
  for (const char* bad : {"", "data", "/", "/a/../etc", "/a/./b", "/a//b", "/a/", "/dev",
                          "/dev/shm", "/proc/self", "/sys", "/sys/fs/cgroup", "/a:b", "/a,ro"}) {
    auto s = ValidateMountPath(bad, "volumes[0].mountPath");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.error().message.rfind("volumes[0].mountPath: ", 0), 0u) << s.error().message;
  }
}

StorageEntitlements Blue() {
  return *ParseStorageEntitlements(kEntitlements);
}

TEST(ResolveVolumes, AllowsEntitledExports) {
  auto resolved = ResolveVolumes(
      "blue", Blue(), {{"scratch", "/scratch", std::nullopt}, {"datasets", "/data", std::nullopt}});
  ASSERT_TRUE(resolved.ok()) << resolved.error().message;
  ASSERT_EQ(resolved->size(), 2u);
  EXPECT_EQ((*resolved)[0].podman_volume, "tessera-t-blue.scratch");
  EXPECT_FALSE((*resolved)[0].read_only);
  EXPECT_TRUE((*resolved)[1].read_only);  // inherited from the export
  EXPECT_EQ(ContainerVolumeArgs(*resolved),
            (Args{"--mount", "type=volume,source=tessera-t-blue.scratch,target=/scratch", "--mount",
                  "type=volume,source=tessera-t-blue.datasets,target=/data,ro=true"}));
}

TEST(ResolveVolumes, ReadOnlyOnRequestIsHonoured) {
  auto resolved = ResolveVolumes("blue", Blue(), {{"scratch", "/scratch", true}});
  ASSERT_TRUE(resolved.ok());
  EXPECT_TRUE((*resolved)[0].read_only);
}

TEST(ResolveVolumes, WritingToAReadOnlyExportIsRefused) {
  auto refused = ResolveVolumes("blue", Blue(), {{"datasets", "/data", false}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kPermissionDenied);
  EXPECT_NE(refused.error().message.find("\"datasets\""), std::string::npos);
}

TEST(ResolveVolumes, ForeignAndUnknownVolumesAreRefusedNamingTheVolume) {
  StorageEntitlements green;
  green.nfs.push_back({"secrets", "10.0.0.9", "/exports/green", 0, false});
  // green's export, asked for from blue (by its name and by its podman volume name).
  for (const char* name : {"secrets", "tessera-t-green.secrets", "nothing"}) {
    auto refused = ResolveVolumes("blue", Blue(), {{name, "/s", std::nullopt}});
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_EQ(refused.error().category, ErrorCategory::kPermissionDenied);
    EXPECT_NE(refused.error().message.find(std::string("\"") + name + "\""), std::string::npos)
        << refused.error().message;
  }
  EXPECT_TRUE(ResolveVolumes("green", green, {{"secrets", "/s", std::nullopt}}).ok());
}

TEST(ResolveVolumes, OneMountPathPerVolume) {
  auto refused =
      ResolveVolumes("blue", Blue(), {{"scratch", "/x", std::nullopt}, {"datasets", "/x", true}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kInvalidArgument);
  EXPECT_EQ(refused.error().message.rfind("volumes[1].mountPath", 0), 0u);
}

TEST(NfsVolume, LocalDriverWithNfsOptions) {
  NfsExport ro{"datasets", "10.0.0.5", "/exports/datasets", 0, true};
  EXPECT_EQ(VolumeCreateArgs("blue", ro),
            (Args{"volume", "create", "--driver", "local", "--opt", "type=nfs", "--opt",
                  "o=addr=10.0.0.5,ro", "--opt", "device=10.0.0.5:/exports/datasets", "--label",
                  "io.tessera.tenancy=blue", "tessera-t-blue.datasets"}));
  NfsExport rw{"scratch", "fd00::5", "/s", 20049, false};
  EXPECT_EQ(NfsVolumeOptions(rw).at("o"), "addr=fd00::5,port=20049");
  EXPECT_EQ(NfsVolumeOptions(rw).at("device"), "[fd00::5]:/s");
  EXPECT_EQ(NfsUrl(rw, "f.txt"), "nfs://[fd00::5]/s/f.txt?version=4&nfsport=20049");
  EXPECT_EQ(NfsUrl(ro), "nfs://10.0.0.5/exports/datasets?version=4&nfsport=2049");
}

TEST(NfsVolume, ParsesPodmanInspect) {
  auto info = ParseVolumeInspect(R"([{"Name":"tessera-t-a.d","Driver":"local",
    "Options":{"device":":/p","o":"addr=1.2.3.4","type":"nfs"},"Labels":{"io.tessera.tenancy":"a"}}])");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->options.at("device"), ":/p");
  EXPECT_EQ(info->labels.at("io.tessera.tenancy"), "a");
}

}  // namespace
}  // namespace tessera::tenancy
