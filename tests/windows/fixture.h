// Loads the Windows snapshot fixtures under tests/fixtures/windows.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "windows/windows.h"

namespace tessera::windows::testing {

inline std::string FixturePath(const std::string& name) {
  return std::string(TESSERA_FIXTURES_DIR) + "/windows/" + name;
}

inline std::string ReadFixture(const std::string& name) {
  std::ifstream in(FixturePath(name), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline Snapshot LoadFixture(const std::string& name) {
  auto s = ParseSnapshot(ReadFixture(name));
  EXPECT_TRUE(s.ok()) << name << ": " << (s.ok() ? "" : s.error().message);
  return s.ok() ? *s : Snapshot{};
}

// Format 2 (Hyper-V facts): the five hosts of the Hyper-V GPU preflight.
inline const char* kHyperVFixtures[] = {"ws2022-dda-t4.json", "ws2022-dda-rmrr.json",
                                        "ws2022-no-acs.json", "ws2019-17763-dda.json",
                                        "ws2022-t4-not-dismounted.json"};

inline const char* kAllFixtures[] = {"ws2022-aws-4xt4.json",
                                     "ws2019-t4.json",
                                     "ws2025-l4.json",
                                     "laptop-igpu-dgpu.json",
                                     "mcdm-compute-only.json",
                                     "malformed-copytovm.json",
                                     "ws2022-dda-t4.json",
                                     "ws2022-dda-rmrr.json",
                                     "ws2022-no-acs.json",
                                     "ws2019-17763-dda.json",
                                     "ws2022-t4-not-dismounted.json"};

}  // namespace tessera::windows::testing
