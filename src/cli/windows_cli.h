// What the `tessera windows` subcommands share (cmd_windows.cc, cmd_windows_hyperv.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/error.h"
#include "windows/hyperv.h"
#include "windows/windows.h"

namespace tessera::cli {

// Reads and parses --snapshot FILE, or fails with the file named.
windows::Snapshot LoadWindowsSnapshot(const std::string& path);

// A refusal (the host cannot do what was asked: schema too old, adapter without a location path)
// is a check that failed, exit 1, not an internal error.
[[noreturn]] void FailWindows(const Error& error);

template <typename T>
T OrFailWindows(Result<T> result) {
  if (!result.ok()) FailWindows(result.error());
  return std::move(*result);
}

// The preflight of --snapshot's GPU (`selector`, or the only candidate when empty) for `image`,
// with the default generation options: what check-image --isolation hyperv --gpu decides on.
windows::HyperVGpuPreflight HyperVGpuPreflightFor(const windows::Snapshot& snapshot,
                                                  const std::string& selector,
                                                  const windows::ImageInfo& image);

// `tessera windows hyperv-gpu` and `tessera windows check-hyperv-gpu` (cmd_windows_hyperv.cc).
void AddHyperVGpuCommands(CLI::App& windows);

}  // namespace tessera::cli
