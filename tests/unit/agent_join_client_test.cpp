// JoinClient against a launcher played by a real gRPC server on loopback: a session the launcher ends before it
// answers the hello is dialed again (a join storm's launcher gives such agents up), a refusal is final, and the
// redials stop at the join timeout.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "agent/session/join_client.h"
#include "dtrain/v1/session.grpc.pb.h"

using namespace dtrain;
using namespace std::chrono_literals;

namespace {

// How the played launcher treats each Join call.
enum class Answer {
  cancel_unanswered,   // reads the hello, then cancels the call (a launcher that gave the node up)
  configure,           // answers with Configure, then Shutdown
  refuse,              // RESOURCE_EXHAUSTED at once (the job already has its nodes)
};

class PlayedLauncher final : public v1::LauncherService::Service {
 public:
  explicit PlayedLauncher(std::vector<Answer> answers) : answers_(std::move(answers)) {}
  std::atomic<int> calls{0};

  grpc::Status Join(grpc::ServerContext* context,
                    grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>* stream) override {
    const auto call = static_cast<std::size_t>(calls++);
    const Answer answer = answers_[std::min(call, answers_.size() - 1)];
    if (answer == Answer::refuse) return {grpc::StatusCode::RESOURCE_EXHAUSTED, "the job already has its 1 nodes"};
    v1::AgentMessage hello;
    if (!stream->Read(&hello)) return grpc::Status::CANCELLED;
    if (answer == Answer::cancel_unanswered) {
      context->TryCancel();
      return grpc::Status::CANCELLED;
    }
    v1::LauncherMessage configure;
    configure.mutable_configure()->set_job_id("job-1");
    stream->Write(configure);
    v1::LauncherMessage shutdown;
    shutdown.mutable_shutdown();
    stream->Write(shutdown);
    v1::AgentMessage rest;
    while (stream->Read(&rest)) {
    }
    return grpc::Status::OK;
  }

 private:
  std::vector<Answer> answers_;
};

struct World {
  PlayedLauncher launcher;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  explicit World(std::vector<Answer> answers) : launcher(std::move(answers)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&launcher);
    server = builder.BuildAndStart();
    REQUIRE(server);
  }
  ~World() { server->Shutdown(std::chrono::system_clock::now() + 1s); }

  agent::JoinTarget target(std::chrono::milliseconds timeout) const {
    return {"127.0.0.1:" + std::to_string(port), timeout, Transport::plaintext, grpc::InsecureChannelCredentials()};
  }
};

// The agent's side of one session: hello, then whatever the launcher says until Shutdown or the end of the stream.
agent::Served serve(agent::SessionStream& stream) {
  v1::AgentMessage hello;
  hello.mutable_heartbeat();
  stream.write(hello);
  agent::Served served;
  v1::LauncherMessage message;
  while (stream.read(message)) {
    if (message.has_configure()) served.answered = true;
    if (message.has_shutdown()) return served;
  }
  served.status = {StatusCode::unavailable, "session lost"};
  return served;
}

}  // namespace

TEST_CASE("join client: a session ended before the hello was answered is dialed again, after kRedialWait") {
  World w({Answer::cancel_unanswered, Answer::configure});
  agent::JoinClient client(w.target(20s), serve);
  const auto start = std::chrono::steady_clock::now();
  const Status status = client.run();
  CHECK_MESSAGE(status.ok(), status.message());
  CHECK(w.launcher.calls == 2);
  CHECK(client.joined());
  CHECK(std::chrono::steady_clock::now() - start >= agent::JoinClient::kRedialWait);
}

TEST_CASE("join client: a refusal ends the run; nothing is dialed again") {
  World w({Answer::refuse});
  agent::JoinClient client(w.target(20s), serve);
  const Status status = client.run();
  CHECK_FALSE(status.ok());
  CHECK(status.message().find("ended the session") != std::string::npos);
  CHECK(w.launcher.calls == 1);
  CHECK_FALSE(client.joined());
}

TEST_CASE("join client: the redials stop at the join timeout, saying why") {
  World w({Answer::cancel_unanswered});
  agent::JoinClient client(w.target(2500ms), serve);
  const auto start = std::chrono::steady_clock::now();
  const Status status = client.run();
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(status.code() == StatusCode::deadline_exceeded);
  CHECK(status.message().find("before answering this agent's hello") != std::string::npos);
  CHECK(w.launcher.calls >= 2);
  CHECK(w.launcher.calls <= 3);
  CHECK_FALSE(client.joined());
  CHECK(took < 5s);
}
