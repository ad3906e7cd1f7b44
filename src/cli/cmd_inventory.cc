// `tessera inventory`: print what the host has.
#include <iostream>
#include <optional>

#include "cli/commands.h"
#include "inventory/inventory.h"

namespace tessera::cli {

void AddInventoryCommand(CLI::App& app) {
  struct Options {
    std::string root = "/";
    std::string format = "table";
    std::optional<std::string> nvml;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("inventory",
                                     "List GPUs, accelerators, NVSwitches, their device "
                                     "nodes and the NVIDIA driver's files");
  cmd->add_option("--root", options->root, "Host root to read (a fixture tree in tests)")
      ->capture_default_str();
  cmd->add_option("--format", options->format, "Output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--nvml", options->nvml,
                  "NVML library for MIG facts, loaded when a GPU is MIG-capable (default "
                  "libnvidia-ml.so.1 for root /, none for another root; \"\" = none)");
  cmd->callback([options] {
    inventory::ReadOptions read;
    read.root = options->root;
    read.nvml_library = options->nvml ? *options->nvml : inventory::DefaultNvmlLibrary(read.root);
    auto inv = inventory::ReadInventory(read);
    if (!inv) Fail(inv.error());
    if (options->format == "json") {
      std::cout << inventory::ToJson(*inv) << '\n';
    } else {
      std::cout << inventory::ToTable(*inv);
    }
  });
}

}  // namespace tessera::cli
