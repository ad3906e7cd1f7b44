// The DRA kubelet plugin on one node, as tessera-dra-plugin runs it:
//  - serves DRAPlugin v1 + v1beta1 on <plugin-dir>/dra.sock, then Registration on
//    <registry-dir>/<driver>-reg.sock (the endpoint must answer before kubelet can dial it);
//  - recreates either socket when it is deleted;
//  - watches the node's GPUs for faults (src/dra/fault_watch.h): a faulted GPU's devices carry
//    the gpu.tessera.dev/fault taint until it is reset and verified (--recover);
//  - publishes the node's ResourceSlice and re-publishes it when presence, faults or the lease
//    file change; the same health feeds the DRAResourceHealth stream.
#pragma once

#include <atomic>
#include <memory>

#include "common/error.h"
#include "dra/plugin_options.h"

namespace tessera::dra {

class KubeletPlugin {
 public:
  // Reads the inventory, opens the fabric manager (when given), connects to the API server and
  // loads the prepared claims of an earlier run; serves nothing yet.
  static Result<std::unique_ptr<KubeletPlugin>> Start(const PluginOptions& options);
  ~KubeletPlugin();
  KubeletPlugin(const KubeletPlugin&) = delete;
  KubeletPlugin& operator=(const KubeletPlugin&) = delete;

  // Serves and publishes until `stop`, then removes both sockets. An error (a socket that cannot
  // be served) returns at once.
  Status Run(const std::atomic<bool>& stop);

 private:
  struct State;
  explicit KubeletPlugin(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tessera::dra
