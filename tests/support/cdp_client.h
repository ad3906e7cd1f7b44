// Real headless Chromium for tests, driven through the Chrome DevTools Protocol (CDP): a
// browser process started on a port it chooses itself, and a WebSocket session to one of its
// page targets that sends commands and collects the events the browser pushes.
//
// CDP facts relied on (https://chromedevtools.github.io/devtools-protocol/):
// - `--remote-debugging-port=0` picks a free port and writes "PORT\n/devtools/browser/ID" to
//   `<user-data-dir>/DevToolsActivePort`.
// - `GET /json` lists targets with `type` and `webSocketDebuggerUrl`; `PUT /json/new?URL` opens
//   a page target (GET is refused by current Chromium).
// - Messages are JSON text frames: commands `{id, method, params}`, answers `{id, result}` or
//   `{id, error{code, message}}`, events `{method, params}` (no id).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"

namespace tessera::testing {

// A headless Chromium process with its own profile in a temporary directory. The browser runs
// in a process group of its own; the destructor ends the whole group (SIGTERM, then SIGKILL)
// and removes the profile.
class HeadlessChromium {
 public:
  HeadlessChromium() = default;
  HeadlessChromium(const HeadlessChromium&) = delete;
  HeadlessChromium& operator=(const HeadlessChromium&) = delete;
  ~HeadlessChromium();

  // Starts `binary` (searched in PATH) and waits until it has written DevToolsActivePort.
  Status Start(const std::string& binary = "chromium",
               std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Ends the process group and reaps the browser; safe to call twice.
  void Stop();

  // The DevTools port, once started.
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  // What the browser printed on stdout and stderr (for failure messages).
  std::string Log() const;

  // webSocketDebuggerUrl of a page target: the first listed one, or a new one on about:blank.
  Result<std::string> PageWebSocketUrl();

 private:
  std::string WebSocketUrl(const std::string& listed) const;

  std::string dir_;  // holds profile/ and chromium.log
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

// One CDP session over a WebSocket (Boost.Beast). Single-threaded: every call drives the I/O
// itself and stores any events that arrive meanwhile, in arrival order.
class CdpSession {
 public:
  ~CdpSession();
  CdpSession(const CdpSession&) = delete;
  CdpSession& operator=(const CdpSession&) = delete;

  // "ws://127.0.0.1:PORT/devtools/page/ID".
  static Result<std::unique_ptr<CdpSession>> Connect(
      const std::string& ws_url, std::chrono::milliseconds timeout = std::chrono::seconds(60));

  // Sends a command and waits for its answer: the `result` object, or an Error carrying the
  // method and the protocol's error message (or the timeout). After a timeout or a transport
  // error the session is broken and every later call fails.
  Result<nlohmann::json> Call(const std::string& method,
                              const nlohmann::json& params = nlohmann::json::object(),
                              std::chrono::milliseconds timeout = std::chrono::seconds(60));

  // Runtime.evaluate with returnByValue and awaitPromise: the value of `expression`, or an
  // Error with the exception's text when it threw.
  Result<nlohmann::json> Evaluate(const std::string& expression,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(60));

  // Reads events for `duration` (or until the connection fails).
  void Pump(std::chrono::milliseconds duration);

  // Events received so far, all or those of one method, each `{method, params}`.
  const std::vector<nlohmann::json>& events() const { return events_; }
  std::vector<nlohmann::json> Events(const std::string& method) const;

 private:
  struct Transport;
  explicit CdpSession(std::unique_ptr<Transport> transport);
  // Reads one message before `deadline`; false on timeout or error (`error` says which).
  bool ReadMessage(std::chrono::steady_clock::time_point deadline, nlohmann::json* message,
                   std::string* error);

  std::unique_ptr<Transport> transport_;
  int64_t next_id_ = 1;
  std::string broken_;  // why the session is unusable; empty while it works
  std::vector<nlohmann::json> events_;
};

// Page.captureScreenshot (PNG) of what the page shows in a viewport of width x height CSS
// pixels, written to `path`.
Status SaveScreenshot(CdpSession& page, const std::string& path, int width, int height);

}  // namespace tessera::testing
