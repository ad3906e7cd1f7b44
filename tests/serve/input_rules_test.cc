// Pure rules applied to untrusted input before anything acts on it.
#include <gtest/gtest.h>

#include "api/api.h"
#include "common/untrusted_text.h"
#include "fleet/fleet.h"

namespace tessera {
namespace {

TEST(JsonNesting, AllowsThirtyTwoLevelsAndNamesWhereTheThirtyThirdBegins) {
  std::string ok = std::string(31, '[') + "{}" + std::string(31, ']');
  EXPECT_TRUE(CheckJsonNesting(ok).ok());
  std::string deep = std::string(33, '[') + std::string(33, ']');
  auto status = CheckJsonNesting(deep);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message.rfind("[0][0]", 0), 0u) << status.error().message;

  auto field = CheckJsonNesting(R"({"a":1,"volumes":[{"x":2},{"name":)" + std::string(40, '[') +
                                std::string(40, ']') + "}]}");
  ASSERT_FALSE(field.ok());
  EXPECT_EQ(field.error().message.rfind("volumes[1].name[0]", 0), 0u) << field.error().message;
  EXPECT_NE(field.error().message.find("nested deeper than 32 levels"), std::string::npos);
}

TEST(JsonNesting, BracketsInsideStringsDoNotCount) {
  std::string text = R"({"k":")" + std::string(100, '[') + R"(\"[{"})";
  EXPECT_TRUE(CheckJsonNesting(text).ok());
}

TEST(JsonNesting, TheTopLevelBeingTooDeepNamesTheDocument) {
  auto status = CheckJsonNesting("[[[[", "volumes", 3);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message.rfind("[0][0][0]: nested deeper than 3", 0), 0u)
      << status.error().message;
  status = CheckJsonNesting("[", "volumes", 0);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message.rfind("volumes: nested deeper than 0", 0), 0u);
}

TEST(JsonNesting, KeysInThePathAreShortAndPrintable) {
  std::string key(500, 'k');
  key[3] = '\x01';
  auto status = CheckJsonNesting("{\"" + key + "\":[[[[", "body", 3);
  ASSERT_FALSE(status.ok());
  EXPECT_LT(status.error().message.size(), 200u);
  EXPECT_EQ(status.error().message.find('\x01'), std::string::npos);
}

TEST(Excerpt, CutsAndMasks) {
  EXPECT_EQ(Excerpt("abc"), "abc");
  EXPECT_EQ(Excerpt(std::string(100, 'x'), 10), "xxxxxxxxxx...");
  EXPECT_EQ(Excerpt("a\nb\xff"), "a?b?");
}

TEST(ImageReference, AcceptsRegistryReferences) {
  for (const char* image :
       {"busybox", "busybox:1.36", "library/busybox", "docker.io/library/busybox:latest",
        "localhost/busybox-static:latest", "localhost:5000/a/b", "registry.example:5000/team/app",
        "r.example/a__b/c--d/e.f:T_1.x-y",
        "busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "busybox:1@sha512:0123456789abcdef0123456789abcdef0123456789abcdef"}) {
    EXPECT_EQ(fleet::CheckImageReference(image), "") << image;
  }
}

TEST(ImageReference, RefusesTransportsPathsAndMalformedNames) {
  for (const char* image : {"docker-archive:/etc/shadow",
                            "oci-archive:/x.tar",
                            "dir:/etc",
                            "oci:/x",
                            "oci:latest",
                            "containers-storage:[overlay@/var/lib/containers/storage]busybox",
                            "docker-daemon:busybox:latest",
                            "docker://busybox",
                            "ostree:x",
                            "sif:/x.sif",
                            "tarball:/x",
                            "/etc/shadow",
                            "./x",
                            "../x",
                            "a//b",
                            "a/",
                            "Busybox",
                            "busybox:",
                            "busybox:-x",
                            "busybox@sha256:abc",
                            "busybox@:0123456789abcdef0123456789abcdef",
                            "-busybox",
                            "busy box",
                            "busybox\n",
                            "a_-b",
                            "a..b",
                            "localhost:abc/x",
                            "exa mple.com/x",
                            "",
                            "a:b:c"}) {
    EXPECT_NE(fleet::CheckImageReference(image), "") << image;
  }
  EXPECT_NE(fleet::CheckImageReference(std::string(600, 'a')), "");
  EXPECT_NE(fleet::CheckImageReference(std::string(300, 'a')), "") << "name over 255";
}

TEST(MigProfileName, AcceptsNvmlProfileNamesOnly) {
  for (const char* name : {"1g.10gb", "1g.10gb+me", "1g.20gb", "3g.40gb", "7g.80gb", "1c.3g.40gb",
                           "1g.24gb-me", "4g.71gb+gfx"})
    EXPECT_EQ(fleet::CheckMigProfileName(name), "") << name;
  for (const char* name : {"", "1g", "g.10gb", "0g.10gb", "1g.10GB", "1g.10gb+", "../1g.10gb",
                           "1g.10gb\n", "1g.10gb 2g.20gb", "123g.10gb", "1g.10gb+me+me+me+me+me"})
    EXPECT_NE(fleet::CheckMigProfileName(name), "") << name;
  EXPECT_NE(fleet::CheckMigProfileName(std::string(33, '1')), "");
}

TEST(ConnectionCap, StaysBelowTheDescriptorLimit) {
  EXPECT_EQ(api::EffectiveConnectionCap(1024, 1048576), 1024);
  EXPECT_EQ(api::EffectiveConnectionCap(1024, 1024), 960);
  EXPECT_EQ(api::EffectiveConnectionCap(1024, 128), 64);
  EXPECT_EQ(api::EffectiveConnectionCap(1024, 10), 1);
}

}  // namespace
}  // namespace tessera
