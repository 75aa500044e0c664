#include "cli/controller/transport/join_door.h"

namespace dtrain::controller {

JoinDoor::JoinDoor(EventQueue& events, int max_nodes, Note note)
    : events_(events), max_nodes_(max_nodes), note_(std::move(note)) {}

std::optional<grpc::Status> JoinDoor::knock() {
  std::lock_guard lock(mutex_);
  if (closed_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the job is over; this launcher takes no agents");
  if (open_ >= max_nodes_) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the job already has its " + std::to_string(max_nodes_) + " nodes (nodes.count)");
  }
  ++open_;
  return std::nullopt;
}

void JoinDoor::left(int node) {
  std::lock_guard lock(mutex_);
  --open_;
  if (node < 0) return;
  for (auto it = ranks_.begin(); it != ranks_.end(); ++it) {
    if (it->second.node == node) {
      ranks_.erase(it);
      return;
    }
  }
}

JoinDoor::Admission JoinDoor::admit(const std::shared_ptr<JoinedSession>& session, const v1::Hello& hello,
                                    const std::string& peer) {
  const std::string who = (hello.facts().hostname().empty() ? std::string("an agent") : hello.facts().hostname()) +
                          " (" + peer + ")";
  Admission a;
  std::string refused;
  {
    std::lock_guard lock(mutex_);
    const auto held = hello.has_slot() ? ranks_.find(hello.slot()) : ranks_.end();
    if (closed_) {
      a.refusal = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the job is over; this launcher takes no agents");
    } else if (hello.has_slot() && hello.slot() >= static_cast<unsigned>(max_nodes_)) {
      refused = "it asked for node rank " + std::to_string(hello.slot()) + ", but the job has at most " +
                std::to_string(max_nodes_) + " nodes (ranks 0 to " + std::to_string(max_nodes_ - 1) + ")";
    } else if (held != ranks_.end()) {
      refused = "it asked for node rank " + std::to_string(hello.slot()) + ", which " + held->second.who +
                " already has; give every node its own --node-rank from 0 to " + std::to_string(max_nodes_ - 1);
    } else {
      a.node = static_cast<int>(sessions_.size());
      sessions_.push_back(session);
      if (hello.has_slot()) ranks_[hello.slot()] = Holder{a.node, who};
      Event joined;
      joined.kind = Event::Kind::joined;
      joined.node = a.node;
      joined.text = peer;
      events_.push(std::move(joined));
    }
  }
  if (!refused.empty()) {
    a.refusal = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, refused);
    note("refused the agent of " + who + ": " + refused);
  }
  return a;
}

std::shared_ptr<JoinedSession> JoinDoor::session(int id) {
  std::lock_guard lock(mutex_);
  if (id < 0 || static_cast<std::size_t>(id) >= sessions_.size()) return nullptr;
  return sessions_[static_cast<std::size_t>(id)];
}

std::vector<std::shared_ptr<JoinedSession>> JoinDoor::sessions() {
  std::lock_guard lock(mutex_);
  return sessions_;
}

void JoinDoor::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
}

void JoinDoor::note(const std::string& text) const {
  if (note_) note_(text);
}

}  // namespace dtrain::controller
