#include "agent/service/health_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/report/report_fields.h"

namespace dtrain::agent {
namespace {

using Json = nlohmann::json;

Status wrong_type(const char* name, const char* want) {
  return {StatusCode::invalid_argument, std::string("field \"") + name + "\" is not " + want};
}

// A required string member; "" when absent (the token check then refuses it with its reason).
Result<std::string> string_member(const Json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) return {{}, {}};
  if (!it->is_string()) return {wrong_type(name, "a string")};
  return {{}, it->get<std::string>()};
}

Result<std::uint64_t> count_member(const Json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) return {{}, 0};
  if (!it->is_number_unsigned()) return {wrong_type(name, "an integer, 0 or more")};
  return {{}, it->get<std::uint64_t>()};
}

// A JSON boolean only, false when absent (a 1 or "true" is a sender's mistake, refused like any field of the wrong
// type, not guessed at).
Result<bool> flag_member(const Json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) return {{}, false};
  if (!it->is_boolean()) return {wrong_type(name, "a boolean (true or false)")};
  return {{}, it->get<bool>()};
}

// "points": [[step, loss, step_ms, tokens_per_s], ...] into `report` (none when absent). The shape is checked here
// (an array of at most kMaxStepPoints arrays of four numbers, the step an integer, 0 or more); the values are
// check_report_values'.
Status points_member(const Json& object, v1::WorkerReport& report) {
  const auto it = object.find("points");
  if (it == object.end()) return {};
  const char* shape = "a list of [step, loss, step_ms, tokens_per_s] lists";
  if (!it->is_array()) return wrong_type("points", shape);
  if (it->size() > kMaxStepPoints) {
    return {StatusCode::invalid_argument, "field \"points\" holds " + std::to_string(it->size()) +
                                              " steps; a report carries at most " + std::to_string(kMaxStepPoints) +
                                              " (thin them: keep the first, the last and the lowest and highest "
                                              "losses between)"};
  }
  for (std::size_t i = 0; i < it->size(); ++i) {
    const Json& p = (*it)[i];
    if (!p.is_array() || p.size() != 4 || !p[0].is_number_unsigned() || !p[1].is_number() || !p[2].is_number() ||
        !p[3].is_number()) {
      return {StatusCode::invalid_argument, "field \"points\" is not " + std::string(shape) + " (entry " +
                                                std::to_string(i) + " is " + p.dump() + "; the step is an integer, "
                                                "0 or more)"};
    }
    v1::StepPoint* out = report.add_points();
    out->set_step(p[0].get<std::uint64_t>());
    out->set_loss(p[1].get<double>());
    out->set_step_ms(p[2].get<double>());
    out->set_tokens_per_s(p[3].get<double>());
  }
  return {};
}

// Reads a `fd`'s datagram into `buffer`; its size (the whole datagram's, which may exceed the buffer: MSG_TRUNC),
// and the sender's pid from its credentials. -1 with errno on failure.
ssize_t receive(int fd, std::array<char, kMaxHealthDatagram + 1>& buffer, pid_t& sender) {
  iovec data{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  const ssize_t size = ::recvmsg(fd, &message, MSG_TRUNC | MSG_CMSG_CLOEXEC);
  sender = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); size >= 0 && c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      ucred credentials;
      std::memcpy(&credentials, CMSG_DATA(c), sizeof credentials);
      sender = credentials.pid;
    }
  }
  return size;
}

}  // namespace

Result<HealthDatagram> parse_health_datagram(std::string_view bytes) {
  const Json object = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return {{StatusCode::invalid_argument, "not JSON"}};
  if (!object.is_object()) return {{StatusCode::invalid_argument, "not a JSON object"}};
  HealthDatagram out;
  const auto rank = object.find("rank");
  if (rank == object.end() || !rank->is_number_unsigned() || rank->get<std::uint64_t>() > UINT32_MAX) {
    return {wrong_type("rank", "present and a rank (an integer, 0 to 2^32-1)")};
  }
  out.report.set_rank(rank->get<std::uint32_t>());
  Result<std::string> token = string_member(object, "token");
  Result<std::string> report_token = string_member(object, "report_token");
  if (!token.ok()) return {token.status};
  if (!report_token.ok()) return {report_token.status};
  out.token = std::move(token.value);
  out.report_token = std::move(report_token.value);
  // Every other field of the report by its name (common/report/report_fields.h); a field left out is 0.
  for (const auto& field : report_counts()) {
    const Result<std::uint64_t> count = count_member(object, field.name);
    if (!count.ok()) return {count.status};
    field.set(out.report, count.value);
  }
  for (const auto& field : report_amounts()) {
    const auto it = object.find(field.name);
    if (it == object.end()) continue;
    if (!it->is_number()) return {wrong_type(field.name, "a number")};
    field.set(out.report, it->get<double>());
  }
  for (const auto& field : report_texts()) {
    Result<std::string> text = string_member(object, field.name);
    if (!text.ok()) return {text.status};
    field.set(out.report, std::move(text.value));
  }
  for (const auto& field : report_ids()) {
    if (std::string_view(field.name) == "rank") continue;  // required, above
    // Its bound is check_report_values'; here only what fits the field.
    const Result<std::uint64_t> id = count_member(object, field.name);
    if (!id.ok()) return {id.status};
    if (id.value > UINT32_MAX) return {wrong_type(field.name, "a signal number")};
    field.set(out.report, static_cast<std::uint32_t>(id.value));
  }
  // exiting: the last report of a process that is exiting; quiet: one sent as it enters a call that keeps its
  // reporter from running.
  for (const auto& field : report_flags()) {
    const Result<bool> flag = flag_member(object, field.name);
    if (!flag.ok()) return {flag.status};
    field.set(out.report, flag.value);
  }
  if (Status points = points_member(object, out.report); !points.ok()) return {points};
  return {{}, std::move(out)};
}

