// What tessera-serve's path flags name on this host, checked at start: a directory where one is
// read or made, a regular file where a library is loaded, a program where one is run. Only
// stat(2), lstat(2) and a PATH search: nothing is opened, so a FIFO or a device a flag names is
// refused without blocking and without a device's side effects. Errors name the flag and path.
// The syntax of the same paths is flag_checks.h's.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace tessera::serve {

// An existing directory (--root, --telemetry-proc-dir); symbolic links are followed.
Status CheckDirectory(std::string_view flag, const std::string& path);

// A directory the service makes when it is missing (--data-dir, --cdi-dir, --mps-root): an
// existing one is a directory, and a missing one's nearest existing ancestor is a directory.
Status CheckDirectoryToMake(std::string_view flag, const std::string& path);

// A file the service replaces by renaming onto it (--lease-file, --port-file): not a directory,
// and its nearest existing ancestor is a directory.
Status CheckFileToWrite(std::string_view flag, const std::string& path);

// No component of the part of `path` that exists is a symbolic link, so that the path is the one
// the kernel shows in /proc/self/mountinfo for what gets mounted under it. The error names the
// link and the path without links to give instead.
Status CheckNoSymlinks(std::string_view flag, const std::string& path);

// A library the service dlopen()s (--nvml, --nvfm-library): a bare name is the dynamic loader's
// to search; a path (it holds a `/`) must exist and be a regular file, since dlopen() of a FIFO
// blocks in open() and one of a device reads it.
Status CheckLibrary(std::string_view flag, const std::string& name_or_path);

// A program the service runs (--mps-control, --nvidia-smi, a firmware check): found where exec
// finds it (its path, or the first match in PATH) and a regular, executable file.
Status CheckProgram(std::string_view flag, const std::string& program);

}  // namespace tessera::serve
