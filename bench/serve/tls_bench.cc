// HTTPS against plain HTTP on the same machine in the same run: two tessera-serve processes (null
// backend, durable store, one I/O thread each), one with a test-time certificate (EC P-256), and
// wrk (a separate process, keep-alive connections) POSTing containers to each in turn, rounds
// alternating so that a drift of the machine affects both. Printed:
//  1. submissions/s and latency p50/p99 per round and on average, and HTTPS as a share of plain;
//  2. full TLS handshakes per second (no session resumption): client threads that connect,
//     handshake (TLS 1.3, ECDHE, the server's ECDSA signature) and close, as fast as they can.
//
// Usage: tls_bench [--duration S (5)] [--rounds N (2)] [--connections N (16)]
//                  [--handshake-threads N (2)]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <regex>
#include <thread>

#include "serve/serve_process.h"
#include "support/test_pki.h"
#include "tls/tls.h"

namespace {

using namespace tessera;
using namespace tessera::testing;

std::string Match(const std::string& text, const std::string& pattern) {
  std::smatch match;
  if (std::regex_search(text, match, std::regex(pattern))) return match[1];
  return "?";
}

// wrk's latency figure ("1.23ms", "850.00us", "1.02s") in milliseconds.
double Milliseconds(const std::string& figure) {
  double value = std::atof(figure.c_str());
  if (figure.find("us") != std::string::npos) return value / 1000;
  if (figure.find("ms") != std::string::npos) return value;
  if (figure.find('s') != std::string::npos) return value * 1000;
  return value;
}

struct Round {
  double per_second = 0, p50_ms = 0, p99_ms = 0;
  std::string non_2xx = "0";
};

Round Wrk(const std::string& url, const std::string& token, int connections, int seconds) {
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/bench/serve/submit.lua";
  const std::string out =
      RunCommand("TESSERA_TOKEN=" + token + " wrk --latency -t2 -c" + std::to_string(connections) +
                 " -d" + std::to_string(seconds) + "s -s " + script + " " + url + " 2>&1");
  Round round;
  round.per_second = std::atof(Match(out, "Requests/sec:\\s+([0-9.]+)").c_str());
  round.p50_ms = Milliseconds(Match(out, "50%\\s+([0-9.]+\\w+)"));
  round.p99_ms = Milliseconds(Match(out, "99%\\s+([0-9.]+\\w+)"));
  if (out.find("Non-2xx") != std::string::npos)
    round.non_2xx = Match(out, "Non-2xx or 3xx responses: (\\d+)");
  if (round.per_second == 0) std::fprintf(stderr, "wrk:\n%s\n", out.c_str());
  return round;
}

int Dial(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;  // as the server and the tessera client do: no Nagle wait inside the handshake
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Full handshakes per second from `threads` clients for `seconds`.
double Handshakes(const tls::ContextPtr& ctx, uint16_t port, int threads, int seconds) {
  std::atomic<long> done{0}, failed{0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&] {
      while (std::chrono::steady_clock::now() < until) {
        int fd = Dial(port);
        SSL* ssl = SSL_new(ctx.get());
        SSL_set_fd(ssl, fd);
        const bool ok =
            tls::PrepareClientConnection(ssl, "127.0.0.1").ok() && SSL_connect(ssl) == 1;
        (ok ? done : failed)++;
        if (ok) SSL_shutdown(ssl);
        SSL_free(ssl);
        ::close(fd);
      }
    });
  }
  for (auto& client : clients)
    client.join();
  if (failed) std::fprintf(stderr, "%ld handshakes failed\n", failed.load());
  return static_cast<double>(done) / seconds;
}

std::unique_ptr<ServeProcess> Start(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> flags = {"--root",    "/",          "--backend",    "null",
                                    "--cdi-dir", dir + "/cdi", "--io-threads", "1"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  auto serve = std::make_unique<ServeProcess>(dir, flags);
  std::string log;
  if (!serve->Start(&log)) {
    std::fprintf(stderr, "tessera-serve did not start:\n%s\n", log.c_str());
    std::exit(1);
  }
  return serve;
}

}  // namespace

int main(int argc, char** argv) {
  int duration = 5, rounds = 2, connections = 16, handshake_threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--duration") duration = value;
    if (flag == "--rounds") rounds = value;
    if (flag == "--connections") connections = value;
    if (flag == "--handshake-threads") handshake_threads = value;
  }
  TempDir pki, plain_dir, tls_dir;
  MakeTestPki(pki.path());
  auto plain = Start(plain_dir.path(), {});
  auto secure = Start(tls_dir.path(), {"--tls-cert", pki.path() + "/server.crt", "--tls-key",
                                       pki.path() + "/server.key"});
  const std::string plain_url = "http://127.0.0.1:" + std::to_string(plain->port());
  const std::string tls_url = "https://127.0.0.1:" + std::to_string(secure->port());
  Wrk(plain_url, plain->admin_token(), connections, 1);  // warm-up
  Wrk(tls_url, secure->admin_token(), connections, 1);

  std::printf(
      "== submissions: wrk -t2 -c%d -d%ds (keep-alive), POST /v1/containers, null backend, "
      "SQLite WAL synchronous=FULL; %d rounds alternating; %u CPUs\n",
      connections, duration, rounds, std::thread::hardware_concurrency());
  std::printf("load average before: %s\n", Trimmed(ReadText("/proc/loadavg")).c_str());
  Round plain_sum, tls_sum;
  for (int r = 0; r < rounds; ++r) {
    for (bool use_tls : {false, true}) {
      Round got = use_tls ? Wrk(tls_url, secure->admin_token(), connections, duration)
                          : Wrk(plain_url, plain->admin_token(), connections, duration);
      std::printf("round %d %-5s: %8.0f submissions/s  p50 %7.2f ms  p99 %7.2f ms  non-2xx %s\n",
                  r + 1, use_tls ? "https" : "http", got.per_second, got.p50_ms, got.p99_ms,
                  got.non_2xx.c_str());
      Round& sum = use_tls ? tls_sum : plain_sum;
      sum.per_second += got.per_second / rounds;
      sum.p50_ms += got.p50_ms / rounds;
      sum.p99_ms += got.p99_ms / rounds;
    }
  }
  std::printf("mean  http : %8.0f submissions/s  p50 %7.2f ms  p99 %7.2f ms\n",
              plain_sum.per_second, plain_sum.p50_ms, plain_sum.p99_ms);
  std::printf("mean  https: %8.0f submissions/s  p50 %7.2f ms  p99 %7.2f ms\n", tls_sum.per_second,
              tls_sum.p50_ms, tls_sum.p99_ms);
  std::printf("load average after: %s\n", Trimmed(ReadText("/proc/loadavg")).c_str());
  std::printf("https / http: %.0f %% of the submissions/s\n",
              plain_sum.per_second > 0 ? 100 * tls_sum.per_second / plain_sum.per_second : 0);

  auto ctx = tls::BuildClientContext({pki.path() + "/ca.crt", "", ""});
  if (!ctx) {
    std::fprintf(stderr, "%s\n", ctx.error().message.c_str());
    return 1;
  }
  SSL_CTX_set_session_cache_mode(ctx->get(), SSL_SESS_CACHE_OFF);
  std::printf("== handshakes: %d client threads, new connection each, no resumption, %ds\n",
              handshake_threads, duration);
  std::printf("full TLS handshakes/s: %.0f\n",
              Handshakes(*ctx, secure->port(), handshake_threads, duration));
  return 0;
}
