#include "agent/service/report_service.h"

#include "agent/agent.h"

namespace dtrain::agent {

grpc::Status ReportService::Report(grpc::ServerContext* context, const v1::WorkerReport* request, v1::ReportAck*) {
  auto token = context->client_metadata().find("dtrain-token");
  std::string value = token == context->client_metadata().end() ? "" : std::string(token->second.data(), token->second.size());
  v1::WorkerHealth health;
  health.set_rank(request->rank());
  health.set_step(request->step());
  health.set_loss(request->loss());
  health.set_tokens_per_s(request->tokens_per_s());
  health.set_rss_bytes(request->rss_bytes());
  std::string refused = agent_.accept_report(value, health);
  if (!refused.empty()) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "report refused: " + refused);
  return grpc::Status::OK;
}

}  // namespace dtrain::agent
