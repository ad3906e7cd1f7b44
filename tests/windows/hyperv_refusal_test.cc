// `tessera windows hyperv-gpu` on a GPU its own preflight refuses: nothing runnable is printed
// unless --force asks for it, marked; refusals show snapshot text only as printable excerpts; and
// legacy PCI Express endpoints are judged as Microsoft's DDA survey judges them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "windows/process.h"

namespace tessera::testing {
namespace {

const std::string kFixtures = std::string(TESSERA_FIXTURES_DIR) + "/windows";

ProcessResult Windows(std::vector<std::string> args) {
  args.insert(args.begin(), {TesseraBinary(), "windows"});
  return RunProcess(args);
}

// Only printable ASCII and line ends: no terminal escape, no carriage return, no other control.
bool Printable(const std::string& text) {
  for (unsigned char c : text)
    if ((c < 0x20 && c != '\n') || c >= 0x7f) return false;
  return true;
}

TEST(HyperVRefusal, ARefusedGpuGetsTheVerdictAndTheFixesOnly) {
  for (const char* format : {"crictl", "oci", "hcs", "json"}) {
    ProcessResult r = Windows({"hyperv-gpu", "--snapshot", kFixtures + "/ws2022-no-acs.json",
                               "--gpu", "0", "--format", format});
    EXPECT_EQ(r.exit_code, 1) << format;
    EXPECT_EQ(r.out, "") << format << ": something to save and run was printed";
    EXPECT_NE(r.err.find("FAIL device.acs: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("; fix: enable ACS in the firmware setup"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tessera: refused: 2 of "), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Dismount-VMHostAssignableDevice"), std::string::npos) << r.err;
  }
}

TEST(HyperVRefusal, ForcePrintsTheChainMarkedAndStillFails) {
  ProcessResult script = Windows(
      {"hyperv-gpu", "--snapshot", kFixtures + "/ws2022-no-acs.json", "--gpu", "0", "--force"});
  EXPECT_EQ(script.exit_code, 1);
  ASSERT_EQ(script.out.rfind("# PREFLIGHT FAILED: printed anyway", 0), 0u) << script.out;
  const size_t stop = script.out.find("\nthrow 'tessera: the preflight failed");
  const size_t dismount = script.out.find("\nDismount-VMHostAssignableDevice");
  ASSERT_NE(stop, std::string::npos) << script.out;
  ASSERT_NE(dismount, std::string::npos) << script.out;
  EXPECT_LT(stop, dismount) << "the script reaches the dismount before it stops";
  // Every line before the stop is a comment.
  for (size_t at = 0; at < stop; at = script.out.find('\n', at) + 1)
    EXPECT_EQ(script.out[at], '#') << script.out.substr(at, 80);
  EXPECT_NE(script.out.find("#   FAIL device.acs: "), std::string::npos);
  EXPECT_NE(script.err.find("printed only because of --force"), std::string::npos) << script.err;

  ProcessResult oci = Windows({"hyperv-gpu", "--snapshot", kFixtures + "/ws2022-no-acs.json",
                               "--gpu", "0", "--format", "oci", "--force"});
  EXPECT_EQ(oci.exit_code, 1);
  auto doc = nlohmann::ordered_json::parse(oci.out);
  ASSERT_EQ(doc.begin().key(), "tessera_preflight_failed");
  EXPECT_EQ(doc["tessera_preflight_failed"].size(), 2u);
  EXPECT_TRUE(doc.contains("sandbox"));
  ProcessResult json = Windows({"hyperv-gpu", "--snapshot", kFixtures + "/ws2022-no-acs.json",
                                "--gpu", "0", "--format", "json", "--force"});
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_FALSE(nlohmann::json::parse(json.out)["preflight"]["passes"].get<bool>());
}

TEST(HyperVRefusal, SnapshotTextIsQuotedAsPrintableExcerpts) {
  // The description, the IOV reasons and containerd's version carry escapes and line breaks.
  const std::string hostile = kFixtures + "/ws2022-hostile-text.json";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"hyperv-gpu", "--snapshot", hostile, "--gpu", "0"},
        std::vector<std::string>{"hyperv-gpu", "--snapshot", hostile, "--gpu", "0", "--force"},
        std::vector<std::string>{"check-hyperv-gpu", "--snapshot", hostile, "--gpu", "0"}}) {
    ProcessResult r = Windows(args);
    EXPECT_EQ(r.exit_code, 1) << args[0];
    EXPECT_TRUE(Printable(r.out)) << args[0] << ":\n" << r.out;
    EXPECT_TRUE(Printable(r.err)) << args[0] << ":\n" << r.err;
    // No line of the output starts with what the snapshot smuggled in after a line break.
    EXPECT_EQ((r.out + r.err).find("\nDisable-PnpDevice -InstanceId *"), std::string::npos);
    EXPECT_EQ((r.out + r.err).find("\nLine two"), std::string::npos);
  }
  ProcessResult check = Windows({"check-hyperv-gpu", "--snapshot", hostile, "--gpu", "0"});
  EXPECT_NE(check.out.find("containerd 1.6.0 is older than 1.7"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("Line one?Line two ?]0;owned? ?[31mred?[0m"), std::string::npos)
      << check.out;
}

TEST(HyperVRefusal, LegacyEndpointsAreJudgedAsMicrosoftsSurveyDoes) {
  const std::string legacy = kFixtures + "/ws2022-legacy-endpoint.json";
  ProcessResult display = Windows({"check-hyperv-gpu", "--snapshot", legacy, "--gpu", "1"});
  EXPECT_EQ(display.exit_code, 0) << display.out << display.err;
  EXPECT_NE(display.out.find("PASS device.type: legacy PCI Express endpoint of a display "
                             "controller (base class 0x03)"),
            std::string::npos)
      << display.out;
  ProcessResult generated = Windows({"hyperv-gpu", "--snapshot", legacy, "--gpu", "1"});
  EXPECT_EQ(generated.exit_code, 0) << generated.err;
  EXPECT_NE(generated.out.find("crictl runp"), std::string::npos);
  ProcessResult accelerator = Windows({"check-hyperv-gpu", "--snapshot", legacy, "--gpu", "2"});
  EXPECT_EQ(accelerator.exit_code, 1);
  EXPECT_NE(accelerator.out.find("FAIL device.type: legacy PCI Express endpoint of base class "
                                 "0x12: only display controllers (0x03) are assignable"),
            std::string::npos)
      << accelerator.out;
}

}  // namespace
}  // namespace tessera::testing
