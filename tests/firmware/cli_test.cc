// `tessera gpu-check` as a process on a materialized HGX H100 host tree with option ROMs
// written into its sysfs: exit codes, text and JSON, --record and --all.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/fixture_host.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tessera::testing::RunCommand;
using tessera::testing::TempDir;
using tessera::testing::TempHost;
using tessera::testing::TesseraBinary;

const std::vector<std::string> kGpus = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0",
                                        "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
                                        "0000:ba:00.0", "0000:db:00.0"};

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class GpuCheckCli : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& gpu : kGpus)
      WriteRom(gpu, "ROM-v1-" + gpu);
  }
  void WriteRom(const std::string& gpu, const std::string& content) {
    std::ofstream(host_.root() + "/sys/bus/pci/devices/" + gpu + "/rom", std::ios::trunc)
        << std::string("\x55\xAA", 2) << content;
  }
  std::string Run(const std::string& args, int* status) {
    return RunCommand(TesseraBinary() + " gpu-check --root " + host_.root() + " --baseline-dir " +
                          baselines() + " " + args + " 2>&1",
                      status);
  }
  std::string baselines() const { return dir_.path() + "/firmware"; }

  TempHost host_{"hgx-h100-dgx"};
  TempDir dir_;
};

TEST_F(GpuCheckCli, RecordAllThenCheckPasses) {
  int status = -1;
  std::string out = Run("--record --all", &status);
  EXPECT_EQ(status, 0) << out;
  for (const auto& gpu : kGpus) {
    EXPECT_NE(out.find(gpu + " recorded: baseline sha256:"), std::string::npos) << out;
    EXPECT_TRUE(fs::exists(baselines() + "/" + gpu + ".baseline")) << gpu;
  }
  out = Run("--gpu 0000:18:00.0 --gpu 2a:00.0", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("0000:18:00.0 pass: option ROM matches its baseline"), std::string::npos)
      << out;
  EXPECT_NE(out.find("0000:2a:00.0 pass"), std::string::npos) << out;
  out = Run("--all", &status);
  EXPECT_EQ(status, 0) << out;
}

TEST_F(GpuCheckCli, AChangedRomFailsWithTheReasonAndOthersStillPass) {
  int status = -1;
  Run("--record --gpu 0000:18:00.0 --gpu 0000:2a:00.0", &status);
  ASSERT_EQ(status, 0);
  WriteRom("0000:2a:00.0", "ROM-v2-tampered");
  std::string out = Run("--gpu 0000:18:00.0 --gpu 0000:2a:00.0", &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("0000:18:00.0 pass"), std::string::npos) << out;
  EXPECT_NE(out.find("0000:2a:00.0 fail: option ROM changed (baseline sha256:"), std::string::npos)
      << out;
}

TEST_F(GpuCheckCli, MissingBaselineFails) {
  int status = -1;
  std::string out = Run("--gpu 0000:18:00.0", &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("0000:18:00.0 fail: no baseline recorded in " + baselines()),
            std::string::npos)
      << out;
}

TEST_F(GpuCheckCli, RecordNeverOverwrites) {
  int status = -1;
  Run("--record --gpu 0000:18:00.0", &status);
  ASSERT_EQ(status, 0);
  const std::string file = baselines() + "/0000:18:00.0.baseline";
  const std::string before = ReadText(file);
  WriteRom("0000:18:00.0", "ROM-v2-after-a-tenant");
  std::string out = Run("--record --gpu 0000:18:00.0", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("0000:18:00.0 kept: baseline " + file + " already recorded"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("now differs"), std::string::npos) << out;
  EXPECT_EQ(ReadText(file), before);
  out = Run("--gpu 0000:18:00.0", &status);
  EXPECT_EQ(status, 1) << out;
}

TEST_F(GpuCheckCli, UsageErrorsExitTwoNamingTheFlag) {
  int status = -1;
  std::string out = Run("--gpu 0000:18:00.9", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--gpu \"0000:18:00.9\": not a PCI address"), std::string::npos) << out;
  out = Run("--gpu ../../../etc/passwd", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--gpu"), std::string::npos) << out;
  out = Run("", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--gpu PCI"), std::string::npos) << out;
  out = Run("--all --gpu 0000:18:00.0", &status);
  EXPECT_EQ(status, 2) << out;
  out = Run("--all --format yaml", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--format yaml"), std::string::npos) << out;
  // Nothing was recorded or created by a refused command.
  EXPECT_FALSE(fs::exists(baselines()));
}

TEST_F(GpuCheckCli, JsonOutputParses) {
  int status = -1;
  Run("--record --gpu 0000:18:00.0", &status);
  ASSERT_EQ(status, 0);
  WriteRom("0000:18:00.0", "ROM-v2");
  std::string out =
      RunCommand(TesseraBinary() + " gpu-check --root " + host_.root() + " --baseline-dir " +
                     baselines() + " --format json --gpu 0000:18:00.0 --gpu 0000:db:00.0",
                 &status);
  EXPECT_EQ(status, 1) << out;
  json doc = json::parse(out);
  EXPECT_FALSE(doc["passed"].get<bool>());
  ASSERT_EQ(doc["gpus"].size(), 2u);
  EXPECT_EQ(doc["gpus"][0]["pci_address"], "0000:18:00.0");
  EXPECT_EQ(doc["gpus"][0]["outcome"], "fail");
  EXPECT_NE(doc["gpus"][0]["baseline"], doc["gpus"][0]["option_rom"]);
  EXPECT_EQ(doc["gpus"][1]["outcome"], "fail");
  EXPECT_EQ(doc["gpus"][1]["baseline"], "");
  EXPECT_NE(doc["gpus"][1]["reason"].get<std::string>().find("no baseline"), std::string::npos);

  out = RunCommand(TesseraBinary() + " gpu-check --root " + host_.root() + " --baseline-dir " +
                       baselines() + " --format json --record --all",
                   &status);
  EXPECT_EQ(status, 0) << out;
  doc = json::parse(out);
  EXPECT_TRUE(doc["passed"].get<bool>());
  ASSERT_EQ(doc["gpus"].size(), kGpus.size());
  EXPECT_EQ(doc["gpus"][0]["outcome"], "kept");
  EXPECT_EQ(doc["gpus"][1]["outcome"], "recorded");
}

TEST_F(GpuCheckCli, AHostWithoutGpusHasNothingToCheck) {
  TempHost empty("no-gpu");
  int status = -1;
  std::string out = RunCommand(TesseraBinary() + " gpu-check --root " + empty.root() +
                                   " --baseline-dir " + baselines() + " --record --all 2>&1",
                               &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "");
}

}  // namespace