HealthSocket::HealthSocket(std::string path, Sink sink) : path_(std::move(path)), sink_(std::move(sink)) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.size() >= sizeof address.sun_path) {
    throw std::runtime_error("the health socket path " + path_ + " is longer than a Unix socket address allows (" +
                             std::to_string(sizeof address.sun_path - 1) + " bytes): set XDG_RUNTIME_DIR or TMPDIR "
                             "to a shorter directory");
  }
  std::memcpy(address.sun_path, path_.data(), path_.size());
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int on = 1;
  ::unlink(path_.c_str());
  if (fd_ < 0 || ::setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const std::string why = std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error("cannot bind the health socket " + path_ + ": " + why);
  }
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    ::unlink(path_.c_str());
    throw std::runtime_error("cannot start the health socket's receiver: eventfd: " + why);
  }
  thread_ = std::thread([this] { run(); });
}

HealthSocket::~HealthSocket() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(stop_fd_, &one, sizeof one);
  thread_.join();
  ::close(stop_fd_);
  ::close(fd_);
  ::unlink(path_.c_str());
}

void HealthSocket::run() {
  pollfd watched[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  while (true) {
    // No timeout: the destructor's eventfd write is the one way out, and datagrams wake it otherwise.
    if (::poll(watched, 2, -1) < 0 && errno != EINTR) {
      spdlog::error("health socket {}: poll failed ({}); health reports over it stop", path_, std::strerror(errno));
      return;
    }
    if (watched[1].revents != 0) return;
    std::lock_guard lock(receiving_);
    receive_queued();
  }
}

void HealthSocket::drain() {
  std::lock_guard lock(receiving_);
  receive_queued();
}

void HealthSocket::receive_queued() {
  pid_t sender = 0;
  ssize_t size;
  // Bounded, so that a worker sending without pause cannot hold drain()'s caller (the supervisor's thread) for ever.
  for (std::size_t n = 0; n < kMaxBatch && (size = receive(fd_, buffer_, sender)) >= 0; ++n) {
    const bool truncated = static_cast<std::size_t>(size) > kMaxHealthDatagram;
    take(std::string_view(buffer_.data(), truncated ? 0 : static_cast<std::size_t>(size)), truncated, sender);
  }
}

void HealthSocket::take(std::string_view bytes, bool truncated, pid_t sender) {
  if (truncated) {
    drop(Drop::oversized, "over " + std::to_string(kMaxHealthDatagram) + " bytes");
    return;
  }
  Result<HealthDatagram> parsed = parse_health_datagram(bytes);
  if (!parsed.ok()) {
    drop(Drop::malformed, parsed.status.message());
    return;
  }
  parsed.value.sender = sender;
  if (Status refused = sink_(parsed.value); !refused.ok()) {
    const Drop kind = refused.code() == StatusCode::failed_precondition ? Drop::other_process : Drop::refused;
    drop(kind, "rank " + std::to_string(parsed.value.report.rank()) + ": " + refused.message());
    return;
  }
  ++accepted_;
}

void HealthSocket::drop(Drop kind, const std::string& why) {
  static constexpr const char* kNames[] = {"malformed", "oversized", "refused", "from another process"};
  const std::uint64_t count = ++dropped_[static_cast<std::size_t>(kind)];
  if (count % kLogEvery == 1) {
    spdlog::warn("health socket {}: dropped a datagram ({}: {}); {} of that kind so far (logged once per {})", path_,
                 kNames[static_cast<std::size_t>(kind)], why, count, kLogEvery);
  }
}

}  // namespace dtrain::agent
