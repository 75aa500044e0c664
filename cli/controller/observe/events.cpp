#include "cli/controller/observe/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dtrain::controller {

Status EventLog::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return {StatusCode::internal, "cannot open the event log " + path + ": " + std::strerror(errno) +
                                      "; the job runs without it (check the run directory's permissions and space)"};
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  path_ = path;
  return {};
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status EventLog::write(std::string_view event, const nlohmann::ordered_json& fields, std::uint64_t unix_ms) {
  if (fd_ < 0) return {};
  nlohmann::ordered_json line = {{"ts", unix_ms}, {"event", event}};
  for (const auto& [key, value] : fields.items()) line[key] = value;
  // Worker output and host names may hold bytes that are not UTF-8: replaced, never a broken line.
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // O_APPEND and one write per line: a reader never sees half a line, unless the disk fills in the middle of it.
  std::string_view rest = text;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return {StatusCode::resource_exhausted, "cannot append to the event log " + path_ + ": " +
                                                  std::strerror(n < 0 ? errno : ENOSPC) +
                                                  "; later events are lost (free space in logs.dir)"};
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace dtrain::controller
