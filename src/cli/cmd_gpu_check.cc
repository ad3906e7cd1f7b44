// `tessera gpu-check`: the post-lease firmware check on this node. With --record it records a
// baseline for each GPU that has none (the Kubernetes node agent's init container, before any
// lease); without, it compares each GPU's option ROM with its baseline (the firmware-check
// Job). Exit 0 all pass (or recorded/kept), 1 any fail, 2 usage errors.
#include <ctime>
#include <iostream>

#include "cli/commands.h"
#include "firmware/firmware.h"
#include "inventory/inventory.h"

namespace tessera::cli {

void AddGpuCheckCommand(CLI::App& app) {
  struct Options {
    std::string root = "/";
    std::string baseline_dir = firmware::kDefaultBaselineDir;
    bool record = false;
    bool all = false;
    std::string format = "text";
    std::vector<std::string> gpus;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "gpu-check", "Check GPUs' option ROMs against their recorded baselines (or --record them)");
  cmd->add_option("--root", options->root, "Host root to read (a fixture tree in tests)")
      ->capture_default_str();
  cmd->add_option("--baseline-dir", options->baseline_dir,
                  "Directory of baselines, one file per PCI address")
      ->capture_default_str();
  cmd->add_flag("--record", options->record,
                "Record a baseline for each GPU that has none (an existing one is never replaced)");
  cmd->add_option("--format", options->format, "Output format: text or json")
      ->capture_default_str();
  cmd->add_option("--gpu", options->gpus, "PCI address of a GPU (repeatable)");
  cmd->add_flag("--all", options->all, "Every GPU the inventory finds under --root");
  cmd->callback([options] {
    // Usage is checked here, not by CLI11 validators, so that every usage error exits 2.
    if (options->format != "text" && options->format != "json")
      Fail(InvalidArgument("--format " + options->format + ": want text or json"));
    if (options->all == !options->gpus.empty())
      Fail(InvalidArgument("gpu-check: give --gpu PCI (repeatable) or --all, not both"));
    if (options->baseline_dir.empty()) Fail(InvalidArgument("--baseline-dir: empty"));
    std::vector<std::string> gpus;
    for (const auto& text : options->gpus) {
      auto address = firmware::CanonicalPciAddress(text, "--gpu");
      if (!address) Fail(address.error());
      gpus.push_back(std::move(*address));
    }
    if (options->all) {
      inventory::ReadOptions read;
      read.root = options->root;
      read.read_pci_ids = false;
      read.read_driver_files = false;
      auto inv = inventory::ReadInventory(read);
      if (!inv) Fail(inv.error());
      for (const auto* gpu : inv->Gpus())
        gpus.push_back(gpu->pci_address);
    }

    firmware::BaselineStore store(options->baseline_dir);
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    std::vector<firmware::GpuReport> reports;
    for (const auto& pci : gpus) {
      reports.push_back(options->record ? firmware::RecordGpu(options->root, store, pci, now)
                                        : firmware::CheckGpu(options->root, store, pci));
    }
    std::cout << (options->format == "json" ? firmware::ToJson(reports)
                                            : firmware::ToText(reports));
    std::cout.flush();
    if (firmware::AnyFailed(reports)) throw CLI::RuntimeError(1);
  });
}

}  // namespace tessera::cli
