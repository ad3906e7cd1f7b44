// The service the API fuzz targets drive: a real Service on a SQLite store in a fresh temporary
// directory (null backend), the tenancy "alpha" with a tenant token, the admin token, and a
// Router over it. Tokens are fixed so corpora can use them. No request rate limit: thousands of
// inputs a second from one "address" would turn most into 429 and hide the paths behind them
// (serve_token_scopes_test and serve_rate_limit_test cover limits).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "api/router.h"
#include "backends/local/local.h"
#include "fleet/fleet.h"
#include "serve/service.h"

namespace tessera::fuzzing {

inline constexpr char kAdminToken[] = "fuzz-admin-token-0123456789abcdef";
inline constexpr char kTenantToken[] = "fuzz-tenant-token-0123456789abcdef";

struct ApiHarness {
  std::unique_ptr<serve::Service> service;
  std::unique_ptr<api::Router> router;
};

// `seed`: more records committed with alpha and its token before the service starts. Aborts on
// any failure (a fuzz target without its service would fuzz nothing).
inline ApiHarness* MakeApiHarness(const char* name, std::vector<fleet::Mutation> seed = {}) {
  auto* h = new ApiHarness;
  std::string dir_template = std::string("/tmp/fuzz-") + name + "-XXXXXX";
  const char* dir = ::mkdtemp(dir_template.data());
  if (!dir) std::abort();
  fleet::StoreOptions store_options;
  store_options.path = std::string(dir) + "/store.db";
  store_options.synchronous_full = false;
  auto store = fleet::OpenSqliteStore(store_options);
  if (!store) std::abort();
  fleet::Tenancy alpha;
  alpha.name = "alpha";
  alpha.created_ms = fleet::NowMs();
  alpha.uid = "u-0123456789abcdef";
  fleet::TokenRecord token;
  token.id = "t-00000001";
  token.sha256 = fleet::Sha256Hex(kTenantToken);
  token.tenancy = "alpha";
  token.tenancy_uid = alpha.uid;
  token.created_ms = alpha.created_ms;
  seed.insert(seed.begin(), {alpha, token});
  if (!(*store)->CommitAndWait(std::move(seed))) std::abort();
  serve::ServiceOptions options;
  options.data_dir = dir;
  options.lease_file.clear();
  options.rate_limit = {};
  auto service = serve::Service::Create(std::move(options), serve::Service::Host{},
                                        std::move(*store), backends::CreateNullBackend());
  if (!service) std::abort();
  h->service = std::move(*service);
  h->service->SetAdminTokenHash(fleet::Sha256Hex(kAdminToken));
  h->router = std::make_unique<api::Router>(h->service.get());
  return h;
}

}  // namespace tessera::fuzzing
