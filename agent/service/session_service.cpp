#include "agent/service/session_service.h"

#include "agent/security/credentials.h"
#include "agent/service/grpc_status.h"
#include "agent/session/session_stream.h"

namespace dtrain::agent {
namespace {

class ServerSessionStream final : public SessionStream {
 public:
  ServerSessionStream(grpc::ServerContext* context,
                      grpc::ServerReaderWriter<v1::AgentMessage, v1::LauncherMessage>* stream)
      : context_(context), stream_(stream) {}
  bool read(v1::LauncherMessage& message) override { return stream_->Read(&message); }
  bool write(const v1::AgentMessage& message) override { return stream_->Write(message); }
  void cancel() override { context_->TryCancel(); }
  std::string peer() const override { return context_->peer(); }

 private:
  grpc::ServerContext* context_;
  grpc::ServerReaderWriter<v1::AgentMessage, v1::LauncherMessage>* stream_;
};

}  // namespace

grpc::Status SessionService::Session(grpc::ServerContext* context,
                                     grpc::ServerReaderWriter<v1::AgentMessage, v1::LauncherMessage>* stream) {
  // Before anything of the agent is touched: only a cluster member (or the private channel) drives an agent.
  if (Status refused = security::session_refusal(*context->auth_context()); !refused.ok()) {
    return grpc::Status(to_grpc(refused.code()), "session refused: " + refused.message());
  }
  ServerSessionStream session(context, stream);
  // Whatever ended the session, the launcher learns it as the session's end (UNAVAILABLE), with the agent's words.
  const Status served = agent_.serve_session(session, nullptr);
  if (served.ok()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, served.message());
}

}  // namespace dtrain::agent
