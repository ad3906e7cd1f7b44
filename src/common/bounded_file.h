// Reading a file that came from outside the process (a flag's file, a config, a spec, a snapshot,
// a token, a checkpoint or lease file another process wrote) with a bound: only a regular file,
// and never more than the caller's limit. /dev/zero, a symlink to it, a FIFO or a 2 GiB sparse
// file are refused at once, by name, without reading them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "common/error.h"

namespace tessera {

// Limits by what a file holds; a caller whose format needs more names its own.
inline constexpr size_t kMaxConfigFileBytes = size_t{1} << 20;  // configs, tables, snapshots
inline constexpr size_t kMaxStateFileBytes = size_t{1} << 20;   // lease files, checkpoints
inline constexpr size_t kMaxTokenFileBytes = size_t{64} << 10;  // bearer and admin tokens
inline constexpr size_t kMaxPemFileBytes = size_t{1} << 20;     // CA bundles, certificates, keys

// What a file is, for messages: "a regular file", "a directory", "a FIFO", "a socket", "a
// symbolic link", "a character device", "a block device", or "an unknown kind of file".
const char* FileKind(mode_t mode);

// The whole of `path` when it is a regular file of at most `max_bytes` (symlinks are followed).
//  - NotFound when it does not exist (other open failures by errno, naming the path);
//  - InvalidArgument "<path>: a FIFO, not a regular file" (a character or block device, a socket,
//    a directory) before a byte is read; opening it never blocks and never has a device's
//    side effects, since its type is checked before the open and again on the descriptor;
//  - InvalidArgument "<path>: larger than <max_bytes> bytes" when its size says so, or when
//    reading finds more (procfs files say 0): at most max_bytes + 1 bytes are ever read.
Result<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes);

}  // namespace tessera
