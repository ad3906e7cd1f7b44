// Golden outputs of every `tessera windows` command, from the real binary. Each case's stdout,
// stderr and exit code live in tests/fixtures/windows/golden/<case>.txt; run with
// TESSERA_UPDATE_GOLDEN=1 to rewrite them after an intended change, then review the diff.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "windows/process.h"

namespace tessera::testing {
namespace {

const std::string kFixtures = std::string(TESSERA_FIXTURES_DIR) + "/windows";

struct GoldenCase {
  const char* name;
  std::vector<std::string> args;  // after "tessera windows"; "$F/" stands for the fixture dir
};

const std::vector<GoldenCase>& Cases() {
  static const std::vector<GoldenCase> cases = {
      // inventory
      {"inventory_ws2022_aws_4xt4", {"inventory", "--snapshot", "$F/ws2022-aws-4xt4.json"}},
      {"inventory_ws2019_t4", {"inventory", "--snapshot", "$F/ws2019-t4.json"}},
      {"inventory_ws2025_l4", {"inventory", "--snapshot", "$F/ws2025-l4.json"}},
      {"inventory_laptop", {"inventory", "--snapshot", "$F/laptop-igpu-dgpu.json"}},
      {"inventory_mcdm", {"inventory", "--snapshot", "$F/mcdm-compute-only.json"}},
      {"inventory_malformed_copytovm", {"inventory", "--snapshot", "$F/malformed-copytovm.json"}},
      {"inventory_unknown_field", {"inventory", "--snapshot", "$F/invalid/unknown-field.json"}},
      {"inventory_bad_registry_type",
       {"inventory", "--snapshot", "$F/invalid/bad-registry-type.json"}},
      {"inventory_bad_vendor_id", {"inventory", "--snapshot", "$F/invalid/bad-vendor-id.json"}},
      {"inventory_bad_subkey", {"inventory", "--snapshot", "$F/invalid/bad-subkey.json"}},
      {"inventory_missing_file", {"inventory", "--snapshot", "$F/no-such-snapshot.json"}},
      {"inventory_not_json", {"inventory", "--snapshot", "$F/invalid/not-json.json"}},
      // hcs-device
      {"hcs_ws2022_location_path",
       {"hcs-device", "--build", "20348", "--device", "vpci-location-path://PCIROOT(0)#PCI(1E00)"}},
      {"hcs_ws2019_location_path_refused",
       {"hcs-device", "--build", "17763", "--device", "vpci-location-path://PCIROOT(0)#PCI(1E00)"}},
      {"hcs_1903_location_path",
       {"hcs-device", "--build", "18362", "--device",
        "vpci-location-path://PCIROOT(0)#PCI(0100)#PCI(0000)"}},
      {"hcs_ws2019_docker_class",
       {"hcs-device", "--build", "17763", "--device",
        "class/5B45201D-F2F2-4F3B-85BB-30FF1F953599"}},
      {"hcs_class_url_braces",
       {"hcs-device", "--build", "20348", "--device",
        "class://{5b45201d-f2f2-4f3b-85bb-30ff1f953599}"}},
      {"hcs_vpci_class_guid",
       {"hcs-device", "--build", "26100", "--device",
        "vpci-class-guid://5B45201D-F2F2-4F3B-85BB-30FF1F953599"}},
      {"hcs_instance_id_process_refused",
       {"hcs-device", "--build", "20348", "--device",
        "vpci-instance-id://PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&00F0"}},
      {"hcs_gpu_process_refused",
       {"hcs-device", "--build", "20348", "--device", "gpu://PCIP\\VEN_10DE&DEV_1EB8\\4&1&0"}},
      {"hcs_vpci_hyperv",
       {"hcs-device", "--build", "20348", "--isolation", "hyperv", "--device",
        "vpci://PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&00F0"}},
      {"hcs_instance_id_hyperv_ws2019_refused",
       {"hcs-device", "--build", "17763", "--isolation", "hyperv", "--device",
        "vpci-instance-id://PCIP\\VEN_10DE&DEV_1EB8\\4&1&0"}},
      {"hcs_location_path_hyperv_refused",
       {"hcs-device", "--build", "20348", "--isolation", "hyperv", "--device",
        "vpci-location-path://PCIROOT(0)#PCI(1E00)"}},
      {"hcs_ws2016_refused",
       {"hcs-device", "--build", "14393", "--device",
        "class/5B45201D-F2F2-4F3B-85BB-30FF1F953599"}},
      {"hcs_snapshot_ws2019",
       {"hcs-device", "--snapshot", "$F/ws2019-t4.json", "--device",
        "vpci-location-path://PCIROOT(0)#PCI(1E00)"}},
      {"hcs_malformed_guid",
       {"hcs-device", "--build", "20348", "--device", "class/5B45201D-F2F2-4F3B-85BB"}},
      {"hcs_unknown_type", {"hcs-device", "--build", "20348", "--device", "pci://0000:00:1e.0"}},
      {"hcs_uppercase_type",
       {"hcs-device", "--build", "20348", "--device",
        "CLASS://5B45201D-F2F2-4F3B-85BB-30FF1F953599"}},
      {"hcs_no_type",
       {"hcs-device", "--build", "20348", "--device", "5B45201D-F2F2-4F3B-85BB-30FF1F953599"}},
      {"hcs_empty_id", {"hcs-device", "--build", "20348", "--device", "vpci-location-path://"}},
      {"hcs_bad_location_path",
       {"hcs-device", "--build", "20348", "--device", "vpci-location-path://PCIROOT(0)#PCI()"}},
      {"hcs_location_path_not_pciroot",
       {"hcs-device", "--build", "20348", "--device",
        "vpci-location-path://ACPI(_SB_)#ACPI(PCI0)"}},
      {"hcs_instance_id_with_space",
       {"hcs-device", "--build", "20348", "--isolation", "hyperv", "--device",
        "vpci-instance-id://PCIP\\VEN 10DE"}},
      // mounts
      {"mounts_ws2022_all_ctr",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--all", "--format", "ctr"}},
      {"mounts_ws2022_index_ctr",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--index", "3,1", "--format", "ctr"}},
      {"mounts_ws2022_luid_nerdctl",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--luid", "0xD9C3", "--format",
        "nerdctl"}},
      {"mounts_ws2022_path_json",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--path", "PCIROOT(0)#PCI(1E00)",
        "--format", "json"}},
      {"mounts_ws2022_docker",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--index", "0", "--format", "docker"}},
      {"mounts_ws2019_ctr_falls_back_to_class",
       {"mounts", "--snapshot", "$F/ws2019-t4.json", "--all", "--format", "ctr"}},
      {"mounts_ws2019_json",
       {"mounts", "--snapshot", "$F/ws2019-t4.json", "--all", "--format", "json"}},
      {"mounts_ws2025_ctr",
       {"mounts", "--snapshot", "$F/ws2025-l4.json", "--all", "--format", "ctr"}},
      {"mounts_ws2025_docker",
       {"mounts", "--snapshot", "$F/ws2025-l4.json", "--all", "--format", "docker"}},
      {"mounts_laptop_dgpu_json",
       {"mounts", "--snapshot", "$F/laptop-igpu-dgpu.json", "--index", "1", "--format", "json"}},
      {"mounts_laptop_all_nerdctl",
       {"mounts", "--snapshot", "$F/laptop-igpu-dgpu.json", "--all", "--format", "nerdctl"}},
      {"mounts_mcdm_json",
       {"mounts", "--snapshot", "$F/mcdm-compute-only.json", "--all", "--format", "json"}},
      {"mounts_malformed_ctr",
       {"mounts", "--snapshot", "$F/malformed-copytovm.json", "--all", "--format", "ctr"}},
      {"mounts_malformed_json",
       {"mounts", "--snapshot", "$F/malformed-copytovm.json", "--index", "0", "--format", "json"}},
      {"mounts_malformed_no_location_path",
       {"mounts", "--snapshot", "$F/malformed-copytovm.json", "--index", "1", "--format", "ctr"}},
      {"mounts_vendor_files_replaced",
       {"mounts", "--snapshot", "$F/ws2025-l4.json", "--all", "--format", "ctr", "--vendor-file",
        "10de=nvidia-smi.exe", "--vendor-file", "10de=nvdebugdump.exe"}},
      {"mounts_no_vendor_files",
       {"mounts", "--snapshot", "$F/ws2025-l4.json", "--all", "--format", "json",
        "--no-vendor-files"}},
      {"mounts_bad_vendor_file",
       {"mounts", "--snapshot", "$F/ws2025-l4.json", "--all", "--format", "ctr", "--vendor-file",
        "10de=..\\nvidia-smi.exe"}},
      {"mounts_unknown_index",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--index", "4", "--format", "ctr"}},
      {"mounts_unknown_luid",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--luid", "beef", "--format", "ctr"}},
      {"mounts_bad_luid",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--luid", "xyz", "--format", "ctr"}},
      {"mounts_unknown_path",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--path", "PCIROOT(0)#PCI(0400)",
        "--format", "ctr"}},
      {"mounts_no_selection",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--format", "ctr"}},
      {"mounts_two_selections",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--all", "--index", "0", "--format",
        "ctr"}},
      {"mounts_bad_format",
       {"mounts", "--snapshot", "$F/ws2022-aws-4xt4.json", "--all", "--format", "podman"}},
      {"mounts_command_without_run",
       {"mounts", "--snapshot", "$F/ws2025-l4.json", "--all", "--format", "ctr", "cmd"}},
      {"mounts_run_json_refused",
       {"mounts", "--snapshot", "$F/ws2025-l4.json", "--all", "--format", "json", "--run", "img"}},
      // check-image
      {"check_ltsc2022_on_ws2022_process",
       {"check-image", "--host-build", "20348", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2022", "--isolation", "process"}},
      {"check_ltsc2019_on_ws2022_process",
       {"check-image", "--host-build", "20348", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2019", "--isolation", "process"}},
      {"check_ltsc2019_on_ws2022_hyperv",
       {"check-image", "--host-build", "20348", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2019", "--isolation", "hyperv"}},
      {"check_1809_on_ws2019_process",
       {"check-image", "--host-build", "17763", "--image",
        "mcr.microsoft.com/windows/nanoserver:1809", "--isolation", "process"}},
      {"check_20h2_on_2004_process",
       {"check-image", "--host-build", "19041", "--image",
        "mcr.microsoft.com/windows/servercore:20H2", "--isolation", "process"}},
      {"check_2004_on_20h2_process",
       {"check-image", "--host-build", "19042", "--image",
        "mcr.microsoft.com/windows/servercore:2004", "--isolation", "process"}},
      {"check_ltsc2022_on_ws2025_process",
       {"check-image", "--host-build", "26100", "--image",
        "mcr.microsoft.com/windows/server:ltsc2022", "--isolation", "process"}},
      {"check_ltsc2022_on_win11_process",
       {"check-image", "--host-build", "22631", "--image", "mcr.microsoft.com/windows:ltsc2022",
        "--isolation", "process"}},
      {"check_ltsc2019_on_ws2025_process",
       {"check-image", "--host-build", "26100", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2019", "--isolation", "process"}},
      {"check_ltsc2025_on_ws2022_hyperv",
       {"check-image", "--host-build", "20348", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2025", "--isolation", "hyperv"}},
      {"check_full_version_tag",
       {"check-image", "--host-build", "20348", "--image",
        "mcr.microsoft.com/windows/servercore:10.0.20348.2849", "--isolation", "process"}},
      {"check_dotnet_tag",
       {"check-image", "--host-build", "17763", "--image",
        "mcr.microsoft.com/dotnet/framework/runtime:4.8-windowsservercore-ltsc2019", "--isolation",
        "process"}},
      {"check_image_build",
       {"check-image", "--host-build", "20348", "--image-build", "20348", "--isolation",
        "process"}},
      {"check_digest_only",
       {"check-image", "--host-build", "20348", "--image",
        "mcr.microsoft.com/windows/"
        "servercore@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "--isolation", "process"}},
      {"check_unknown_tag",
       {"check-image", "--host-build", "20348", "--image", "example.com/app:latest", "--isolation",
        "process"}},
      {"check_gpu_hyperv_refused",
       {"check-image", "--host-build", "20348", "--image", "mcr.microsoft.com/windows:ltsc2019",
        "--isolation", "hyperv", "--gpu"}},
      {"check_gpu_windows_image",
       {"check-image", "--host-build", "20348", "--image",
        "mcr.microsoft.com/windows/server:ltsc2022", "--isolation", "process", "--gpu"}},
      {"check_gpu_servercore_ws2022",
       {"check-image", "--host-build", "20348", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2022", "--isolation", "process", "--gpu"}},
      {"check_gpu_servercore_ws2025",
       {"check-image", "--host-build", "26100", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2025", "--isolation", "process", "--gpu"}},
      {"check_gpu_nanoserver",
       {"check-image", "--host-build", "26100", "--image",
        "mcr.microsoft.com/windows/nanoserver:ltsc2025", "--isolation", "process", "--gpu"}},
      {"check_gpu_ws2016",
       {"check-image", "--host-build", "14393", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2016", "--isolation", "process", "--gpu"}},
      {"check_no_image", {"check-image", "--host-build", "20348", "--isolation", "process"}},
      // hyperv-gpu and check-hyperv-gpu: every format for each of the five Hyper-V fixtures
      {"hyperv_dda_t4_crictl",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json", "--gpu", "1", "--format", "crictl"}},
      {"hyperv_dda_t4_oci",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json", "--gpu", "1", "--format", "oci"}},
      {"hyperv_dda_t4_hcs",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json", "--gpu", "1", "--format", "hcs"}},
      {"hyperv_dda_t4_json",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json", "--gpu", "1", "--format", "json"}},
      {"check_hyperv_dda_t4", {"check-hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json"}},
      {"hyperv_dda_rmrr_crictl",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-rmrr.json", "--gpu", "1", "--format", "crictl"}},
      {"hyperv_dda_rmrr_oci",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-rmrr.json", "--gpu", "1", "--format", "oci"}},
      {"hyperv_dda_rmrr_hcs",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-rmrr.json", "--gpu", "1", "--format", "hcs"}},
      {"hyperv_dda_rmrr_json",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-rmrr.json", "--gpu", "1", "--format", "json"}},
      {"check_hyperv_dda_rmrr",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2022-dda-rmrr.json", "--gpu", "1"}},
      {"hyperv_no_acs_crictl",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-no-acs.json", "--gpu", "0", "--format", "crictl"}},
      {"hyperv_no_acs_oci",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-no-acs.json", "--gpu", "0", "--format", "oci"}},
      {"hyperv_no_acs_hcs",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-no-acs.json", "--gpu", "0", "--format", "hcs"}},
      {"hyperv_no_acs_json",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-no-acs.json", "--gpu", "0", "--format", "json"}},
      {"check_hyperv_no_acs",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2022-no-acs.json", "--gpu", "0"}},
      {"hyperv_ws2019_17763_crictl",
       {"hyperv-gpu", "--snapshot", "$F/ws2019-17763-dda.json", "--gpu", "1", "--format",
        "crictl"}},
      {"hyperv_ws2019_17763_oci",
       {"hyperv-gpu", "--snapshot", "$F/ws2019-17763-dda.json", "--gpu", "1", "--format", "oci"}},
      {"hyperv_ws2019_17763_hcs",
       {"hyperv-gpu", "--snapshot", "$F/ws2019-17763-dda.json", "--gpu", "1", "--format", "hcs"}},
      {"hyperv_ws2019_17763_json",
       {"hyperv-gpu", "--snapshot", "$F/ws2019-17763-dda.json", "--gpu", "1", "--format", "json"}},
      {"check_hyperv_ws2019_17763",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2019-17763-dda.json", "--gpu", "1"}},
      {"hyperv_not_dismounted_crictl",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-t4-not-dismounted.json", "--gpu",
        "PCIROOT(0)#PCI(0300)#PCI(0000)", "--format", "crictl"}},
      {"hyperv_not_dismounted_oci",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-t4-not-dismounted.json", "--gpu",
        "PCIROOT(0)#PCI(0300)#PCI(0000)", "--format", "oci"}},
      {"hyperv_not_dismounted_hcs",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-t4-not-dismounted.json", "--gpu",
        "PCIROOT(0)#PCI(0300)#PCI(0000)", "--format", "hcs"}},
      {"hyperv_not_dismounted_json",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-t4-not-dismounted.json", "--gpu",
        "PCIROOT(0)#PCI(0300)#PCI(0000)", "--format", "json"}},
      {"check_hyperv_not_dismounted",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2022-t4-not-dismounted.json", "--gpu",
        "PCIROOT(0)#PCI(0300)#PCI(0000)"}},
      {"hyperv_options",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json", "--gpu", "1", "--image",
        "mcr.microsoft.com/windows/nanoserver:ltsc2022", "--memory-mb", "8192", "--kernel-drivers",
        "D:\\drivers\\t4", "--runtime-handler", "gpu-hyperv", "--format", "json", "--force"}},
      {"hyperv_format1_refused",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-aws-4xt4.json", "--gpu", "0"}},
      {"hyperv_unknown_gpu", {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json", "--gpu", "7"}},
      {"hyperv_no_location_path",
       {"hyperv-gpu", "--snapshot", "$F/invalid/hyperv-no-location-path.json", "--gpu", "0"}},
      {"hyperv_bad_format",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json", "--gpu", "1", "--format", "yaml"}},
      {"hyperv_no_acs_force_crictl",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-no-acs.json", "--gpu", "0", "--force"}},
      {"hyperv_hostile_text",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-hostile-text.json", "--gpu", "0"}},
      {"check_hyperv_hostile_text",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2022-hostile-text.json", "--gpu", "0"}},
      {"hyperv_legacy_display_crictl",
       {"hyperv-gpu", "--snapshot", "$F/ws2022-legacy-endpoint.json", "--gpu", "1"}},
      {"check_hyperv_legacy_display",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2022-legacy-endpoint.json", "--gpu", "1"}},
      {"check_hyperv_legacy_accelerator",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2022-legacy-endpoint.json", "--gpu", "2"}},
      {"check_hyperv_two_candidates",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2022-dda-rmrr.json"}},
      {"check_hyperv_image_build",
       {"check-hyperv-gpu", "--snapshot", "$F/ws2022-dda-t4.json", "--image-build", "26100"}},
      {"check_image_hyperv_gpu_snapshot",
       {"check-image", "--snapshot", "$F/ws2022-dda-t4.json", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2022", "--isolation", "hyperv", "--gpu"}},
      {"check_image_hyperv_gpu_snapshot_refused",
       {"check-image", "--snapshot", "$F/ws2022-no-acs.json", "--gpu-device", "0", "--image",
        "mcr.microsoft.com/windows/servercore:ltsc2022", "--isolation", "hyperv", "--gpu"}},
  };
  return cases;
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

std::string Render(const GoldenCase& c, const ProcessResult& r) {
  std::string command = "tessera windows";
  for (const std::string& a : c.args)
    command += " " + a;
  std::ostringstream out;
  out << "# " << command << "\n# exit " << r.exit_code << "\n## stdout\n"
      << Replace(r.out, kFixtures, "$F") << "## stderr\n"
      << Replace(r.err, kFixtures, "$F");
  return out.str();
}

class WindowsGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(WindowsGolden, MatchesGoldenOutput) {
  const GoldenCase& c = GetParam();
  std::vector<std::string> argv = {TesseraBinary(), "windows"};
  for (const std::string& a : c.args)
    argv.push_back(Replace(a, "$F", kFixtures));
  ProcessResult r = RunProcess(argv);
  std::string actual = Render(c, r);
  std::string golden_path = kFixtures + "/golden/" + c.name + ".txt";
  if (std::getenv("TESSERA_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(golden_path, std::ios::binary) << actual;
  }
  std::ifstream in(golden_path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing golden file " << golden_path
                         << " (run with TESSERA_UPDATE_GOLDEN=1)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "golden: " << golden_path;
}

INSTANTIATE_TEST_SUITE_P(Cli, WindowsGolden, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return std::string(info.param.name);
                         });

// Every JSON output of the CLI parses as JSON, and the inventory lists one device per adapter.
TEST(WindowsCli, JsonOutputsParse) {
  int checked = 0;
  for (const GoldenCase& c : Cases()) {
    bool inventory = c.args[0] == "inventory";
    bool json = inventory || std::find(c.args.begin(), c.args.end(), "json") != c.args.end();
    if (!json) continue;
    std::vector<std::string> argv = {TesseraBinary(), "windows"};
    for (const std::string& a : c.args)
      argv.push_back(Replace(a, "$F", kFixtures));
    ProcessResult r = RunProcess(argv);
    if (r.exit_code != 0) continue;
    nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << c.name << ":\n" << r.out;
    if (inventory) {
      EXPECT_EQ(doc["devices"].size(), doc["windows"]["adapters"].size()) << c.name;
      EXPECT_TRUE(doc["iommu_groups"].is_object()) << c.name;
      EXPECT_TRUE(doc["nvidia_driver"].is_null()) << c.name;
    } else if (c.args[0] == "hyperv-gpu") {
      EXPECT_TRUE(doc["preflight"]["passes"].get<bool>()) << c.name;  // exit 0 only then
      EXPECT_TRUE(doc["pod_sandbox_config"]["annotations"].is_object()) << c.name;
    } else {
      EXPECT_TRUE(doc["mounts"].is_array()) << c.name;
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace tessera::testing
