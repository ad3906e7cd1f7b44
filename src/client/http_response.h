// One HTTP/1.1 response read from a server the client has no reason to trust (--server names
// anything): Boost.Beast's parser, bounded in header and body size, Content-Length and chunked
// bodies both. Pure: bytes in, a response out, so it is fuzzed as it runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "client/client.h"
#include "common/error.h"

namespace tessera::client {

inline constexpr size_t kMaxResponseHeaderBytes = 64 * 1024;
inline constexpr uint64_t kMaxResponseBodyBytes = 256ull * 1024 * 1024;

class ResponseReader {
 public:
  ResponseReader();
  ~ResponseReader();
  ResponseReader(const ResponseReader&) = delete;
  ResponseReader& operator=(const ResponseReader&) = delete;

  // Feeds bytes as they arrive; the bytes after a complete response are not consumed (a server
  // that sends more than it announced is not believed). Unavailable when the bytes are not an
  // HTTP/1.1 response or cross a bound (the message says which, never quoting the server).
  Status Feed(std::string_view bytes);
  // The server closed the connection: a body without a length ends here.
  Status Finish();
  bool done() const;
  // Whether the server asked to close the connection after this response.
  bool closes() const;
  // The response once done(): status, lower-case header names, the body.
  Response Take();

 private:
  struct Parser;
  std::unique_ptr<Parser> parser_;
};

}  // namespace tessera::client
