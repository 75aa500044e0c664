#include "agent/service/report_service.h"

#include <cmath>
#include <cstdio>

#include "agent/agent.h"
#include "agent/service/call_metadata.h"
#include "agent/service/grpc_status.h"

namespace dtrain::agent {
namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

Status check_report_values(const v1::WorkerReport& report) {
  if (report.step() > kMaxReportedStep) {
    return {StatusCode::invalid_argument,
            "step " + std::to_string(report.step()) + " is not a step count (the most a report may carry is 2^53 = " +
                std::to_string(kMaxReportedStep) + "; a negative number sent as unsigned looks like this)"};
  }
  if (!std::isfinite(report.loss())) {
    return {StatusCode::invalid_argument,
            "loss is " + number(report.loss()) + "; reports carry finite losses (a run whose loss is no longer "
            "finite has diverged: let it fail with an error that says so)"};
  }
  if (!std::isfinite(report.tokens_per_s()) || report.tokens_per_s() < 0) {
    return {StatusCode::invalid_argument,
            "tokens_per_s is " + number(report.tokens_per_s()) + "; it must be a finite number, 0 or more"};
  }
  if (report.rss_bytes() > kMaxReportedRssBytes) {
    return {StatusCode::invalid_argument,
            "rss_bytes " + std::to_string(report.rss_bytes()) + " is over 1 PiB; not a resident set size"};
  }
  return {};
}

grpc::Status ReportService::Report(grpc::ServerContext* context, const v1::WorkerReport* request, v1::ReportAck*) {
  const Status refused = agent_.check_reporter(std::string(call_metadata(*context, kTokenMetadata)),
                                               std::string(call_metadata(*context, kReportTokenMetadata)),
                                               request->rank());
  // Every refused reporter is PERMISSION_DENIED on the wire, an agent still starting included (report_service.h):
  // the reporter treats all failures alike, it logs them and sends the next report.
  if (!refused.ok()) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "report refused: " + refused.message());
  if (Status implausible = check_report_values(*request); !implausible.ok()) {
    return grpc::Status(to_grpc(implausible.code()),
                        "report of rank " + std::to_string(request->rank()) + " refused: " + implausible.message());
  }
  v1::WorkerHealth health;
  health.set_rank(request->rank());
  health.set_step(request->step());
  health.set_loss(request->loss());
  health.set_tokens_per_s(request->tokens_per_s());
  health.set_rss_bytes(request->rss_bytes());
  health.set_steps_done(request->steps_done());
  agent_.forward_report(health);
  return grpc::Status::OK;
}

}  // namespace dtrain::agent
