// Cross-check with the CDI reference library (tests/tools/cdi-validate-go): it must load every
// spec tessera generates, and reject every spec `tessera cdi validate` rejects.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cdi/bad_specs.h"
#include "cdi/cdi.h"
#include "support/fixture_host.h"

namespace tessera::cdi {
namespace {

namespace fs = std::filesystem;
using tessera::testing::MaterializeHost;
using tessera::testing::RunCommand;
using tessera::testing::TempDir;
using tessera::testing::TesseraBinary;

// Materialising checks the fixture's hash (about 2 s); once per host per process is enough.
std::string Host(const std::string& name) {
  static std::map<std::string, std::string> roots;
  auto it = roots.find(name);
  if (it == roots.end()) it = roots.emplace(name, MaterializeHost(name)).first;
  return it->second;
}

struct Verdict {
  int status = 0;
  std::string output;
};

Verdict Reference(const std::string& path) {
  Verdict verdict;
  verdict.output =
      RunCommand(std::string(CDI_VALIDATE_GO) + " '" + path + "' 2>&1", &verdict.status);
  return verdict;
}

Verdict Tessera(const std::string& args) {
  Verdict verdict;
  verdict.output = RunCommand(TesseraBinary() + " " + args + " 2>&1", &verdict.status);
  return verdict;
}

TEST(ReferenceLibrary, RejectsEveryBadSpecThatTesseraRejects) {
  TempDir dir;
  for (const auto& bad : testing::BadSpecs()) {
    std::string file = dir.path() + "/" + bad.name + "." + bad.extension;
    std::ofstream(file) << bad.text;
    Verdict ours = Tessera("cdi validate '" + file + "'");
    EXPECT_EQ(ours.status, 1) << bad.name << ": " << ours.output;
    std::string device_field = ": " + bad.field + ": ";
    EXPECT_NE(ours.output.find(file + ": "), std::string::npos) << ours.output;
    EXPECT_NE(ours.output.find(device_field), std::string::npos)
        << bad.name << ": want field " << bad.field << " in: " << ours.output;
    Verdict reference = Reference(file);
    EXPECT_EQ(reference.status, 1)
        << bad.name << " accepted by the reference library: " << reference.output;
  }
}

TEST(ReferenceLibrary, ReportsTheSameCrossFileConflict) {
  TempDir dir;
  std::string device = R"({"name":"gpu0","containerEdits":{"deviceNodes":[{"path":"/dev/x"}]}})";
  std::ofstream(dir.path() + "/a.json")
      << testing::DeviceNodeSpec("0.3.0", "vendor.com/gpu", device);
  std::ofstream(dir.path() + "/b.json")
      << testing::DeviceNodeSpec("0.3.0", "vendor.com/gpu", device);
  Verdict reference = Reference(dir.path());
  EXPECT_EQ(reference.status, 1) << reference.output;
  EXPECT_NE(reference.output.find("conflicting device"), std::string::npos) << reference.output;
  Verdict ours = Tessera("cdi validate " + dir.path());
  EXPECT_EQ(ours.status, 1);
  EXPECT_NE(ours.output.find("gpu0: name: conflicting device vendor.com/gpu=gpu0"),
            std::string::npos)
      << ours.output;
  // Each file alone is fine for both.
  EXPECT_EQ(Reference(dir.path() + "/a.json").status, 0);
  EXPECT_EQ(Tessera("cdi validate " + dir.path() + "/a.json").status, 0);
}

struct Case {
  const char* host;
  const char* flags;
  size_t specs;  // files expected
};

TEST(ReferenceLibrary, LoadsEverySpecTesseraGenerates) {
  const Case cases[] = {
      {"hgx-h100-dgx", "", 1},
      {"hgx-h100-dgx", "--mode driver --format yaml", 1},
      {"hgx-h100-dgx", "--mode driver --kind tessera-test.example/gpu", 1},
      {"hgx-h100-vfio", "", 2},
      {"hgx-h100-vfio", "--mode vfio --format yaml", 2},
      {"hgx-h100-vfio", "--mode vfio --iommufd", 2},
      {"workstation-intel-nvidia", "", 2},
      {"workstation-intel-nvidia", "--mode dri", 2},
      {"workstation-intel-nvidia", "--mode driver --format yaml", 1},
      {"amd-gpu", "", 1},
      {"amd-gpu", "--mode dri --format yaml", 1},
      // MIG devices named "<gpu>:<mig>" (no NVML for a fixture root, so no MIG-<uuid> names).
      {"h100-mig-mixed", "", 1},
      {"a100-mig", "--mode driver --format yaml", 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.host) + " " + c.flags);
    TempDir out;
    std::string root = Host(c.host);
    Verdict generated =
        Tessera("cdi generate --root " + root + " --output-dir " + out.path() + " " + c.flags);
    ASSERT_EQ(generated.status, 0) << generated.output;
    size_t files = 0;
    for (const auto& entry : fs::directory_iterator(out.path())) {
      ++files;
      Verdict reference = Reference(entry.path().string());
      EXPECT_EQ(reference.status, 0) << reference.output;
      auto text = RunCommand("cat '" + entry.path().string() + "'");
      // Podman 4.3 (Debian 12) knows cdiVersion 0.5.0 at most.
      EXPECT_TRUE(text.find("\"0.5.0\"") != std::string::npos ||
                  text.find("\"0.3.0\"") != std::string::npos ||
                  text.find("\"0.4.0\"") != std::string::npos)
          << text.substr(0, 200);
    }
    EXPECT_EQ(files, c.specs);
    Verdict reference = Reference(out.path());
    EXPECT_EQ(reference.status, 0) << reference.output;
    Verdict ours = Tessera("cdi validate " + out.path());
    EXPECT_EQ(ours.status, 0) << ours.output;
  }
}

TEST(ReferenceLibrary, LoadsAHandWrittenSpecUsingEveryFieldUpTo050) {
  Spec spec;
  spec.version = "0.5.0";
  spec.kind = "tessera-test.example/all-fields";
  Device device;
  device.name = "0";
  device.container_edits.env = {"A=1"};
  device.container_edits.device_nodes.push_back(
      {"/dev/null", "/dev/null", "c", 1, 3, 0666u, "rw", 0u, 0u});
  device.container_edits.mounts.push_back({"/etc/hostname", "/etc/x", {"ro", "bind"}, "bind"});
  device.container_edits.hooks.push_back({"createContainer", "/bin/true", {"true"}, {"K=V"}, 5});
  spec.devices.push_back(device);
  spec.container_edits.env = {"B=2"};
  ASSERT_EQ(MinimumVersion(spec), "0.5.0");
  TempDir dir;
  for (Format format : {Format::kJson, Format::kYaml}) {
    std::string file = dir.path() + "/" + SpecFileName(spec, format);
    std::ofstream(file) << Serialize(spec, format);
    Verdict reference = Reference(file);
    EXPECT_EQ(reference.status, 0) << reference.output;
  }
}

}  // namespace
}  // namespace tessera::cdi
