#include "cli/controller/console/console.h"

#include "common/io/terminal_text.h"
#include "common/report/grid_place.h"
#include "common/os/syscalls.h"
#include "common/io/text_out.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <csignal>
#include <cstring>
#include <sstream>
#include <string_view>
#include <utility>

namespace dtrain::controller {
namespace {

void append_utf8(std::uint32_t code_point, std::string& value) {
  if (code_point < 0x80) {
    value += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    value += static_cast<char>(0xc0 | (code_point >> 6));
    value += static_cast<char>(0x80 | (code_point & 0x3f));
  } else if (code_point < 0x10000) {
    value += static_cast<char>(0xe0 | (code_point >> 12));
    value += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    value += static_cast<char>(0x80 | (code_point & 0x3f));
  } else {
    value += static_cast<char>(0xf0 | (code_point >> 18));
    value += static_cast<char>(0x80 | ((code_point >> 12) & 0x3f));
    value += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    value += static_cast<char>(0x80 | (code_point & 0x3f));
  }
}

// Appends the character of a JSON \uXXXX escape (`hex` holds the four digits) as UTF-8; false when they are not hex.
// Python's json.dumps writes a character past U+FFFF as a surrogate pair: `pending_high` keeps the pair's first half
// until its second arrives; a second half without a first becomes U+FFFD, as does a first half followed by another
// escape (one followed by a plain character is dropped).
bool append_unicode_escape(std::string_view hex, std::uint32_t& pending_high, std::string& value) {
  std::uint32_t unit = 0;
  for (char h : hex) {
    const char lower = static_cast<char>(h | 0x20);
    if (h >= '0' && h <= '9') unit = unit * 16 + static_cast<std::uint32_t>(h - '0');
    else if (lower >= 'a' && lower <= 'f') unit = unit * 16 + static_cast<std::uint32_t>(lower - 'a' + 10);
    else return false;
  }
  const bool low = unit >= 0xdc00 && unit <= 0xdfff;
  if (pending_high != 0 && !low) append_utf8(0xfffd, value);
  if (unit >= 0xd800 && unit <= 0xdbff) {
    pending_high = unit;
    return true;
  }
  if (low) append_utf8(pending_high == 0 ? 0xfffd : 0x10000 + ((pending_high - 0xd800) << 10) + (unit - 0xdc00), value);
  else append_utf8(unit, value);
  pending_high = 0;
  return true;
}

// Extracts the string value of `"key": "..."` after position `from`, undoing JSON escapes (\u001b becomes the ESC it
// stands for: the summary shows it escaped, as it shows every worker byte). Enough for the two fields of PyTorch's
// error file; anything else falls back to the raw text.
bool json_string_field(const std::string& json, const std::string& key, std::size_t from, std::string& value,
                       std::size_t* end = nullptr) {
  std::string needle = "\"" + key + "\"";
  auto at = json.find(needle, from);
  if (at == std::string::npos) return false;
  at = json.find(':', at + needle.size());
  if (at == std::string::npos) return false;
  at = json.find_first_not_of(" \t\r\n", at + 1);
  if (at == std::string::npos || json[at] != '"') return false;
  value.clear();
  std::uint32_t pending_high = 0;
  for (std::size_t i = at + 1; i < json.size(); ++i) {
    char c = json[i];
    if (c == '"') {
      if (end) *end = i;
      return true;
    }
    if (c == '\\' && i + 1 < json.size()) {
      char e = json[++i];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': break;
        case 'u':
          if (i + 4 >= json.size() ||
              !append_unicode_escape(std::string_view(json).substr(i + 1, 4), pending_high, value)) {
            return false;
          }
          i += 4;
          break;
        default: value += e;
      }
    } else {
      value += c;
    }
  }
  return false;
}

// The hung rank's first frames and where all of its stacks are.
void append_stacks(std::ostringstream& s, const RankStacks& stacks) {
  if (!stacks.top_frames.empty()) {
    s << "  where rank " << stacks.rank << " is (first frames of its main thread):\n";
    for (const auto& frame : stacks.top_frames) s << "    " << terminal_safe(frame) << "\n";
  }
  if (!stacks.error.empty()) s << "  stacks of rank " << stacks.rank << ": " << terminal_safe(stacks.error) << "\n";
  if (!stacks.stacks_path.empty()) {
    s << "  full stacks: " << stacks.stacks_path << " (every rank's beside it, on its own node)\n";
  }
}

// The root cause's last health report: progress and phase on one line, then where its last step's time went (and its
// samples/s: here, not after tokens/s, so the first line keeps the shape that tests and scripts match) and the sizes
// it reported (each part only when the worker reported it: 0 means not known).
void append_health(std::ostringstream& s, const Failure& root, const WorkerHealth& h) {
  s << "  last health report of rank " << root.rank << ": step " << h.step << ", loss " << h.loss << ", "
    << h.tokens_per_s << " tokens/s";
  if (!h.phase.empty()) s << ", last phase: " << terminal_safe(h.phase);
  if (root.failed_unix_ms >= h.unix_ms && h.unix_ms > 0) {
    s << ", " << (root.failed_unix_ms - h.unix_ms) / 1000.0 << " s before it failed";
  }
  s << "\n";
  if (h.step_ms > 0) {
    s << "    its last step: " << h.step_ms << " ms (data wait " << h.data_wait_ms << ", compute " << h.compute_ms
      << ", comm exposed " << h.comm_exposed_ms << ", optimizer " << h.optimizer_ms;
    if (h.pipeline_bubble_ms > 0) s << ", pipeline bubble " << h.pipeline_bubble_ms;
    s << ")";
    if (h.samples_per_s > 0) s << ", " << h.samples_per_s << " samples/s";
    if (h.loss_scale > 0) s << ", loss scale " << h.loss_scale;
    s << "\n";
  }
  const std::pair<const char*, std::uint64_t> sizes[] = {
      {"rss", h.rss_bytes}, {"device used", h.device_mem_used_bytes}, {"device peak", h.device_mem_peak_bytes},
      {"device total", h.device_mem_total_bytes}, {"params", h.mem_params_bytes}, {"grads", h.mem_grads_bytes},
      {"optim", h.mem_optim_bytes}, {"activations", h.mem_activations_bytes},
      {"gathered peak", h.mem_gathered_peak_bytes}, {"sent in the step", h.comm_bytes},
  };
  const char* separator = "    bytes: ";
  for (const auto& [name, bytes] : sizes) {
    if (bytes == 0) continue;
    s << separator << name << " " << bytes;
    separator = ", ";
  }
  if (std::string_view(separator) == ", ") s << "\n";
}

// What the root cause's agent last saw of it in /proc: tells a process that stopped using CPU, sleeps in the kernel
// or was stopped from one that computes, whatever it reported itself.
void append_sample(std::ostringstream& s, const Failure& root, const WorkerSample& p) {
  const char* meaning = p.state == 'R'   ? " (running)"
                        : p.state == 'S' ? " (sleeping)"
                        : p.state == 'D' ? " (uninterruptible sleep, in the kernel)"
                        : p.state == 'T' ? " (stopped by a signal)"
                        : p.state == 't' ? " (stopped by a debugger)"
                        : p.state == 'Z' ? " (exited, not reaped yet)"
                                         : "";
  s << "  its agent's last look at rank " << root.rank << " (/proc): state " << p.state << meaning << ", "
    << p.cpu_seconds << " s of CPU, " << p.threads << " thread" << (p.threads == 1 ? "" : "s");
  if (root.failed_unix_ms >= p.unix_ms && p.unix_ms > 0) {
    s << ", " << (root.failed_unix_ms - p.unix_ms) / 1000.0 << " s before it failed";
  }
  s << "\n";
}

}  // namespace

