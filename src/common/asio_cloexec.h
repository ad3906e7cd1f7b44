// Boost.Asio opens sockets with socket(2) and accepts with accept(2), neither close-on-exec: a
// program the service starts from another thread meanwhile would inherit them (a listening
// socket so inherited keeps the port after the service is gone). These open and accept with
// SOCK_CLOEXEC in the same call and hand the descriptor to Asio (header only: Boost's headers).
#pragma once

#include <sys/socket.h>

#include <boost/asio/socket_base.hpp>
#include <boost/system/error_code.hpp>
#include <cerrno>
#include <utility>

namespace tessera {

inline boost::system::error_code LastSocketError() {
  return boost::system::error_code(errno, boost::system::system_category());
}

// Opens `socket` (a socket or an acceptor, closed) for `protocol`, close-on-exec.
template <typename Socket>
boost::system::error_code OpenCloseOnExec(Socket& socket,
                                          const typename Socket::protocol_type& protocol) {
  const int fd = ::socket(protocol.family(), protocol.type() | SOCK_CLOEXEC, protocol.protocol());
  if (fd < 0) return LastSocketError();
  boost::system::error_code error;
  socket.assign(protocol, fd, error);
  if (error) ::close(fd);
  return error;
}

// Accepts the next connection on a blocking `acceptor` into `socket` (closed), close-on-exec.
template <typename Acceptor, typename Socket>
boost::system::error_code AcceptCloseOnExec(Acceptor& acceptor, Socket& socket) {
  int fd;
  do {
    fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return LastSocketError();
  boost::system::error_code error;
  socket.assign(acceptor.local_endpoint(error).protocol(), fd, error);
  if (error) ::close(fd);
  return error;
}

// async_accept's close-on-exec twin: waits until `acceptor` (non-blocking) is readable, accepts
// with accept4 and calls handler(error, socket) with a socket on `executor`. A connection that went
// away between the two (ECONNABORTED, EAGAIN) is waited for again, as accept(2) would.
template <typename Acceptor, typename Executor, typename Handler>
void AsyncAcceptCloseOnExec(Acceptor& acceptor, Executor executor, Handler handler) {
  acceptor.async_wait(
      boost::asio::socket_base::wait_read,
      [&acceptor, executor, handler = std::move(handler)](boost::system::error_code error) mutable {
        using Socket = typename Acceptor::protocol_type::socket;
        Socket socket(executor);
        if (error) return handler(error, std::move(socket));
        int fd;
        do {
          fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
        } while (fd < 0 && errno == EINTR);
        if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED))
          return AsyncAcceptCloseOnExec(acceptor, executor, std::move(handler));
        if (fd < 0) return handler(LastSocketError(), std::move(socket));
        socket.assign(acceptor.local_endpoint(error).protocol(), fd, error);
        if (error) ::close(fd);
        handler(error, std::move(socket));
      });
}

}  // namespace tessera
