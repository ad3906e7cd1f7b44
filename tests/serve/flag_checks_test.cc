// tessera-serve's flag rules that need no host: each duration's range, and the syntax of the
// paths that reach podman's --mount (pure).
#include "serve/flag_checks.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>

namespace tessera::serve {
namespace {

using std::chrono::milliseconds;

const DurationFlag kAll[] = {
    kShareGraceFlag,        kShareCheckIntervalFlag,   kMpsCommandTimeoutFlag,
    kTelemetryIntervalFlag, kRetainFinishedFlag,       kRetentionSweepIntervalFlag,
    kFairShareHalfLifeFlag, kFabricManagerTimeoutFlag, kAuditRetentionFlag};

std::string Refusal(const DurationFlag& flag, std::string_view text) {
  auto parsed = ParseDurationFlag(flag, text);
  EXPECT_FALSE(parsed) << flag.name << " " << text << " was taken";
  return parsed ? "" : parsed.error().message;
}

std::string Refusal(const Status& status) {
  EXPECT_FALSE(status) << "accepted";
  return status ? "" : status.error().message;
}

TEST(DurationFlags, EachTakesBothEndsOfItsRangeAndNothingBeyond) {
  for (const DurationFlag& flag : kAll) {
    SCOPED_TRACE(std::string(flag.name));
    const std::string low = std::to_string(flag.low.count()) + "ms";
    const std::string high = std::to_string(flag.high.count()) + "ms";
    auto at_low = ParseDurationFlag(flag, low);
    ASSERT_TRUE(at_low) << at_low.error().message;
    EXPECT_EQ(*at_low, flag.low);
    auto at_high = ParseDurationFlag(flag, high);
    ASSERT_TRUE(at_high) << at_high.error().message;
    EXPECT_EQ(*at_high, flag.high);
    EXPECT_NE(Refusal(flag, std::to_string(flag.low.count() - 1) + "ms").find(flag.name),
              std::string::npos);
    EXPECT_NE(Refusal(flag, std::to_string(flag.high.count() + 1) + "ms").find(flag.name),
              std::string::npos);
  }
}

TEST(DurationFlags, EveryUpperBoundFitsInSteadyClockNanoseconds) {
  // The watchdog compares a grace with steady_clock differences: a bound past int64 nanoseconds
  // would wrap there (1000000d did: no grace at all).
  for (const DurationFlag& flag : kAll) {
    EXPECT_LE(flag.high.count(), INT64_MAX / 1000000) << flag.name;
    EXPECT_GT(flag.low.count(), 0) << flag.name;
    EXPECT_LT(flag.low, flag.high) << flag.name;
  }
  // Handed to process::Run as an int of milliseconds.
  EXPECT_LE(kMpsCommandTimeoutFlag.high.count(), INT_MAX);
}

TEST(DurationFlags, AMillionDaysOfGraceIsRefusedNamingTheFlagAndItsRange) {
  EXPECT_EQ(Refusal(kShareGraceFlag, "1000000d"),
            "--share-grace 1000000d: must be from 100ms to 1h");
  EXPECT_EQ(Refusal(kShareCheckIntervalFlag, "2m"),
            "--share-check-interval 2m: must be from 10ms to 1m");
  EXPECT_EQ(Refusal(kMpsCommandTimeoutFlag, "1h"),
            "--mps-command-timeout 1h: must be from 100ms to 5m");
  EXPECT_EQ(Refusal(kTelemetryIntervalFlag, "50ms"),
            "--telemetry-interval 50ms: must be from 100ms to 1h");
}

TEST(DurationFlags, OverflowingAndMalformedValuesAreRefusedNotWrapped) {
  for (const char* text : {"106751991168d",          // past int64 milliseconds once scaled
                           "9223372036854775807h",   // the largest int64, then scaled
                           "99999999999999999999s",  // past int64 before scaling
                           "-1s", "-0s", "1.5s", "10", "s", "", "1 s", "+1s", "1S", "1sec"}) {
    SCOPED_TRACE(text);
    const std::string message = Refusal(kShareGraceFlag, text);
    EXPECT_EQ(message.rfind("--share-grace", 0), 0u) << message;
    EXPECT_NE(message.find("100ms to 1h"), std::string::npos) << message;
  }
}

TEST(DurationFlags, AHugeValueIsQuotedOnlyInPart) {
  const std::string huge = std::string(5000, '9') + "s";
  const std::string message = Refusal(kTelemetryIntervalFlag, huge);
  EXPECT_LT(message.size(), 300u) << message;
}

TEST(DurationFlags, FormatsInTheLargestWholeUnit) {
  EXPECT_EQ(FormatDuration(milliseconds(100)), "100ms");
  EXPECT_EQ(FormatDuration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(FormatDuration(milliseconds(90000)), "90s");
  EXPECT_EQ(FormatDuration(std::chrono::minutes(5)), "5m");
  EXPECT_EQ(FormatDuration(std::chrono::hours(1)), "1h");
  EXPECT_EQ(FormatDuration(std::chrono::hours(24 * 3660)), "3660d");
  EXPECT_EQ(FormatDuration(milliseconds(0)), "0ms");
}

TEST(MountSourcePath, TakesAnAbsoluteNormalPathWithSpacesColonsAndEquals) {
  for (const char* path : {"/run/tessera/mps", "/a", "/srv/gpu share=1:x", "/run/tessera-mps.d"})
    EXPECT_TRUE(CheckMountSourcePath("--mps-root", path)) << path;
}

TEST(MountSourcePath, RefusesWhatPodmansMountSyntaxReadsAsStructure) {
  EXPECT_NE(Refusal(CheckMountSourcePath("--mps-root", "/run/a,type=volume")).find("','"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckMountSourcePath("--mps-root", "/run/\"mps\"")).find("'\"'"),
            std::string::npos);
  for (const char* path : {"/run/a\nb", "/run/a\rb", "/run/a\tb", "/run/a\x7f"})
    EXPECT_NE(Refusal(CheckMountSourcePath("--mps-root", path)).find("control character"),
              std::string::npos);
}

TEST(MountSourcePath, RefusesRelativeRootAndNonNormalPaths) {
  for (const char* path : {"mps", "./mps", "run/tessera/mps", "~/mps"})
    EXPECT_NE(Refusal(CheckMountSourcePath("--mps-root", path)).find("absolute"), std::string::npos)
        << path;
  EXPECT_NE(Refusal(CheckMountSourcePath("--mps-root", "/")).find("below /"), std::string::npos);
  for (const char* path : {"/run//mps", "/run/mps/", "/run/./mps", "/run/../mps", "/run/mps/.",
                           "/run/mps/..", "//run"})
    EXPECT_NE(Refusal(CheckMountSourcePath("--mps-root", path)).find("normal form"),
              std::string::npos)
        << path;
}

TEST(MountSourcePath, ErrorsNameTheFlag) {
  EXPECT_EQ(Refusal(CheckMountSourcePath("--mps-root", "relative")).rfind("--mps-root", 0), 0u);
  EXPECT_EQ(Refusal(CheckMountSourcePath("--other-root", "")).rfind("--other-root", 0), 0u);
}

TEST(PathText, RefusesEmptyOverlongAndControlCharacters) {
  EXPECT_NE(Refusal(CheckPathText("--data-dir", "")).find("empty"), std::string::npos);
  EXPECT_TRUE(CheckPathText("--data-dir", "/" + std::string(PATH_MAX - 2, 'a')));
  const std::string message =
      Refusal(CheckPathText("--data-dir", "/" + std::string(PATH_MAX - 1, 'a')));
  EXPECT_NE(message.find("at most 4095"), std::string::npos) << message;
  EXPECT_LT(message.size(), 200u);
  EXPECT_NE(Refusal(CheckPathText("--cdi-dir", std::string("/a\0b", 4))).find("control"),
            std::string::npos);
  EXPECT_TRUE(CheckPathText("--data-dir", "relative/dir"));
  EXPECT_TRUE(CheckPathText("--data-dir", "/caf\xc3\xa9"));
}

TEST(CommandProgram, IsTheFirstWordAsTheCheckerSplitsIt) {
  EXPECT_EQ(CommandProgram("/usr/bin/check --strict"), "/usr/bin/check");
  EXPECT_EQ(CommandProgram("  check  a"), "check");
  EXPECT_EQ(CommandProgram("check"), "check");
  EXPECT_EQ(CommandProgram(""), "");
  EXPECT_EQ(CommandProgram("   "), "");
}

TEST(SizeFlags, EachTakesBothEndsOfItsRangeAndNothingBeyond) {
  for (const SizeFlag& flag : {kContainerLogMaxFlag, kStoreReserveFlag}) {
    SCOPED_TRACE(std::string(flag.name));
    auto at_low = ParseSizeFlag(flag, FormatSize(flag.low));
    ASSERT_TRUE(at_low) << at_low.error().message;
    EXPECT_EQ(*at_low, flag.low);
    auto at_high = ParseSizeFlag(flag, std::to_string(flag.high));
    ASSERT_TRUE(at_high) << at_high.error().message;
    EXPECT_EQ(*at_high, flag.high);
    auto above = ParseSizeFlag(flag, std::to_string(flag.high + 1));
    ASSERT_FALSE(above);
    EXPECT_NE(above.error().message.find("must be from " + FormatSize(flag.low) + " to 1Ti"),
              std::string::npos)
        << above.error().message;
  }
  EXPECT_FALSE(ParseSizeFlag(kContainerLogMaxFlag, "63Ki"));
  EXPECT_EQ(*ParseSizeFlag(kContainerLogMaxFlag, "16Mi"), uint64_t{16} << 20);
  EXPECT_EQ(*ParseSizeFlag(kStoreReserveFlag, "0"), 0u);
}

TEST(SizeFlags, OnlyWholeNumbersWithABinarySuffix) {
  for (std::string_view text : {"", "Mi", "1.5Mi", "-1", "1 Mi", "1M", "1mi", "16MiB",
                                "99999999999999Ki", "18446744073709551616"}) {
    SCOPED_TRACE(std::string(text));
    auto parsed = ParseSizeFlag(kStoreReserveFlag, text);
    ASSERT_FALSE(parsed);
    EXPECT_EQ(parsed.error().category, ErrorCategory::kInvalidArgument);
    EXPECT_EQ(parsed.error().message.rfind("--store-reserve", 0), 0u) << parsed.error().message;
  }
  EXPECT_EQ(FormatSize(1536 << 10), "1536Ki");
  EXPECT_EQ(FormatSize(100), "100");
}

TEST(TlsFlags, LoopbackIsOnly127Slash8AndColonColon1) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(IsLoopbackAddress(host)) << host;
  for (const char* host : {"0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "::2", "localhost", ""})
    EXPECT_FALSE(IsLoopbackAddress(host)) << host;
}

TEST(TlsFlags, PlainHttpOffLoopbackNeedsInsecureHttpAndTheFilesGoTogether) {
  EXPECT_TRUE(CheckTlsFlags("127.0.0.1", {}).ok());
  EXPECT_NE(Refusal(CheckTlsFlags("0.0.0.0", {})).find("--insecure-http"), std::string::npos);
  EXPECT_TRUE(CheckTlsFlags("0.0.0.0", {"", "", "", true}).ok());
  EXPECT_TRUE(CheckTlsFlags("::", {"/c.pem", "/k.pem", "", false}).ok());
  EXPECT_NE(Refusal(CheckTlsFlags("::", {"/c.pem", "", "", false})).find("give both"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckTlsFlags("::1", {"", "", "/ca.pem", false})).find("needs --tls-cert"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckTlsFlags("::1", {"/c.pem", "/k.pem", "", true})).find("choose one"),
            std::string::npos);
  EXPECT_NE(Refusal(CheckTlsFlags("::1", {"/c\n.pem", "/k.pem", "", false})).size(), 0u);
}

}  // namespace
}  // namespace tessera::serve
