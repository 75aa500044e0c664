// The private session socket of local agents: the peer check on real Unix sockets, and the refusal of a
// directory that other users could enter. (That the launcher's own sessions pass is covered by every local job.)
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "agent/session/session_socket.h"
#include "dtrain/v1/session.grpc.pb.h"
#include "tests/unit/temp_dir.h"

using dtrain::agent::SessionSocket;
using dtrain::agent::check_session_peer;

TEST_CASE("the peer check wants the launcher: this uid and one of the agent's ancestors") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  CHECK(check_session_peer(fds[0], ::geteuid(), {::getppid(), ::getpid()}).ok());
  const std::string other_pid = check_session_peer(fds[0], ::geteuid(), {::getppid()}).message();
  CHECK(other_pid.find("is not from the launcher that started this agent") != std::string::npos);
  CHECK_FALSE(check_session_peer(fds[0], ::geteuid() + 1, {::getpid()}).ok());
  const auto ancestors = dtrain::agent::ancestor_pids();
  REQUIRE_FALSE(ancestors.empty());
  CHECK(ancestors.front() == ::getppid());
  CHECK(std::find(ancestors.begin(), ancestors.end(), ::getpid()) == ancestors.end());
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("a session socket in a directory others may enter is refused") {
  TempDir dir("dtrain-session-socket-test");
  dtrain::v1::AgentService::Service sessions;
  grpc::ServerBuilder builder;
  builder.RegisterService(&sessions);
  auto server = builder.BuildAndStart();
  REQUIRE(server);
  REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);
  try {
    SessionSocket socket(dir.file("agent_0.sock"), *server);
    FAIL("a 0755 directory was accepted");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("must be a directory of this user with mode 0700") != std::string::npos);
  }
  server->Shutdown(std::chrono::system_clock::now());
}

TEST_CASE("a process that is not an ancestor of the agent gets no session over the socket") {
  TempDir dir("dtrain-session-socket-test");   // mkdtemp: 0700
  dtrain::v1::AgentService::Service sessions;  // would answer UNIMPLEMENTED if a call got through
  grpc::ServerBuilder builder;
  builder.RegisterService(&sessions);
  auto server = builder.BuildAndStart();
  REQUIRE(server);
  {
    SessionSocket socket(dir.file("agent_0.sock"), *server);
    struct stat st {};
    REQUIRE(::stat(dir.file("agent_0.sock").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    auto channel = grpc::CreateChannel("unix:" + dir.file("agent_0.sock"), grpc::InsecureChannelCredentials());
    auto stub = dtrain::v1::AgentService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto stream = stub->Session(&context);
    dtrain::v1::AgentMessage message;
    CHECK_FALSE(stream->Read(&message));
    grpc::Status status = stream->Finish();
    // The connection is closed before gRPC sees it: the call never reaches the server (no UNIMPLEMENTED).
    CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("agent_0.sock")));
  server->Shutdown(std::chrono::system_clock::now());
}
