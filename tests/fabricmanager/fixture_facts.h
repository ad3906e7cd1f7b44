// A fixture host's facts as doctor and the Service VM read them (no program asked).
#pragma once

#include <gtest/gtest.h>

#include "runtimes/runtimes.h"
#include "support/fixture_host.h"

namespace tessera::testing {

inline runtimes::HostFacts FixtureFacts(const std::string& fixture) {
  runtimes::HostFactsOptions read;
  read.root = MaterializeHost(fixture);
  read.ask_tools = false;
  auto facts = runtimes::ReadHostFacts(read);
  EXPECT_TRUE(facts.ok()) << facts.error().message;
  return facts.ok() ? std::move(*facts) : runtimes::HostFacts{};
}

}  // namespace tessera::testing
