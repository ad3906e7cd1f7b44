// The `tessera` client run as a process against a test's tessera-serve: its stdout and stderr
// kept apart (stdout is a container's output, stderr what the client says), and its exit code.
#pragma once

#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "serve/serve_process.h"

namespace tessera::testing {

struct CliResult {
  int status = -1;  // exit code; 128+signal when killed
  std::string out;
  std::string err;
};

// `tessera ARGS... ` with --server pointing at `serve`, as the holder of `token`; HOME is `home`
// (no client config of the machine's user applies).
inline CliResult RunTessera(const ServeProcess& serve, const std::string& token,
                            const std::string& home, std::vector<std::string> args) {
  const std::string binary = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera";
  std::vector<std::string> argv = {binary, args.at(0), "--server",
                                   "http://127.0.0.1:" + std::to_string(serve.port())};
  argv.insert(argv.end(), args.begin() + 1, args.end());
  std::vector<std::string> env = {"TESSERA_TOKEN=" + token, "HOME=" + home,
                                  "XDG_CONFIG_HOME=" + home + "/.config", "PATH=/usr/bin:/bin"};
  int out_pipe[2], err_pipe[2];
  CliResult result;
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> arg_ptrs, env_ptrs;
  for (auto& arg : argv)
    arg_ptrs.push_back(arg.data());
  arg_ptrs.push_back(nullptr);
  for (auto& entry : env)
    env_ptrs.push_back(entry.data());
  env_ptrs.push_back(nullptr);
  pid_t pid = -1;
  const int spawned =
      ::posix_spawn(&pid, binary.c_str(), &actions, nullptr, arg_ptrs.data(), env_ptrs.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_count = spawned == 0 ? 2 : 0;
  while (open_count > 0) {
    if (::poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buffer[4096];
      ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  for (auto& fd : fds)
    if (fd.fd >= 0) ::close(fd.fd);
  if (spawned != 0) return result;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return result;
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace tessera::testing
