// Readiness of running containers with `ready: {httpGet}`: one thread that, every interval
// (~2 s), asks the backend where it knows itself (Exposed: Kubernetes' Pod condition) and
// otherwise probes http://HOST_ADDR:HOST_PORT/PATH on the container's published port
// (http_probe.h), and sets each record's `ready`.
//
// `ready` lives in the model only, never in the store: a probe every 2 s per container would be
// a durable write every 2 s per container for an observation that is stale within one interval
// anyway. After a restart it is false until the first probe answers, which is what a client
// should assume of a container nobody has looked at.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "backends/backend.h"
#include "serve/model.h"

namespace tessera::serve {

class Readiness {
 public:
  Readiness(Model& model, backends::ContainerBackend& backend);
  ~Readiness() { Stop(); }
  Readiness(const Readiness&) = delete;
  Readiness& operator=(const Readiness&) = delete;

  void Start();
  void Stop();
  // One pass now (the thread does the same every interval).
  void Pass();

 private:
  void Loop();

  Model& model_;
  backends::ContainerBackend& backend_;
  std::mutex mu_;  // guards stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::serve
