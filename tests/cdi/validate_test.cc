#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cdi/bad_specs.h"
#include "cdi/cdi.h"

namespace tessera::cdi {
namespace {

namespace fs = std::filesystem;

TEST(SpecValidation, RejectsEveryBadSpecNamingTheField) {
  for (const auto& bad : testing::BadSpecs()) {
    auto problems = CheckSpecText(bad.text);
    ASSERT_FALSE(problems.empty()) << bad.name << " was accepted";
    bool named = false;
    for (const auto& problem : problems)
      named = named || problem.field == bad.field;
    EXPECT_TRUE(named) << bad.name << ": no problem names field " << bad.field
                       << "; first: " << FormatProblem(problems[0]);
  }
}

TEST(SpecValidation, ProblemLinesNameDeviceAndField) {
  std::string text = R"({"cdiVersion":"0.3.0","kind":"vendor.com/gpu","devices":[{"name":"gpu0",)"
                     R"("containerEdits":{"env":["FOO"]}}]})";
  auto problems = CheckSpecText(text);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(FormatProblem(problems[0]),
            "gpu0: containerEdits.env[0]: invalid environment variable \"FOO\" (want NAME=value)");
}

TEST(SpecValidation, AcceptsEveryFieldAtTheVersionThatIntroducedIt) {
  Spec spec;
  spec.version = "0.7.0";
  spec.kind = "vendor.com/gpu.v2";
  spec.annotations = {{"example.com/owner", "team"}};
  Device device;
  device.name = "0";
  device.annotations = {{"note", "x"}};
  auto& edits = device.container_edits;
  edits.env = {"A=1", "B="};
  edits.device_nodes.push_back({"/dev/x", "/host/dev/x", "c", 195, 1, 0666u, "rw", 0u, 44u});
  edits.mounts.push_back({"/host/lib", "/lib/x", {"ro", "bind"}, "bind"});
  edits.hooks.push_back({"createContainer", "/bin/hook", {"hook", "--x"}, {"K=V"}, 5});
  edits.intel_rdt = IntelRdt{"clos1", "L3:0=ff", "MB:0=50", true, false};
  edits.additional_gids = {44, 109};
  spec.devices.push_back(device);
  EXPECT_EQ(MinimumVersion(spec), "0.7.0");
  EXPECT_TRUE(ValidateSpec(spec).empty()) << FormatProblem(ValidateSpec(spec)[0]);
  // Round trip through both encodings keeps every field.
  auto from_json = ParseSpec(ToJson(spec));
  ASSERT_TRUE(from_json.problems.empty()) << FormatProblem(from_json.problems[0]);
  EXPECT_EQ(from_json.spec, spec);
  auto from_yaml = ParseSpec(ToYaml(spec));
  ASSERT_TRUE(from_yaml.problems.empty()) << FormatProblem(from_yaml.problems[0]) << "\n"
                                          << ToYaml(spec);
  EXPECT_EQ(from_yaml.spec, spec);
}

TEST(SpecVersion, PicksTheLowestVersionTheFieldsNeed) {
  Spec spec;
  spec.kind = "vendor.com/gpu";
  spec.devices.push_back({"gpu0", {}, {}});
  spec.devices[0].container_edits.device_nodes.push_back({"/dev/x"});
  EXPECT_EQ(MinimumVersion(spec), "0.3.0");
  spec.devices[0].container_edits.mounts.push_back({"/a", "/b", {}, "bind"});
  EXPECT_EQ(MinimumVersion(spec), "0.4.0");
  spec.devices.push_back({"1", {}, spec.devices[0].container_edits});
  EXPECT_EQ(MinimumVersion(spec), "0.5.0");
  spec.devices.pop_back();
  spec.container_edits.device_nodes.push_back({"/dev/y", "/host/dev/y"});
  EXPECT_EQ(MinimumVersion(spec), "0.5.0");
  spec.kind = "vendor.com/gpu.x";
  EXPECT_EQ(MinimumVersion(spec), "0.6.0");
  spec.kind = "vendor.com/gpu";
  spec.devices[0].annotations["a"] = "b";
  EXPECT_EQ(MinimumVersion(spec), "0.6.0");
  spec.container_edits.additional_gids = {5};
  EXPECT_EQ(MinimumVersion(spec), "0.7.0");
}

TEST(SpecNames, FollowTheReferenceSyntax) {
  EXPECT_EQ(CheckVendorName("nvidia.com"), "");
  EXPECT_EQ(CheckVendorName("a"), "");
  EXPECT_NE(CheckVendorName("_a"), "");
  EXPECT_EQ(CheckClassName("gpu"), "");
  EXPECT_NE(CheckClassName("gpu-"), "");
  EXPECT_EQ(CheckDeviceName("0"), "");
  EXPECT_EQ(CheckDeviceName("0000:18:00.0"), "");
  EXPECT_EQ(CheckDeviceName("GPU-4b7d6c1e-2f3a-11ee-be56-0242ac120002"), "");
  EXPECT_NE(CheckDeviceName("gpu 0"), "");
  EXPECT_NE(CheckKind("nvidia.com/gpu/x"), "");
}

TEST(SpecParser, TreatsYamlPlainNumbersAsStringsWhereStringsAreExpected) {
  auto parsed = ParseSpec(
      "cdiVersion: 0.5.0\nkind: vendor.com/gpu\ndevices:\n- name: 0\n  containerEdits:\n"
      "    deviceNodes:\n    - path: /dev/nvidia0\n      major: 195\n");
  ASSERT_TRUE(parsed.problems.empty()) << FormatProblem(parsed.problems[0]);
  EXPECT_EQ(parsed.spec.devices.at(0).name, "0");
  EXPECT_EQ(parsed.spec.devices[0].container_edits.device_nodes.at(0).major, 195);
}

TEST(SpecParser, RejectsNegativeAndFractionalNumbersForUnsignedFields) {
  auto parsed =
      ParseSpec(R"({"cdiVersion":"0.3.0","kind":"v.com/c","devices":[{"name":"a","containerEdits":)"
                R"({"deviceNodes":[{"path":"/dev/x","uid":-1,"gid":1.5}]}}]})");
  ASSERT_EQ(parsed.problems.size(), 2u);
  EXPECT_EQ(parsed.problems[0].field, "containerEdits.deviceNodes[0].uid");
  EXPECT_EQ(parsed.problems[1].field, "containerEdits.deviceNodes[0].gid");
}

TEST(SpecParser, RejectsInvalidUtf8ThatCouldNotBeWrittenBackUnchanged) {
  auto parsed = ParseSpec("cdiVersion: \"0.3.0\"\nkind: v.com/c\ndevices:\n- name: a\n"
                          "  containerEdits:\n    env: [\"A=\xd2\xd2\"]\n");
  ASSERT_EQ(parsed.problems.size(), 1u);
  EXPECT_NE(parsed.problems[0].message.find("invalid UTF-8"), std::string::npos);
}

class SpecDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-cdi-validate-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(SpecDirectory, ReportsADeviceDefinedInTwoFilesOfOneDirectory) {
  std::string device = R"({"name":"gpu0","containerEdits":{"deviceNodes":[{"path":"/dev/x"}]}})";
  Write("a.json", testing::DeviceNodeSpec("0.3.0", "vendor.com/gpu", device));
  Write("b.json", testing::DeviceNodeSpec("0.3.0", "vendor.com/gpu", device));
  Write("ignored.txt", "not a spec");
  auto problems = ValidatePaths({dir_.string()});
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(FormatFileProblem(problems[0]),
            (dir_ / "b.json").string() +
                ": gpu0: name: conflicting device vendor.com/gpu=gpu0 (also in " +
                (dir_ / "a.json").string() + ")");
  EXPECT_EQ(problems[1].file, (dir_ / "a.json").string());
}

TEST_F(SpecDirectory, SameDeviceInTwoDirectoriesIsNoConflict) {
  std::string device = R"({"name":"gpu0","containerEdits":{"deviceNodes":[{"path":"/dev/x"}]}})";
  fs::create_directories(dir_ / "etc");
  fs::create_directories(dir_ / "run");
  Write("etc/a.json", testing::DeviceNodeSpec("0.3.0", "vendor.com/gpu", device));
  Write("run/a.yaml",
        ToYaml(ParseSpec(testing::DeviceNodeSpec("0.3.0", "vendor.com/gpu", device)).spec));
  EXPECT_TRUE(ValidatePaths({(dir_ / "etc").string(), (dir_ / "run").string()}).empty());
}

TEST_F(SpecDirectory, ReportsAMissingPath) {
  auto problems = ValidatePaths({(dir_ / "absent.json").string()});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].problem.message.find("No such file"), std::string::npos);
}

TEST_F(SpecDirectory, WritesAtomicallyWithMode0644AndLeavesIdenticalContentAlone) {
  std::string path = (dir_ / "sub" / "vendor.com-gpu.json").string();
  auto first = WriteSpecFile(path, "{}\n");
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_TRUE(*first);
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  struct stat before, after;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  auto second = WriteSpecFile(path, "{}\n");
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(*second);
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // not replaced
  auto third = WriteSpecFile(path, "{\"x\":1}\n");
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(*third);
  // No temporary file is left next to it.
  size_t entries = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "sub")) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
}

}  // namespace
}  // namespace tessera::cdi
