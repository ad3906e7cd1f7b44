// A real tessera-serve on a materialized fixture host (HGX H100 unless a suite names another) whose
// containers run in podman: a CDI kind
// and an instance name of its own (so parallel tests never see each other's containers or specs),
// the GPUs' option ROMs written for the firmware checks, and everything removed after the test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "serve/container_wait.h"
#include "serve/serve_process.h"
#include "support/podman_harness.h"
#include "support/wait.h"

namespace tessera::testing {

class PodmanServeTest : public ::testing::Test {
 protected:
  // `instance_prefix` names this suite's podman containers; `fixture` is the host tree, with
  // `gpu_count` GPUs.
  explicit PodmanServeTest(std::string instance_prefix, const std::string& fixture = "hgx-h100-dgx",
                           size_t gpu_count = 8)
      : host_(fixture), gpu_count_(gpu_count), instance_prefix_(std::move(instance_prefix)) {}

  void SetUp() override {
    const Podman& podman = Podman::Get();
    ASSERT_TRUE(podman.ready()) << podman.setup_error();
    image_ = podman.image();
    kind_ = UniqueTestKind("gpu");
    instance_ = instance_prefix_ + "-" + std::to_string(::getpid()) + "-" +
                kind_.substr(kind_.rfind('-') + 1);
    gpus_ = WriteGpuRoms(host_.root());
    ASSERT_EQ(gpus_.size(), gpu_count_);
  }

  void TearDown() override {
    serve_.reset();
    RemoveInstanceContainers(instance_);
    RemoveSpecsOfKind(kind_);
  }

  void StartServe(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {"--root",     host_.root(), "--cdi-kind",     kind_,
                                      "--instance", instance_,    "--stop-grace-s", "1"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServeProcess>(dir_.path(), flags);
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  void Restart() {
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  // POST /v1/containers as the admin.
  nlohmann::json Post(const nlohmann::json& body, int* status) {
    return CallJson(*admin_, "POST", "/v1/containers", body.dump(), status);
  }

  // POSTs `body` to /v1/containers as the admin, expects 202 and returns the new container's ID
  // ("" when it was refused).
  std::string SubmitAccepted(const nlohmann::json& body) {
    int status = 0;
    auto answer = Post(body, &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  // Waits until container `id` is in one of `states` (at most 240 s: containers start slowly on a
  // loaded machine); returns the last answer.
  nlohmann::json WaitFor(const std::string& id, const std::set<std::string>& states) {
    return WaitForContainerState(*admin_, *serve_, id, states, std::chrono::seconds(240));
  }

  // GET that answered 200: a call that failed on the way (a loaded machine) is made again.
  nlohmann::json Get(const std::string& path) {
    nlohmann::json answer;
    int status = 0;
    EXPECT_TRUE(WaitUntil(
        [&] {
          answer = CallJson(*admin_, "GET", path, "", &status);
          return status == 200;
        },
        std::chrono::seconds(60)))
        << path << " answered " << status << ": " << answer;
    return answer;
  }

  TempHost host_;
  size_t gpu_count_;
  TempDir dir_;
  std::string image_, kind_, instance_;
  std::vector<std::string> gpus_;  // PCI addresses, with their ROMs written
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;

 private:
  std::string instance_prefix_;
};

}  // namespace tessera::testing
