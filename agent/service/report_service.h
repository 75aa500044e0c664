#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "dtrain/v1/report.grpc.pb.h"

namespace dtrain::agent {

class Agent;

// The largest step a report may carry: 2^53, past which a step count stops being exact in the JSON and doubles
// that views of a run use, and far past any real run (a billion steps is decades). Anything larger is a wrapped
// negative number or garbage (2^64-1 from a -1).
inline constexpr std::uint64_t kMaxReportedStep = std::uint64_t{1} << 53;
// The largest resident set size a report may carry: 1 PiB.
inline constexpr std::uint64_t kMaxReportedRssBytes = std::uint64_t{1} << 50;

// Whether a report's values can be real, or invalid_argument saying which cannot: loss and tokens/s must be
// finite, tokens/s not negative, step and rss_bytes within the bounds above. A loss may be negative (not every
// objective is a cross-entropy). A run whose loss stopped being finite has diverged; it says so in its error, not
// in a health report.
Status check_report_values(const v1::WorkerReport& report);

// WorkerReports.Report: a worker's health report (step, loss, throughput, memory), forwarded to the launcher.
// Refused with PERMISSION_DENIED unless the `dtrain-token` metadata is the current round's job token and
// `dtrain-report-token` is the reporting rank's own DTRAIN_REPORT_TOKEN (JobRunner::check_reporter); refused with
// INVALID_ARGUMENT when check_report_values finds a value that cannot be real.
class ReportService final : public v1::WorkerReports::Service {
 public:
  explicit ReportService(Agent& agent) : agent_(agent) {}

  grpc::Status Report(grpc::ServerContext* context, const v1::WorkerReport* request, v1::ReportAck* reply) override;

 private:
  Agent& agent_;
};

}  // namespace dtrain::agent