void Console::worker_lines(const LogLines& lines) {
  // One write(2) per stream for the whole batch, built from whole lines: stdout and stderr often share one file
  // (`dtrain run ... > out.log 2>&1`), and stdio's buffer would flush a line in two parts with the other stream's
  // writes in between.
  std::string out, err;
  for (const auto& line : lines.lines) {
    std::string& to = line.is_stderr ? err : out;
    to += "[" + std::to_string(line.rank) + "] ";
    to += line.text;
    to += '\n';
  }
  if (!out.empty()) write_whole(out_, out);
  if (!err.empty()) write_whole(err_, err);
}

void Console::note(std::string_view text) {
  // A note may quote what a worker, an agent or ssh wrote: it is shown with control characters escaped, the one rule
  // for other programs' bytes on the user's terminal (common/io/terminal_text.h).
  std::string shown = "dtrain: " + terminal_safe_lines(text);
  if (shown.back() != '\n') shown += '\n';
  write_whole(err_, shown);
}

std::string rank_name_of(const Failure& f) {
  return rank_name(f.rank, f.last_health ? grid_place_of(*f.last_health) : GridPlace{});
}

std::string describe_exit(const WorkerExit& exit) {
  if (!exit.spawn_error.empty()) return "could not start: " + exit.spawn_error;
  if (exit.signal != 0) {
    const char* name = signal_name(exit.signal);
    return "killed by signal " + std::to_string(exit.signal) + (name ? std::string(" (") + name + ")" : "");
  }
  return "exited with code " + std::to_string(exit.exit_code);
}

