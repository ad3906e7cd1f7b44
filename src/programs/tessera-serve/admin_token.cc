// The admin token: a file under --data-dir (or --admin-token-file), or with the store in the
// cluster a hash in a Secret that every replica shares.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "backends/kubernetes/state_objects.h"
#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "wiring.h"

namespace tessera::serve_program {
namespace {

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.pop_back();
  return text;
}

constexpr size_t kMinAdminToken = 32;

// A new admin token, written 0600 to `path` and shown once on stdout.
void ShowNewAdminToken(const std::string& path, const std::string& token) {
  std::printf("tessera serve: admin token (written to %s, shown only this once): %s\n",
              path.c_str(), token.c_str());
  std::fflush(stdout);
}

}  // namespace

Result<std::string> AdminToken(const std::string& path) {
  auto existing = ReadBoundedFile(path, kMaxTokenFileBytes);
  if (existing) {
    std::string token = Trim(*existing);
    // The admin token opens every tenancy: one an attacker can guess is no lock at all.
    if (token.size() < kMinAdminToken)
      return InvalidArgument("admin token file " + path + " holds " + std::to_string(token.size()) +
                             " characters; at least " + std::to_string(kMinAdminToken) +
                             " are needed (remove the file to have a random one generated)");
    for (char c : token) {
      if (c < 0x21 || c > 0x7e)
        return InvalidArgument("admin token file " + path +
                               ": the token may hold only printable ASCII without spaces");
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      spdlog::warn("admin token file {} is readable by group or others (mode {:o}); chmod 600 it",
                   path, st.st_mode & 0777);
    }
    return token;
  }
  if (existing.error().category != ErrorCategory::kNotFound) return existing.error();
  auto secret = fleet::RandomHex(24);
  if (!secret) return secret.error();
  std::string token = "tsa_" + *secret;
  if (auto status = WriteFileAtomically(path, token + "\n", 0600); !status) return status.error();
  ShowNewAdminToken(path, token);
  return token;
}

namespace {

// The first replica of a new control plane: the first to create the Secret wins, and only its
// token is written and shown.
std::string NewClusterAdminToken(k8s::ClusterStore& cluster, const std::string& path) {
  auto secret = fleet::RandomHex(24);
  if (!secret) Die(secret.error());
  const std::string token = "tsa_" + *secret;
  std::string hash = fleet::Sha256Hex(token);
  auto status = cluster.PutAdminTokenHash(hash, false);
  if (!status && status.error().category == ErrorCategory::kAlreadyExists) {
    auto held = cluster.AdminTokenHash();
    if (!held || !*held) Die(Unavailable("admin token Secret: created and gone again"));
    return **held;
  }
  if (!status) Die(status.error().WithContext("admin token Secret"));
  if (auto written = WriteFileAtomically(path, token + "\n", 0600); !written) Die(written.error());
  ShowNewAdminToken(path, token);
  return hash;
}

}  // namespace

// A file this replica has (the chart mounts one Secret into every replica) is the truth and its
// hash is written to the cluster; without one, the hash the cluster holds stays valid (a replica
// with an empty data dir loses nothing); only a cluster without one gets a new token.
std::string ClusterAdminTokenHash(k8s::ClusterStore& cluster, const ServeFlags& flags,
                                  const std::string& path) {
  auto held = cluster.AdminTokenHash();
  if (!held) Die(held.error().WithContext("admin token Secret"));
  if (std::filesystem::exists(path)) {
    auto admin = AdminToken(path);
    if (!admin) Die(admin.error().WithContext("admin token"));
    std::string hash = fleet::Sha256Hex(*admin);
    if (*held != hash) {
      if (auto status = cluster.PutAdminTokenHash(hash, true); !status)
        Die(status.error().WithContext("admin token Secret"));
    }
    return hash;
  }
  if (!*held) return NewClusterAdminToken(cluster, path);
  spdlog::info("admin token: the hash in Secret {}/{} (no token file at {})", StateNamespace(flags),
               k8s::kAdminTokenSecret, path);
  return **held;
}

}  // namespace tessera::serve_program
