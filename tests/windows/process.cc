#include "windows/process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tessera::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string TesseraBinary() {
  return std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera";
}

ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& path_prefix,
                         bool keep_path) {
  char dir_template[] = "/tmp/tessera-proc-XXXXXX";
  std::string dir = mkdtemp(dir_template);
  std::string out_path = dir + "/out";
  std::string err_path = dir + "/err";
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    dup2(err, 2);
    if (!path_prefix.empty()) {
      const char* old = std::getenv("PATH");
      std::string path =
          keep_path ? path_prefix + ":" + (old ? old : "/usr/bin:/bin") : path_prefix;
      setenv("PATH", path.c_str(), 1);
    }
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  rmdir(dir.c_str());
  return r;
}

}  // namespace tessera::testing
