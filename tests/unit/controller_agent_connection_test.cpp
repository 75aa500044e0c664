#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "cli/controller/transport/agent_connection.h"
#include "cli/controller/session/event_queue.h"

using namespace dtrain::controller;
using namespace std::chrono_literals;

namespace {

// An agent that takes the session, reads until the launcher half-closes, and then never completes the call: the
// shape of an agent that hung, or of a session that broke on one side only.
class NeverFinishingAgent final : public dtrain::v1::AgentService::Service {
 public:
  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<dtrain::v1::AgentMessage, dtrain::v1::LauncherMessage>* stream) override {
    dtrain::v1::AgentMessage hello;
    hello.mutable_hello()->set_agent_address("stuck");
    stream->Write(hello);
    dtrain::v1::LauncherMessage ignored;
    while (stream->Read(&ignored)) {
    }
    std::unique_lock lock(mutex_);
    released_.wait(lock, [&] { return release_ || context->IsCancelled(); });
    return grpc::Status::OK;
  }
  void release() {
    std::lock_guard lock(mutex_);
    release_ = true;
    released_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable released_;
  bool release_ = false;
};

// An agent that takes the session and never reads it: HTTP/2 flow control soon stops every write to it.
class NeverReadingAgent final : public dtrain::v1::AgentService::Service {
 public:
  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<dtrain::v1::AgentMessage, dtrain::v1::LauncherMessage>*) override {
    while (!context->IsCancelled()) std::this_thread::sleep_for(10ms);
    return grpc::Status::CANCELLED;
  }
};

// `agent` served on 127.0.0.1, on a free port written to `port`.
std::unique_ptr<grpc::Server> serve(grpc::Service& agent, int& port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&agent);
  auto server = builder.BuildAndStart();
  REQUIRE(server);
  return server;
}

// The launcher's plaintext session to the agent on 127.0.0.1:`port`, not yet open.
AgentConnection plaintext_connection(int port, EventQueue& events) {
  return AgentConnection(0, "127.0.0.1:" + std::to_string(port), events, grpc::InsecureChannelCredentials(),
                         grpc::ChannelArguments(), dtrain::Transport::plaintext);
}

}  // namespace

TEST_CASE("agent connection: finish() returns within its bound when the agent never completes the call") {
  NeverFinishingAgent agent;
  int port = 0;
  auto server = serve(agent, port);
  EventQueue events;
  {
    AgentConnection connection = plaintext_connection(port, events);
    REQUIRE(connection.open(5s).ok());
    REQUIRE(events.pop(std::chrono::steady_clock::now() + 5s));  // the hello
    const auto start = std::chrono::steady_clock::now();
    const dtrain::Status status = connection.finish();
    const auto took = std::chrono::steady_clock::now() - start;
    MESSAGE("finish() took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
    CHECK(took >= AgentConnection::kFinishTimeout - 100ms);
    CHECK(took < AgentConnection::kFinishTimeout + 1500ms);
    CHECK_FALSE(status.ok());
  }
  agent.release();
  server->Shutdown(std::chrono::system_clock::now() + 2s);
}

TEST_CASE("agent connection: sends to an agent that never reads return at once; the queue's bound gives it up") {
  NeverReadingAgent agent;
  int port = 0;
  auto server = serve(agent, port);
  EventQueue events;
  {
    AgentConnection connection = plaintext_connection(port, events);
    REQUIRE(connection.open(5s).ok());
    // 16 MiB of StartGroups: far more than flow control lets through to an agent that does not read. Each send
    // only queues; a blocking write would hold this thread until the stall timeout cut the session.
    StartGroup big;
    big.workers.push_back({});
    big.workers[0].env["PAD"] = std::string(1 << 20, 'x');
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 16; ++i) REQUIRE(connection.send(Command{big}));
    int sent = 16;
    while (connection.send(Command{Heartbeat{1}})) ++sent;
    const auto took = std::chrono::steady_clock::now() - start;
    MESSAGE(sent << " sends took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
    CHECK(took < 2s);
    // What flow control let through, then kMaxQueuedMessages waiting (one of them in flight): then it is given up.
    CHECK(sent >= static_cast<int>(AgentConnection::kMaxQueuedMessages));
    CHECK(sent < static_cast<int>(AgentConnection::kMaxQueuedMessages) + 16);
    const dtrain::Status status = connection.finish();
    CHECK_FALSE(status.ok());
    CHECK(status.message() == "its agent did not read its stream: 1024 messages waited for it (is the agent process "
                              "stopped, or its host overloaded?)");
  }
  server->Shutdown(std::chrono::system_clock::now() + 2s);
}
