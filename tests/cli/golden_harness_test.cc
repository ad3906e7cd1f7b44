// The golden-output harness itself: what it normalises, and one run of the real binary against a
// real tessera-serve (null backend).
#include <gtest/gtest.h>

#include "cli/golden.h"
#include "serve/null_serve_fixture.h"

namespace tessera::testing {
namespace {

TEST(GoldenNormalize, NumbersIdsInOrderOfFirstAppearance) {
  const std::string text =
      "c-00000000000000ff c-0123456789abcdef\nc-00000000000000ff t-deadbeef t-0badf00d "
      "t-deadbeef\n";
  EXPECT_EQ(NormalizeGolden(text, 0), "c-1 c-2\nc-1 t-1 t-2 t-1\n");
  // Not an ID: too short, too long, upper case.
  EXPECT_EQ(NormalizeGolden("c-0123 c-0123456789abcdef0 c-0123456789ABCDEF\n", 0),
            "c-0123 c-0123456789abcdef0 c-0123456789ABCDEF\n");
}

TEST(GoldenNormalize, TimesAgesMillisecondsAndPorts) {
  EXPECT_EQ(NormalizeGolden("2026-11-29T19:56:12Z 1764446172000\n", 0), "<time> <ms>\n");
  // Ages as a table's cells (between blanks of two or more, or a line's ends); in prose they stay.
  EXPECT_EQ(NormalizeGolden("ID   AGE   STATE\nc-0123456789abcdef   12s   up\n3m   5h\n", 0),
            "ID   AGE   STATE\nc-1   <age>   up\n<age>   <age>\n");
  EXPECT_EQ(NormalizeGolden("--step 1h: want 90s, 30m or 1d\n", 0),
            "--step 1h: want 90s, 30m or 1d\n");
  // A word that merely ends in a unit is no age; a digit run of another length is no time.
  EXPECT_EQ(NormalizeGolden("busybox:1h h100 8 12345\n", 0), "busybox:1h h100 8 12345\n");
  EXPECT_EQ(NormalizeGolden("http://127.0.0.1:41234/v1 0.0.0.0:38001->80/tcp [::]:9\n", 41234),
            "http://<server>/v1 0.0.0.0:<port>->80/tcp [::]:<port>\n");
}

TEST(GoldenNormalize, BlanksInsideLinesButNotIndentation) {
  EXPECT_EQ(NormalizeGolden("ID     STATE   \n  \"a\":  1\n\n", 0), "ID   STATE\n  \"a\":   1\n\n");
  EXPECT_EQ(
      NormalizeGolden("gpu_seconds 0.0123\n", 0, {{"gpu_seconds [0-9.]+", "gpu_seconds <n>"}}),
      "gpu_seconds <n>\n");
}

class GoldenHarness : public NullServeTest {};

TEST_F(GoldenHarness, RunsTheBinaryWithItsOwnEnvironment) {
  StartServe();
  const std::string server = "http://127.0.0.1:" + std::to_string(serve_->port());
  TesseraCli cli(server, serve_->admin_token());
  auto ran = cli.Run({"run", "--gpus", "1", "busybox", "true"});
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  ExpectGolden("harness-run", ran, serve_->port());
  // A token the service does not know: refused, the server named in the message.
  cli.set_token("no-such-token");
  auto refused = cli.Run({"top", "--once"});
  EXPECT_NE(refused.exit_code, 0) << refused.err;
  EXPECT_NE(refused.err.find(server), std::string::npos) << refused.err;
  ExpectGolden("harness-refused", refused, serve_->port());
  // No token at all and none in the (missing) config or the default file: 6 as well.
  cli.set_token("");
  auto none = cli.Run({"run", "busybox", "true"}, {{"TESSERA_TOKEN_FILE", "/nonexistent/token"}});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("/nonexistent/token"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace tessera::testing
