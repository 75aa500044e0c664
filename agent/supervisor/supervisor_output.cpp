// Supervisor::Impl: workers' output (see supervisor_impl.h).

#include "agent/supervisor/supervisor_impl.h"

#include <sys/epoll.h>

namespace dtrain::supervisor {

OutputCapture::LineSink Supervisor::Impl::sink_for(std::uint64_t id) {
  return [this, id](bool is_stderr, std::string_view line) {
    if (events.line) events.line(id, is_stderr, line);
  };
}

void Supervisor::Impl::on_output(std::uint64_t serial, Stream stream) {
  const auto it = workers.find(serial);
  if (it == workers.end()) return;
  Worker& worker = *it->second;
  if (worker.output->read(stream, kReadBudget, sink_for(worker.id)) == OutputCapture::ReadResult::kEof) {
    loop.remove(worker.tokens[static_cast<int>(stream)]);
    forget_if_done(serial);
  }
}

void Supervisor::Impl::drain(Worker& worker, std::size_t budget) {
  for (const Stream stream : {Stream::kStdout, Stream::kStderr}) {
    if (!worker.output->is_open(stream)) continue;
    if (worker.output->read(stream, budget, sink_for(worker.id)) == OutputCapture::ReadResult::kEof) {
      loop.remove(worker.tokens[static_cast<int>(stream)]);
    }
  }
}

void Supervisor::Impl::forget_if_done(std::uint64_t serial) {
  const auto it = workers.find(serial);
  if (it == workers.end()) return;
  const Worker& worker = *it->second;
  if (worker.exit_reported && !worker.output->is_open(Stream::kStdout) && !worker.output->is_open(Stream::kStderr)) {
    workers.erase(it);
  }
}

}  // namespace dtrain::supervisor
