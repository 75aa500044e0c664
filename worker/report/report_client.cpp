#include "worker/report/report_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "common/grpc/metadata.h"
#include "dtrain/v1/report.grpc.pb.h"
#include "worker/credentials.h"

namespace dtrain::worker {

struct ReportClient::Impl {
  ReportClientOptions options;
  std::unique_ptr<v1::WorkerReports::Stub> stub;
};

Result<std::unique_ptr<ReportClient>> ReportClient::open(ReportClientOptions options) {
  grpc::ChannelArguments arguments;
  const auto credentials = credentials_from_env(arguments);
  if (!credentials.ok()) return {credentials.status};
  auto impl = std::make_unique<Impl>();
  impl->stub =
      v1::WorkerReports::NewStub(grpc::CreateCustomChannel(options.address, credentials.value, arguments));
  impl->options = std::move(options);
  return {{}, std::unique_ptr<ReportClient>(new ReportClient(std::move(impl)))};
}

ReportClient::ReportClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ReportClient::~ReportClient() = default;

Status ReportClient::send(const HealthReport& report, const ReportContext& context) const {
  using R = v1::WorkerReport;
  using H = HealthReport;
  // Every field of HealthReport, by its WorkerReport setter.
  const std::pair<double H::*, void (R::*)(double)> amounts[] = {
      {&H::loss, &R::set_loss},
      {&H::tokens_per_s, &R::set_tokens_per_s},
      {&H::samples_per_s, &R::set_samples_per_s},
      {&H::step_ms, &R::set_step_ms},
      {&H::data_wait_ms, &R::set_data_wait_ms},
      {&H::compute_ms, &R::set_compute_ms},
      {&H::comm_exposed_ms, &R::set_comm_exposed_ms},
      {&H::optimizer_ms, &R::set_optimizer_ms},
      {&H::loss_scale, &R::set_loss_scale},
  };
  const std::pair<std::uint64_t H::*, void (R::*)(std::uint64_t)> counts[] = {
      {&H::step, &R::set_step},
      {&H::rss_bytes, &R::set_rss_bytes},
      {&H::device_mem_used_bytes, &R::set_device_mem_used_bytes},
      {&H::device_mem_total_bytes, &R::set_device_mem_total_bytes},
      {&H::device_mem_peak_bytes, &R::set_device_mem_peak_bytes},
      {&H::mem_params_bytes, &R::set_mem_params_bytes},
      {&H::mem_grads_bytes, &R::set_mem_grads_bytes},
      {&H::mem_optim_bytes, &R::set_mem_optim_bytes},
      {&H::mem_activations_bytes, &R::set_mem_activations_bytes},
      {&H::mem_gathered_peak_bytes, &R::set_mem_gathered_peak_bytes},
      {&H::comm_bytes, &R::set_comm_bytes},
  };
  R request;
  for (const auto& [field, set] : amounts) (request.*set)(report.*field);
  for (const auto& [field, set] : counts) (request.*set)(report.*field);
  request.set_rank(report.rank);
  request.set_steps_done(context.steps_done);
  request.set_phase(context.phase);
  request.set_dump_signal(context.dump_signal);
  request.set_exiting(context.exiting);
  v1::ReportAck ack;
  grpc::ClientContext call;
  call.AddMetadata(std::string(kTokenMetadata), impl_->options.token);
  call.AddMetadata(std::string(kReportTokenMetadata), impl_->options.report_token);
  call.set_deadline(std::chrono::system_clock::now() + impl_->options.deadline);
  const grpc::Status status = impl_->stub->Report(&call, request, &ack);
  if (status.ok()) return {};
  return {StatusCode::unavailable, status.error_message()};
}

}  // namespace dtrain::worker
