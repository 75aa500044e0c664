#pragma once

// The job's event log, <run dir>/events.jsonl: one JSON object per line, each written with one write(2) as it
// happens, so `tail -f` and a crash of the launcher both see whole lines up to the last event. Every line has
// "ts" (Unix milliseconds, the launcher's clock) and "event" (job_start, job_end, round_start, round_end,
// worker_started, worker_exited, node_lost, health, samples (cli/report/model/samples.h), health_check_failed, diagnosis),
// then the event's fields.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace dtrain::controller {

class EventLog {
 public:
  // Opens `path` for appending (created 0644 like the logs beside it). Without a log (path "", or open failed)
  // every write is a no-op: the job runs the same with or without its events.
  EventLog() = default;
  Status open(const std::string& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends {"ts": unix_ms, "event": event, ...fields}. A failed write (a full disk) is returned; the caller warns
  // once and goes on.
  Status write(std::string_view event, const nlohmann::ordered_json& fields, std::uint64_t unix_ms);
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace dtrain::controller