int exit_code_of(const WorkerExit& exit) {
  if (!exit.spawn_error.empty()) return exit.exit_code != 0 ? exit.exit_code : 127;
  if (exit.signal != 0) return 128 + exit.signal;
  return exit.exit_code;
}

std::string describe_failure(const Failure& f) {
  return f.health_failure.empty() ? describe_exit(f.exit) : f.health_failure;
}

int exit_code_of(const Failure& f) { return f.health_failure.empty() ? exit_code_of(f.exit) : kHealthCheckExitCode; }

std::string error_file_message(const std::string& json) {
  std::string message, traceback;
  // PyTorch's record(): {"message": {"message": "...", "extraInfo": {"py_callstack": "...", ...}}}
  std::size_t inner = json.find("\"message\"");
  if (inner != std::string::npos && json_string_field(json, "message", inner + 9, message)) {
    json_string_field(json, "py_callstack", 0, traceback);
  } else if (!json_string_field(json, "message", 0, message)) {
    message = json.substr(0, 2000);
  }
  std::string out = message;
  if (!traceback.empty() && traceback != message) out += "\n" + traceback;
  return out;
}

std::string failure_summary(const std::string& job_id, const Failure& root, const std::vector<Failure>& others,
                            int attempt, int max_restarts) {
  std::ostringstream s;
  s << "job " << job_id << " failed";
  if (max_restarts > 0) s << " after " << attempt + 1 << " attempt" << (attempt == 0 ? "" : "s");
  s << "\n  root cause: " << rank_name_of(root) << " on node " << root.node << " (" << root.host << "), pid "
    << root.exit.pid << ", " << describe_failure(root);
  if (root.exit.runtime_ms > 0 && root.health_failure.empty()) s << " after " << root.exit.runtime_ms / 1000.0 << " s";
  s << "\n";
  if (root.stacks) append_stacks(s, *root.stacks);
  if (root.collective_hang) s << "  collectives: " << *root.collective_hang << "\n";
  if (root.last_health) append_health(s, root, *root.last_health);
  if (root.last_sample) append_sample(s, root, *root.last_sample);
  if (!root.exit.error_file_json.empty()) {
    s << "  error file (TORCHELASTIC_ERROR_FILE):\n";
    std::istringstream lines(error_file_message(root.exit.error_file_json));
    for (std::string line; std::getline(lines, line);) s << "    " << terminal_safe(line) << "\n";
  }
  if (root.exit.stderr_tail.size() > 0) {
    s << "  last " << root.exit.stderr_tail.size() << " stderr line" << (root.exit.stderr_tail.size() == 1 ? "" : "s")
      << " of rank " << root.rank << ":\n";
    for (const auto& line : root.exit.stderr_tail) s << "    | " << terminal_safe(line) << "\n";
  } else if (root.exit.spawn_error.empty()) {
    s << "  rank " << root.rank << " wrote nothing to stderr\n";
  }
  if (!root.log_path.empty()) {
    s << "  full log: " << root.log_path;
    if (!root.exit.log_error.empty()) s << " (incomplete: " << root.exit.log_error << ")";
    s << "\n";
  }
  // A few other failures help tell a cascade from independent faults; thousands would bury the root cause.
  constexpr std::size_t kOthersShown = 8;
  for (std::size_t i = 0; i < others.size() && i < kOthersShown; ++i) {
    const auto& other = others[i];
    s << "  also failed: " << rank_name_of(other) << " on node " << other.node << " (" << other.host << "), "
      << describe_exit(other.exit) << "\n";
  }
  if (others.size() > kOthersShown) s << "  and " << others.size() - kOthersShown << " more ranks failed\n";
  return s.str();
}

}  // namespace dtrain::controller
