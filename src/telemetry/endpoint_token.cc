// The node agent endpoint's bearer token, from a file that a Kubernetes Secret mounts (kubelet
// updates such a volume by swapping its ..data symlink, so the path's inode changes) or that an
// operator rewrites. See TokenFile in telemetry.h.
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/bounded_file.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

std::array<unsigned char, 32> DigestOf(std::string_view text) {
  std::array<unsigned char, 32> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

std::string_view Trimmed(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kSpace) - first + 1);
}

}  // namespace

Result<std::unique_ptr<TokenFile>> TokenFile::Open(std::string path) {
  auto file = std::unique_ptr<TokenFile>(new TokenFile(path));
  auto text = ReadBoundedFile(path, kMaxTokenFileBytes);
  if (!text) return text.error().WithContext("token file");
  if (Trimmed(*text).empty()) return InvalidArgument("token file " + path + ": holds no token");
  std::lock_guard lock(file->mu_);
  file->Refresh();
  return file;
}

void TokenFile::Refresh() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    stamp_ = Stamp{};
    digest_.reset();
    return;
  }
  Stamp now{st.st_dev, st.st_ino, static_cast<uint64_t>(st.st_size),
            int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
  if (now == stamp_) return;
  stamp_ = now;
  digest_.reset();
  auto text = ReadBoundedFile(path_, kMaxTokenFileBytes);
  if (!text) return;
  std::string_view token = Trimmed(*text);
  if (!token.empty()) digest_ = DigestOf(token);
}

bool TokenFile::Accepts(std::string_view authorization) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() <= kScheme.size() ||
      ::strncasecmp(authorization.data(), kScheme.data(), kScheme.size()) != 0)
    return false;
  const auto offered = DigestOf(Trimmed(authorization.substr(kScheme.size())));
  std::lock_guard lock(mu_);
  Refresh();
  return digest_ && CRYPTO_memcmp(offered.data(), digest_->data(), offered.size()) == 0;
}

}  // namespace tessera::telemetry
