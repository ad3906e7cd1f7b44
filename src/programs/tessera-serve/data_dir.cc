// --data-dir: made, closed to others, and what it held before this start.
#include <sys/stat.h>

#include <filesystem>

#include "wiring.h"

namespace tessera::serve_program {

std::string Absolute(const std::string& path) {
  std::error_code error;
  auto absolute = std::filesystem::absolute(path, error).lexically_normal().string();
  if (absolute.size() > 1 && absolute.back() == '/') absolute.pop_back();
  return error ? path : absolute;
}

DataDir PrepareDataDir(const ServeFlags& flags) {
  DataDir out;
  out.path = Absolute(flags.data_dir);
  // What was there before this start: a store beside an admin token is one the service ran
  // with, and an empty one then is a lost store, not a new one.
  std::error_code error;
  out.ran_before = std::filesystem::exists(
      flags.admin_token_file.empty() ? out.path + "/admin.token" : flags.admin_token_file, error);
  std::filesystem::create_directories(out.path, error);
  if (error) Die(Unavailable("--data-dir " + out.path + ": " + error.message()));
  ::chmod(out.path.c_str(), 0700);

  out.store_kind = !flags.store.empty()            ? flags.store
                   : flags.backend == "kubernetes" ? "cluster"
                                                   : "sqlite";
  if (out.store_kind == "cluster" && flags.backend != "kubernetes")
    Die(InvalidArgument("--store cluster needs --backend kubernetes"));
  out.admin_token_path =
      flags.admin_token_file.empty() ? out.path + "/admin.token" : flags.admin_token_file;
  return out;
}

}  // namespace tessera::serve_program
