// Server URLs of `tessera run` and `tessera top`: scheme, IPv6 brackets, default port.
#include <gtest/gtest.h>

#include "client/client.h"

namespace tessera::client {
namespace {

TEST(ParseServer, HttpsSchemeIPv6BracketsAndDefaultPort) {
  auto https = ParseServer("https://api.example.com:8443/");
  ASSERT_TRUE(https.ok());
  EXPECT_TRUE(https->tls);
  EXPECT_EQ(https->host, "api.example.com");
  EXPECT_EQ(https->port, 8443);
  auto v6 = ParseServer("https://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9000);
  auto v6_default = ParseServer("https://[fe80::1]");
  ASSERT_TRUE(v6_default.ok());
  EXPECT_EQ(v6_default->host, "fe80::1");
  EXPECT_EQ(v6_default->port, 8080);
  auto plain = ParseServer("http://127.0.0.1:8080");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->host, "127.0.0.1");
  EXPECT_FALSE(ParseServer("https://host:99999").ok());
}

}  // namespace
}  // namespace tessera::client
