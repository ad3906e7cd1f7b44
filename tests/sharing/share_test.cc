#include <gtest/gtest.h>

#include "sharing/sharing.h"

namespace tessera::sharing {
namespace {

TEST(Memory, ReadsKubernetesQuantities) {
  EXPECT_EQ(*ParseMemory("20Gi"), 20 * kGiB);
  EXPECT_EQ(*ParseMemory("512Mi"), 512 * kMiB);
  EXPECT_EQ(*ParseMemory("1.5Gi"), 3 * kGiB / 2);
  EXPECT_EQ(*ParseMemory("0.5Gi"), kGiB / 2);
  EXPECT_EQ(*ParseMemory("16G"), uint64_t{16} * 1000 * 1000 * 1000);
  EXPECT_EQ(*ParseMemory("1Ti"), uint64_t{1} << 40);
  EXPECT_EQ(*ParseMemory("268435456"), 256 * kMiB);
  EXPECT_EQ(*ParseMemory("4Ti"), kMaxShareMemory);
}

TEST(Memory, RefusesEverythingElseNamingWhy) {
  for (const char* bad : {"", "20", "20gi", "20 Gi", "-1Gi", "+1Gi", "1e9", "1.Gi", ".5Gi",
                          "1.2345Gi", "Gi", "20GiB", "020Gi", "1.5", "0x10Gi", "20Gi ", "١Gi"}) {
    auto parsed = ParseMemory(bad);
    EXPECT_FALSE(parsed) << bad;
    if (!parsed) {
      EXPECT_EQ(parsed.error().category, ErrorCategory::kInvalidArgument) << bad;
    }
  }
  EXPECT_NE(ParseMemory("4097Gi").error().message.find("more than 4Ti"), std::string::npos);
  EXPECT_NE(ParseMemory("255Mi").error().message.find("less than 256Mi"), std::string::npos);
  EXPECT_NE(ParseMemory("9999999999999999Ti").error().message.find("more than 4Ti"),
            std::string::npos);
}

TEST(Memory, QuotesOnlyAnExcerptOfWhatWasSent) {
  const std::string hostile = std::string(20, 'A') + "\x1b[31m";
  auto parsed = ParseMemory(hostile);
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().message.find('\x1b'), std::string::npos);
}

TEST(Memory, FormatsShortestExactFormThatReadsBack) {
  EXPECT_EQ(FormatMemory(20 * kGiB), "20Gi");
  EXPECT_EQ(FormatMemory(1536 * kMiB), "1536Mi");
  EXPECT_EQ(FormatMemory(uint64_t{2} << 40), "2Ti");
  EXPECT_EQ(FormatMemory(16000000000), "15625000Ki");
  for (uint64_t bytes : {20 * kGiB, 1536 * kMiB, uint64_t{16000000000}, uint64_t{268435457}})
    EXPECT_EQ(*ParseMemory(FormatMemory(bytes)), bytes);
}

TEST(Memory, GiBForReasons) {
  EXPECT_EQ(FormatGiB(20 * kGiB), "20 GiB");
  EXPECT_EQ(FormatGiB(uint64_t(23.1 * kGiB)), "23.1 GiB");
  EXPECT_EQ(FormatGiB(uint64_t(19.96 * kGiB)), "20 GiB");
}

TEST(ShareFlag, ReadsMemoryComputeAndMode) {
  auto share = ParseShareFlag("20Gi,25");
  ASSERT_TRUE(share) << share.error().message;
  EXPECT_EQ(*share, (Share{20 * kGiB, 25, Mode::kMps}));
  share = ParseShareFlag("8Gi,50,timeslice");
  ASSERT_TRUE(share) << share.error().message;
  EXPECT_EQ(*share, (Share{8 * kGiB, 50, Mode::kTimeslice}));
}

TEST(ShareFlag, RefusesMalformedNamingThePart) {
  for (const char* bad : {"20Gi", "20Gi,", ",25", "20Gi,0", "20Gi,101", "20Gi,25,mig",
                          "20Gi,25,mps,x", "20Gi,2.5", "20Gi,-5", "20Gi,0025", "100Mi,25"}) {
    EXPECT_FALSE(ParseShareFlag(bad)) << bad;
  }
  EXPECT_NE(ParseShareFlag("20Gi,101").error().message.find("compute"), std::string::npos);
  EXPECT_NE(ParseShareFlag("20Gi,25,mig").error().message.find("mps or timeslice"),
            std::string::npos);
}

TEST(Fraction, IsTheLargerOfMemoryAndComputeAsForMigSlices) {
  const uint64_t h100 = 80 * kGiB;
  EXPECT_DOUBLE_EQ(Fraction({20 * kGiB, 10, Mode::kMps}, h100), 0.25);
  EXPECT_DOUBLE_EQ(Fraction({8 * kGiB, 50, Mode::kMps}, h100), 0.5);
  EXPECT_DOUBLE_EQ(Fraction({80 * kGiB, 100, Mode::kMps}, h100), 1.0);
  EXPECT_DOUBLE_EQ(Fraction({160 * kGiB, 100, Mode::kMps}, h100), 1.0);
}

TEST(Fraction, OfATimeSlicedShareIsTheWholeComputeItCanTake) {
  // Time-slicing limits nothing: whatever compute it asked for, it can take all of it.
  const uint64_t h100 = 80 * kGiB;
  EXPECT_DOUBLE_EQ(Fraction({kMinShareMemory, 1, Mode::kTimeslice}, h100), 1.0);
  EXPECT_DOUBLE_EQ(Fraction({20 * kGiB, 25, Mode::kTimeslice}, h100), 1.0);
}

TEST(Enforcement, SaysPlainlyWhatHoldsEachShare) {
  EXPECT_STREQ(EnforcementName(EnforcementOf(Mode::kMps, true)), "driver");
  EXPECT_STREQ(EnforcementName(EnforcementOf(Mode::kTimeslice, true)), "watchdog");
  EXPECT_STREQ(EnforcementName(EnforcementOf(Mode::kTimeslice, false)), "none");
  EXPECT_STREQ(EnforcementName(Enforcement::kHardware), "hardware");
}

TEST(ClientEdits, GiveTheContainerItsOwnLimitsAReadOnlyPipeAndShmNeverTheHostsTmp) {
  auto edits = MpsClientEdits({20 * kGiB, 25, Mode::kMps}, "/run/tessera/mps/GPU-1/pipe",
                              "/run/tessera/mps/GPU-1/shm");
  EXPECT_EQ(edits.env,
            (std::map<std::string, std::string>{{"CUDA_MPS_PIPE_DIRECTORY", "/run/tessera/mps"},
                                                {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=20480M"},
                                                {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"}}));
  ASSERT_EQ(edits.mounts.size(), 2u);
  EXPECT_EQ(edits.mounts[0],
            (ClientMount{"/run/tessera/mps/GPU-1/pipe", "/run/tessera/mps", true}));
  EXPECT_EQ(edits.mounts[1], (ClientMount{"/run/tessera/mps/GPU-1/shm", "/dev/shm", false}));
  for (const auto& mount : edits.mounts) {
    EXPECT_EQ(mount.host_path.find("/tmp/nvidia-mps"), std::string::npos);
    EXPECT_EQ(mount.container_path.find("/tmp/nvidia-mps"), std::string::npos);
  }
  EXPECT_TRUE(MpsClientEdits({20 * kGiB, 25, Mode::kTimeslice}, "/p", "/s").env.empty());
}

}  // namespace
}  // namespace tessera::sharing
