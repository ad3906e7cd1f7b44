#pragma once
// The client configuration the Kubernetes tests start from: plain HTTP to a FakeApiServer with the
// client's own defaults (a test changes what it is about, e.g. timeouts or retries).
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"

namespace tessera::testing {

inline k8s::ClientConfig PlainConfig(const FakeApiServer& server) {
  k8s::ClientConfig config;
  config.server = server.url();
  return config;
}

}  // namespace tessera::testing
