// Durations typed on the command line (`token create --expires`, `audit --since`): units added
// up, and every malformed or oversized text refused with the flag named.
#include "client/duration_flag.h"

#include <gtest/gtest.h>

namespace tessera::client {
namespace {

TEST(DurationFlag, ReadsEachUnit) {
  EXPECT_EQ(*ParseDurationFlag("45s", "--since"), 45);
  EXPECT_EQ(*ParseDurationFlag("90m", "--since"), 90 * 60);
  EXPECT_EQ(*ParseDurationFlag("24h", "--since"), 24 * 3600);
  EXPECT_EQ(*ParseDurationFlag("30d", "--expires"), 30 * 86400);
  EXPECT_EQ(*ParseDurationFlag("2w", "--expires"), 14 * 86400);
}

TEST(DurationFlag, AddsUpGroups) {
  EXPECT_EQ(*ParseDurationFlag("1h30m", "--since"), 5400);
  EXPECT_EQ(*ParseDurationFlag("1d12h5s", "--since"), 86400 + 12 * 3600 + 5);
}

TEST(DurationFlag, RefusesBareNumbersAndUnknownUnits) {
  for (const char* text :
       {"", "30", "d", "30x", "1h30", "-5m", "+5m", " 5m", "5m ", "1.5h", "5M"}) {
    auto parsed = ParseDurationFlag(text, "--expires");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.error().category, ErrorCategory::kInvalidArgument) << text;
    EXPECT_NE(parsed.error().message.find("--expires"), std::string::npos);
  }
}

TEST(DurationFlag, RefusesZero) {
  auto parsed = ParseDurationFlag("0s", "--since");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().message.find("longer than 0"), std::string::npos);
}

TEST(DurationFlag, RefusesWhatWouldOverflowOrPassAHundredYears) {
  EXPECT_EQ(*ParseDurationFlag("36600d", "--since"), kMaxDurationFlagSeconds);
  for (const char* text :
       {"36601d", "99999999999w", "9223372036854775807s", "18446744073709551616s",
        "999999999999999999999999999999d", "36600d1s"}) {
    auto parsed = ParseDurationFlag(text, "--since");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.error().message.find("100 years"), std::string::npos) << text;
  }
}

TEST(DurationFlag, QuotesHostileTextOnlyAsAPrintableExcerpt) {
  std::string hostile = "\x1b[31m" + std::string(10000, '9') + "\n";
  auto parsed = ParseDurationFlag(hostile, "--since");
  ASSERT_FALSE(parsed.ok());
  EXPECT_LT(parsed.error().message.size(), 200u);
  for (char c : parsed.error().message)
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
}

}  // namespace
}  // namespace tessera::client
