// The close-on-exec helpers: the flag set and read, the descriptors an exec would pass on, the
// child-side close, Asio's sockets opened and accepted close-on-exec, and the programs tessera
// runs (process::Run, tenancy::RunCommand) getting stdio only even when a descriptor without the
// flag is open.
#include "common/cloexec.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "common/asio_cloexec.h"
#include "process/process.h"
#include "tenancy/tenancy.h"

namespace tessera {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// A pipe made the way a careless library would: without O_CLOEXEC.
struct InheritablePipe {
  int fds[2] = {-1, -1};
  InheritablePipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~InheritablePipe() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

bool Lists(const std::vector<int>& fds, int fd) {
  return std::find(fds.begin(), fds.end(), fd) != fds.end();
}

TEST(CloseOnExec, IsSetOnADescriptorMadeWithoutIt) {
  InheritablePipe pipe;
  EXPECT_FALSE(IsCloseOnExec(pipe.fds[0]));
  EXPECT_TRUE(Lists(InheritableDescriptors(), pipe.fds[0]));
  ASSERT_TRUE(SetCloseOnExec(pipe.fds[0]).ok());
  EXPECT_TRUE(IsCloseOnExec(pipe.fds[0]));
  EXPECT_FALSE(Lists(InheritableDescriptors(), pipe.fds[0]));
  EXPECT_TRUE(Lists(InheritableDescriptors(), pipe.fds[1]));
}

TEST(CloseOnExec, AClosedDescriptorIsAnErrorNotAFlag) {
  InheritablePipe pipe;
  const int fd = pipe.fds[0];
  ::close(fd);
  pipe.fds[0] = -1;
  EXPECT_FALSE(IsCloseOnExec(fd));
  auto status = SetCloseOnExec(fd);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("F_GETFD"), std::string::npos) << status.error().message;
}

TEST(CloseOnExec, TheChildClosesEverythingAboveStdio) {
  InheritablePipe pipe;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    CloseDescriptorsFrom(3);
    const bool closed = ::fcntl(pipe.fds[0], F_GETFD) < 0 && ::fcntl(pipe.fds[1], F_GETFD) < 0;
    const bool stdio = ::fcntl(2, F_GETFD) >= 0;
    ::_exit(closed && stdio ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(AsioCloseOnExec, AcceptorAndAcceptedSocketsCarryTheFlag) {
  asio::io_context io;
  tcp::acceptor acceptor(io);
  ASSERT_FALSE(OpenCloseOnExec(acceptor, tcp::v4()));
  EXPECT_TRUE(IsCloseOnExec(acceptor.native_handle()));
  acceptor.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  acceptor.listen();
  acceptor.non_blocking(true);

  tcp::socket client(io);
  ASSERT_FALSE(OpenCloseOnExec(client, tcp::v4()));
  EXPECT_TRUE(IsCloseOnExec(client.native_handle()));
  client.connect(acceptor.local_endpoint());

  tcp::socket accepted(io);
  boost::system::error_code accept_error = asio::error::would_block;
  AsyncAcceptCloseOnExec(acceptor, io.get_executor(),
                         [&](boost::system::error_code error, tcp::socket socket) {
                           accept_error = error;
                           accepted = std::move(socket);
                         });
  io.run();
  ASSERT_FALSE(accept_error) << accept_error.message();
  EXPECT_TRUE(IsCloseOnExec(accepted.native_handle()));
  // A working connection, not only a flag.
  asio::write(client, asio::buffer("ping", 4));
  char got[4];
  asio::read(accepted, asio::buffer(got));
  EXPECT_EQ(std::string(got, 4), "ping");
}

TEST(AsioCloseOnExec, BlockingAcceptCarriesTheFlag) {
  asio::io_context io;
  tcp::acceptor acceptor(io);
  ASSERT_FALSE(OpenCloseOnExec(acceptor, tcp::v4()));
  acceptor.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  acceptor.listen();
  tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  tcp::socket accepted(io);
  ASSERT_FALSE(AcceptCloseOnExec(acceptor, accepted));
  EXPECT_TRUE(IsCloseOnExec(accepted.native_handle()));
}

// The last line of defence: a descriptor someone opened without the flag still stays home.
TEST(ChildDescriptors, ProcessRunGivesStdioOnly) {
  InheritablePipe pipe;
  auto outcome = process::Run({"/bin/sh", "-c", "ls /proc/$$/fd"});
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->output, "0\n1\n2\n");
}

TEST(ChildDescriptors, RunCommandGivesStdioOnly) {
  InheritablePipe pipe;
  auto outcome = tenancy::RunCommand({"/bin/sh", "-c", "ls /proc/$$/fd"});
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->out, "0\n1\n2\n");
}

}  // namespace
}  // namespace tessera
