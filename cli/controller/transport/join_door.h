#pragma once

// Who may become a node of a job whose agents dial in (provider join, ssh, slurm; `dtrain run --nnodes`), decided
// once per agent, at its hello: the job is not over, it has room (nodes.count's maximum), and the node rank the
// agent asks for (Hello.slot: `--node-rank`, `--slot`) is below that maximum and held by no other open session. An
// admitted agent gets the next node id and is announced to the controller (Event::Kind::joined) just before its
// hello; a refused one never reaches the controller: its call ends with why, and the launcher notes it (naming
// both agents when a rank is taken), so a stray agent costs the job nothing.
//
// Thread-safe: gRPC's threads knock and admit, the controller thread reads sessions and closes.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "cli/controller/session/event_queue.h"
#include "dtrain/v1/session.pb.h"

namespace dtrain::controller {

class JoinedSession;

class JoinDoor {
 public:
  // A launcher note (a refused agent, a failed handshake); called on gRPC's threads, so it must be thread-safe.
  using Note = std::function<void(const std::string&)>;

  JoinDoor(EventQueue& events, int max_nodes, Note note);

  // A call arrived: nothing when it may say hello (it then counts against nodes.count until left()), else the
  // status to end it with.
  std::optional<grpc::Status> knock();
  // A session that knocked is over (refused, or finished): it no longer counts, and frees its node rank.
  void left(int node);

  // Its first message, the hello, arrived: the node id it now is, or the status to end it with (the refusal is
  // also noted). `peer` is its address as gRPC names it.
  struct Admission {
    int node = -1;
    grpc::Status refusal;
  };
  Admission admit(const std::shared_ptr<JoinedSession>& session, const v1::Hello& hello, const std::string& peer);

  // The session of node `id` (ids in admission order, from 0), or nullptr.
  std::shared_ptr<JoinedSession> session(int id);
  std::vector<std::shared_ptr<JoinedSession>> sessions();
  // Refuse every later join (the job is over).
  void close();
  void note(const std::string& text) const;

 private:
  struct Holder {
    int node;
    std::string who;   // "host (ipv4:...)"
  };

  EventQueue& events_;
  const int max_nodes_;
  const Note note_;
  std::mutex mutex_;
  bool closed_ = false;
  int open_ = 0;                                       // sessions knocked and not left
  std::vector<std::shared_ptr<JoinedSession>> sessions_;
  std::map<unsigned, Holder> ranks_;                   // node rank asked for -> the open session that has it
};

}  // namespace dtrain::controller
