#include "agent/session/outbox.h"

#include "agent/session/message_batch.h"
#include "common/deadline_guard.h"
#include "common/os/stop_thread.h"
#include "common/clock.h"
#include "common/report/report_fields.h"
#include "common/report/step_points.h"

#include <chrono>

namespace dtrain::agent {
namespace {

// Log lines merged into one message stay under this many bytes of text (well below gRPC's message limit).
constexpr std::size_t kMaxLogBatchBytes = 1 << 20;

std::size_t log_bytes(const v1::AgentMessage& message) {
  std::size_t bytes = 0;
  for (const auto& line : message.log_lines().lines()) bytes += line.text().size();
  return bytes;
}

}  // namespace

void carry_points(const v1::AgentMessage& unsent, v1::AgentMessage& newer) {
  const v1::WorkerReport& old_report = unsent.worker_health().report();
  if (old_report.points_size() == 0) return;
  v1::WorkerReport& report = *newer.mutable_worker_health()->mutable_report();
  std::vector<StepPoint> points = points_of(old_report);
  merge_points(points, points_of(report), kMaxStepPoints);
  set_points(report, points);
}

Outbox::Outbox(SessionStream& stream, std::chrono::milliseconds heartbeat_interval)
    : stream_(stream), heartbeat_interval_(heartbeat_interval), writer_([this] { run(); }) {}

Outbox::~Outbox() { stop_and_join(mutex_, closing_, wake_, writer_); }

void Outbox::push(v1::AgentMessage message) {
  {
    std::lock_guard lock(mutex_);
    if (broken_) return;
    if (message.has_log_lines()) {
      std::size_t bytes = log_bytes(message);
      if (queued_log_bytes_ + bytes > kMaxQueuedLogBytes) {
        dropped_lines_ += static_cast<std::uint64_t>(message.log_lines().lines_size());
        dropped_round_ = message.log_lines().round();
        return;
      }
      queued_log_bytes_ += bytes;
    }
    queue_.push_back(std::move(message));
  }
  wake_.notify_one();
}

void Outbox::push_report(v1::AgentMessage message) {
  {
    std::lock_guard lock(mutex_);
    if (broken_) return;
    const v1::WorkerReport& report = message.worker_health().report();
    const auto now = Clock::now();
    const auto before = steps_forwarded_.find(report.rank());
    const bool urgent = report_window_.count() == 0 || before == steps_forwarded_.end() || report.exiting() ||
                        report.quiet() ||
                        (before->second == 0 && report.steps_done() > 0) || report.steps_done() < before->second;
    steps_forwarded_[report.rank()] = report.steps_done();
    if (reports_.empty()) reports_due_ = now + report_window_;
    if (urgent) reports_due_ = now;
    const auto unsent = reports_.find(report.rank());
    if (unsent != reports_.end()) carry_points(unsent->second, message);
    reports_[report.rank()] = std::move(message);
  }
  wake_.notify_one();
}

void Outbox::set_report_window(std::chrono::milliseconds window) {
  std::lock_guard lock(mutex_);
  report_window_ = window;
  steps_forwarded_.clear();
}

void Outbox::set_heartbeat_interval(std::chrono::milliseconds interval) {
  {
    std::lock_guard lock(mutex_);
    heartbeat_interval_ = interval;
  }
  wake_.notify_one();
}

void Outbox::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  reports_due_ = Clock::now();   // coalesced reports wait for no window now
  wake_.notify_one();
  drained_.wait_for(lock, timeout,
                    [this] { return broken_ || (queue_.empty() && reports_.empty() && !in_flight_); });
}

bool Outbox::broken() const {
  std::lock_guard lock(mutex_);
  return broken_;
}

bool Outbox::wait_for_work(std::unique_lock<std::mutex>& lock) {
  while (true) {
    const auto now = Clock::now();
    if (closing_ || !queue_.empty() || reports_due(now)) return true;
    const auto heartbeat = last_write_ + heartbeat_interval_;
    if (now >= heartbeat) return false;
    wake_.wait_until(lock, reports_.empty() ? heartbeat : std::min(heartbeat, reports_due_));
  }
}

void Outbox::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    const bool idle = !wait_for_work(lock);
    if (closing_ && !idle) {
      reports_due_ = Clock::now();   // closing: what is unsent goes now
    }
    if (queue_.empty() && reports_.empty() && closing_) break;
    // Unsent reports ride with whatever goes now, ahead of it (they were measured before the events behind them).
    if (!reports_.empty() &&
        (idle || reports_due(Clock::now()) || (!queue_.empty() && batchable(queue_.front())))) {
      for (auto it = reports_.rbegin(); it != reports_.rend(); ++it) queue_.push_front(std::move(it->second));
      reports_.clear();
    }
    v1::AgentMessage message;
    if (idle && queue_.empty()) {
      message.mutable_heartbeat()->set_sent_unix_ms(unix_ms());
    } else {
      // What waits behind the first message goes with it (message_batch.h); log lines merge below.
      message = take_batch(queue_);
      if (message.has_log_lines()) queued_log_bytes_ -= log_bytes(message);
      // Merge the log lines that follow into this message.
      if (message.has_log_lines()) {
        std::size_t bytes = 0;
        for (const auto& line : message.log_lines().lines()) bytes += line.text().size();
        while (!queue_.empty() && queue_.front().has_log_lines() &&
               queue_.front().log_lines().round() == message.log_lines().round() && bytes < kMaxLogBatchBytes) {
          queued_log_bytes_ -= log_bytes(queue_.front());
          for (auto& line : *queue_.front().mutable_log_lines()->mutable_lines()) {
            bytes += line.text().size();
            *message.mutable_log_lines()->add_lines() = std::move(line);
          }
          queue_.pop_front();
        }
      }
      if (dropped_lines_ > 0 && queued_log_bytes_ == 0) {
        // The backlog has drained: say what the console missed.
        v1::AgentMessage note;
        note.mutable_log_lines()->set_round(dropped_round_);
        auto* line = note.mutable_log_lines()->add_lines();
        line->set_is_stderr(true);
        line->set_rank(0);
        line->set_text("dtrain: " + std::to_string(dropped_lines_) +
                       " console lines were dropped because workers printed faster than the launcher could receive; "
                       "every line is in the ranks' log files");
        dropped_lines_ = 0;
        queue_.push_back(std::move(note));
      }
    }
    in_flight_ = true;
    lock.unlock();
    message.set_sent_unix_ms(unix_ms());   // the launcher measures how late it reads on this (its ReadLag)
    bool ok;
    {
      // A write blocks while the launcher does not read (HTTP/2 flow control): a launcher that stalls this long is
      // gone for our purposes, and cancelling lets the session end (and the lease stop the workers).
      DeadlineGuard guard(kWriteStallTimeout, [this] { stream_.cancel(); });
      ok = stream_.write(message);
    }
    lock.lock();
    in_flight_ = false;
    last_write_ = Clock::now();
    if (!ok) {
      broken_ = true;
      queue_.clear();
      reports_.clear();
    }
    if (queue_.empty() && reports_.empty()) drained_.notify_all();
    if (broken_ && closing_) break;
    if (broken_) {
      // Nothing more can be sent; wait for the owner to close.
      wake_.wait(lock, [this] { return closing_; });
      break;
    }
  }
  drained_.notify_all();
}

}  // namespace dtrain::agent
