// tessera-lease-sync: the node agent's link to the API server (src/nodeagent/lease_sync.h says
// what it does). Exit codes: 2 for a bad flag, 4 when the API server, the inventory or the
// fabric manager fails it.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>

#include "nodeagent/lease_sync.h"
#include "nodeagent/lease_sync_options.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) {
  g_stop = true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  nodeagent::LeaseSyncOptions options;
  CLI::App app{"tessera-lease-sync: GpuLeases of this node -> the node lease file"};
  nodeagent::AddLeaseSyncFlags(app, options);
  CLI11_PARSE(app, argc, argv);
  if (auto checked = nodeagent::CheckLeaseSyncOptions(options); !checked) {
    std::fprintf(stderr, "tessera-lease-sync: %s\n", checked.error().message.c_str());
    return 2;
  }
  nodeagent::LeaseSyncSetup setup;
  if (int code = nodeagent::PrepareLeaseSync(options, setup); code != 0) return code;
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  return nodeagent::RunLeaseSync(options, setup, g_stop);
}
