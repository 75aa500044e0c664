#include "agent/supervisor/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "common/os/syscalls.h"

namespace dtrain::supervisor {
namespace {

constexpr EventLoop::Token kWakeToken = 0;

}  // namespace

EventLoop::EventLoop() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw_errno("epoll_create1");
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    const int err = errno;
    close(epoll_fd_);
    throw std::system_error(err, std::generic_category(), "eventfd");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeToken;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    const int err = errno;
    close(wake_fd_);
    close(epoll_fd_);
    throw std::system_error(err, std::generic_category(), "epoll_ctl(eventfd)");
  }
}

EventLoop::~EventLoop() {
  close(wake_fd_);
  close(epoll_fd_);
}

EventLoop::Token EventLoop::add(int fd, std::uint32_t events, Handler handler) {
  const Token token = next_token_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl(ADD)");
  watches_.emplace(token, Watch{fd, std::make_shared<Handler>(std::move(handler))});
  return token;
}

void EventLoop::remove(Token token) {
  auto it = watches_.find(token);
  if (it == watches_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
  watches_.erase(it);
}

void EventLoop::post(std::function<void()> task) {
  {
    std::lock_guard lock(posted_mutex_);
    posted_.push_back(std::move(task));
  }
  const std::uint64_t one = 1;
  // EAGAIN means the counter is saturated, so the loop is woken anyway.
  [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof one);
}

void EventLoop::run_posted() {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = read(wake_fd_, &count, sizeof count);
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(posted_mutex_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) task();
}

void EventLoop::run_once(int timeout_ms) {
  epoll_event events[64];
  const int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return;
    throw_errno("epoll_wait");
  }
  bool woken = false;
  for (int i = 0; i < n; ++i) {
    const Token token = events[i].data.u64;
    if (token == kWakeToken) {
      woken = true;
      continue;
    }
    auto it = watches_.find(token);
    if (it == watches_.end()) continue;  // removed by an earlier handler in this batch
    const std::shared_ptr<Handler> handler = it->second.handler;
    (*handler)(events[i].events);
  }
  if (woken) run_posted();
}

}  // namespace dtrain::supervisor
