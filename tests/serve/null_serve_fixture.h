// A real tessera-serve with the null backend (nothing runs) on the materialized HGX H100 fixture:
// its data, port file and CDI specs in a temporary directory, and a connection as the admin.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "serve/serve_process.h"

namespace tessera::testing {

class NullServeTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = MaterializeHost("hgx-h100-dgx"); }

  // Starts tessera-serve with NullBackendFlags and `extra`, and connects as the admin.
  void StartServe(std::vector<std::string> extra = {}) {
    serve_ = std::make_unique<ServeProcess>(dir_.path(),
                                            NullBackendFlags(root_, dir_.path(), std::move(extra)));
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  std::string root_;
  TempDir dir_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

}  // namespace tessera::testing
