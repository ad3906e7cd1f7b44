// Containers that list the GPU device nodes they were given: the script they run and the nodes a
// running one listed (read from its logs through the API).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "support/wait.h"

namespace tessera::testing {

// Lists the GPU device nodes, then keeps running.
inline const char* kListDeviceNodes =
    "for n in /dev/nvidia[0-9]* /dev/nvidia-caps/*; do [ -e \"$n\" ] && echo \"$n\"; done; "
    "echo listed; exec sleep 600";

// The device nodes container `id` listed, once its logs say it is done listing.
inline std::vector<std::string> ListedDeviceNodes(client::Connection& admin,
                                                  const std::string& id) {
  std::string logs;
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto response = admin.Call("GET", "/v1/containers/" + id + "/logs");
        logs = response ? response->body : "";
        return logs.find("listed\n") != std::string::npos;
      },
      std::chrono::seconds(120)))
      << logs;
  std::vector<std::string> nodes;
  std::istringstream lines(logs);
  for (std::string line; std::getline(lines, line) && line != "listed";)
    nodes.push_back(line);
  return nodes;
}

}  // namespace tessera::testing
