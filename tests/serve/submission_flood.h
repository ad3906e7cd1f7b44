// Floods a real tessera-serve with submissions from several connections at once, and reads the
// counters of its /metrics (how many scheduling passes the flood cost).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "serve/serve_process.h"

namespace tessera::testing {

// A counter of /metrics, read as the admin; 0 (and a failed expectation) when it is not there.
inline uint64_t MetricCounter(const ServeProcess& serve, const std::string& name) {
  auto metrics = serve.Connect(serve.admin_token())->Call("GET", "/metrics");
  EXPECT_TRUE(metrics.ok());
  if (!metrics.ok()) return 0;
  const auto at = metrics->body.find("\n" + name + " ");
  EXPECT_NE(at, std::string::npos) << name;
  if (at == std::string::npos) return 0;
  return std::stoull(metrics->body.substr(at + name.size() + 2));
}

// What a flood got: how many submissions were accepted (202) and how many answered otherwise.
struct FloodCounts {
  int accepted = 0;
  int other = 0;
};

// POSTs `body` to /v1/containers `count` times in all, from `threads` admin connections at once.
inline FloodCounts FloodSubmissions(const ServeProcess& serve, const std::string& body, int count,
                                    int threads) {
  std::atomic<int> accepted{0}, other{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&] {
      auto connection = serve.Connect(serve.admin_token());
      for (int i = 0; i < count / threads; ++i) {
        auto answer = connection->Call("POST", "/v1/containers", body, {});
        (answer.ok() && answer->status == 202 ? accepted : other)++;
      }
    });
  }
  for (auto& sender : senders)
    sender.join();
  return {accepted.load(), other.load()};
}

}  // namespace tessera::testing
