// The server's PEM files: read with a bound, the key's mode checked, and looked at again (at most
// once per poll interval, on a new connection) so that a rotated certificate is served without a
// restart. Connections keep the context they began with.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include "common/bounded_file.h"
#include "tls/tls.h"

namespace tessera::tls {
namespace {

Result<std::string> ReadPem(std::string_view flag, const std::string& path) {
  auto text = ReadBoundedFile(path, kMaxPemFileBytes);
  if (!text) return text.error().WithContext(flag);
  return *text;
}

// A private key others may read is as good as published; its group reading it is how a
// Kubernetes Secret volume with an fsGroup hands it over, so that is only worth a warning.
Status CheckKeyMode(const std::string& flag, const std::string& path, std::string* warning) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return ErrnoError(flag + " " + path, errno);
  if (info.st_mode & S_IROTH) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(info.st_mode & 0777));
    return PermissionDenied(flag + " " + path + ": readable by every user (mode " + mode +
                            "); allow the owner (and at most its group) only: chmod 600");
  }
  if ((info.st_mode & S_IRGRP) && warning) *warning = flag + " " + path + ": readable by its group";
  return Ok();
}

}  // namespace

Result<ServerPem> ReadServerFiles(const ServerFiles& files, std::string* warning) {
  ServerPem pem;
  auto cert = ReadPem(files.flag_prefix + "cert", files.cert);
  if (!cert) return cert.error();
  pem.cert = std::move(*cert);
  if (auto status = CheckKeyMode(files.flag_prefix + "key", files.key, warning); !status)
    return status.error();
  auto key = ReadPem(files.flag_prefix + "key", files.key);
  if (!key) return key.error();
  pem.key = std::move(*key);
  if (!files.client_ca.empty()) {
    auto ca = ReadPem(files.flag_prefix + "client-ca", files.client_ca);
    if (!ca) return ca.error();
    pem.client_ca = std::move(*ca);
  }
  return pem;
}

Result<std::unique_ptr<ServerContextSource>> ServerContextSource::Open(
    ServerFiles files, std::chrono::milliseconds poll) {
  std::unique_ptr<ServerContextSource> source(new ServerContextSource(std::move(files), poll));
  const Stamps stamps = source->Look();
  std::string warning;
  auto pem = ReadServerFiles(source->files_, &warning);
  if (!pem) return pem.error();
  if (!warning.empty()) spdlog::warn("tls: {}", warning);
  auto ctx = BuildServerContext(*pem);
  if (!ctx) {
    // Name the file the failing part came from.
    const auto& message = ctx.error().message;
    const ServerFiles& named = source->files_;
    const std::string file = message.rfind("key", 0) == 0 ? named.flag_prefix + "key " + named.key
                             : message.rfind("client CA", 0) == 0
                                 ? named.flag_prefix + "client-ca " + named.client_ca
                                 : named.flag_prefix + "cert " + named.cert;
    return ctx.error().WithContext(file);
  }
  source->current_ = std::move(*ctx);
  source->tried_ = stamps;
  source->looked_ = std::chrono::steady_clock::now();
  source->generation_ = 1;
  return source;
}

ServerContextSource::Stamps ServerContextSource::Look() const {
  auto stamp = [](const std::string& path) {
    Stamp out;
    struct stat info {};
    if (path.empty() || ::stat(path.c_str(), &info) != 0) return out;
    out.device = info.st_dev;
    out.inode = info.st_ino;
    out.size = static_cast<uint64_t>(info.st_size);
    out.mtime_ns = int64_t{info.st_mtim.tv_sec} * 1000000000 + info.st_mtim.tv_nsec;
    return out;
  };
  return {stamp(files_.cert), stamp(files_.key), stamp(files_.client_ca)};
}

ContextPtr ServerContextSource::Current() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - looked_ >= poll_) {
    looked_ = now;
    const Stamps seen = Look();
    if (!(seen == tried_)) Reload(seen);
  }
  return current_;
}

void ServerContextSource::Reload(const Stamps& seen) {
  // Remembered even when the build fails: a broken file is reported once, and tried again
  // only once it changes (the rest of a rotation written after it).
  tried_ = seen;
  std::string warning;
  auto pem = ReadServerFiles(files_, &warning);
  Result<ContextPtr> ctx = pem ? BuildServerContext(*pem) : Result<ContextPtr>(pem.error());
  if (!ctx) {
    spdlog::error(
        "tls: the changed certificate files do not load; still serving the previous "
        "certificate: {}",
        ctx.error().message);
    return;
  }
  if (!warning.empty()) spdlog::warn("tls: {}", warning);
  current_ = std::move(*ctx);
  ++generation_;
  auto serial = CertificateSerial(pem->cert);
  spdlog::info("tls: loaded the changed certificate {} (serial {}) for new connections",
               files_.cert, serial ? *serial : "?");
}

uint64_t ServerContextSource::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

}  // namespace tessera::tls
