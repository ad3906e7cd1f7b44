// Every flag checked before anything is made or bound (docs/serve.md lists the rules): the
// values, the listener's address and TLS, the rate limit, then the paths and programs.
#include "serve/rate_limit.h"
#include "wiring.h"

namespace tessera::serve_program {

Status CheckFlags(const ServeFlags& flags) {
  if (auto status = serve::CheckValueFlags(flags); !status) return status;
  auto listen = api::ParseListen(flags.listen);
  if (!listen) return listen.error();
  if (auto status = serve::CheckTlsFlags(listen->first, flags.tls); !status) return status;
  if (auto rate = serve::ParseRateFlag(flags.rate_limit); !rate)
    return rate.error().WithContext("--rate-limit");
  return serve::CheckPathFlags(flags);
}

}  // namespace tessera::serve_program
