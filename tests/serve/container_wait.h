// Waiting for a container of a test's tessera-serve to reach a state, over its API.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "serve/serve_process.h"

namespace tessera::testing {

// Polls GET /v1/containers/{id} until its state is one of `states`, for at most `timeout` (a
// generous bound: containers start on a loaded 2-core machine). Returns the last answer; on
// timeout also records a failure with the service's log.
inline nlohmann::json WaitForContainerState(
    client::Connection& connection, const ServeProcess& serve, const std::string& id,
    const std::set<std::string>& states, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  nlohmann::json container;
  while (std::chrono::steady_clock::now() < deadline) {
    container = CallJson(connection, "GET", "/v1/containers/" + id);
    if (container.is_object() && states.count(container.value("state", ""))) return container;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "container " << id << " did not reach the state; last: " << container
                << "\nservice log:\n"
                << serve.log();
  return container;
}

}  // namespace tessera::testing
