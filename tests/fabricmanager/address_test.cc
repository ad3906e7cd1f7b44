#include <gtest/gtest.h>

#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

TEST(FabricAddress, HostWithAndWithoutPort) {
  auto plain = ParseFabricAddress("10.0.0.5");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_FALSE(plain->unix_socket);
  EXPECT_EQ(plain->host, "10.0.0.5");
  EXPECT_EQ(plain->port, 6666);
  EXPECT_EQ(plain->ToString(), "10.0.0.5:6666");
  auto named = ParseFabricAddress("fm-vm.cluster.local:7000");
  ASSERT_TRUE(named.ok()) << named.error().message;
  EXPECT_EQ(named->host, "fm-vm.cluster.local");
  EXPECT_EQ(named->port, 7000);
}

TEST(FabricAddress, UnixSocket) {
  auto socket = ParseFabricAddress("unix:/run/nvidia-fabricmanager/socket");
  ASSERT_TRUE(socket.ok());
  EXPECT_TRUE(socket->unix_socket);
  EXPECT_EQ(socket->path, "/run/nvidia-fabricmanager/socket");
  EXPECT_EQ(socket->ToString(), "unix:/run/nvidia-fabricmanager/socket");
}

TEST(FabricAddress, RefusesWhatTheApiCannotTake) {
  for (const char* bad : {"", "unix:", "unix:relative/socket", "10.0.0.5:", "10.0.0.5:0",
                          "10.0.0.5:65536", "10.0.0.5:66x", "256.1.1.1", "10.0.0", "1.2.3.4.5",
                          "[::1]:6666", "fe80::1", "-bad.host", "a..b", "host name", "h\xff"}) {
    auto parsed = ParseFabricAddress(bad);
    EXPECT_FALSE(parsed.ok()) << "accepted \"" << bad << "\"";
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.error().category, ErrorCategory::kInvalidArgument);
    }
  }
  auto v6 = ParseFabricAddress("[::1]:6666");
  EXPECT_NE(v6.error().message.find("IPv6 is not supported"), std::string::npos);
  std::string long_path = "unix:/" + std::string(300, 'a');
  EXPECT_NE(ParseFabricAddress(long_path).error().message.find("longer than 255 bytes"),
            std::string::npos);
  // Nothing an operator typed is echoed whole.
  std::string huge(5000, 'x');
  EXPECT_LT(ParseFabricAddress(huge + ":1:2").error().message.size(), 300u);
}

}  // namespace
}  // namespace tessera::fabricmanager
