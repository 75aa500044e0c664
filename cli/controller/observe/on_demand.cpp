#include "cli/controller/observe/on_demand.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "common/os/syscalls.h"

namespace dtrain::controller {

Result<std::unique_ptr<OnDemandText>> OnDemandText::create(std::string initial) {
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return {{StatusCode::internal, "eventfd: " + errno_text()}};
  return {{}, std::unique_ptr<OnDemandText>(new OnDemandText(wake, std::move(initial)))};
}

OnDemandText::OnDemandText(int wake_fd, std::string initial)
    : wake_fd_(wake_fd), text_(std::make_shared<const std::string>(std::move(initial))) {}

OnDemandText::~OnDemandText() { ::close(wake_fd_); }

void OnDemandText::publish(std::string text) {
  auto next = std::make_shared<const std::string>(std::move(text));
  {
    std::lock_guard lock(mutex_);
    text_ = std::move(next);
    published_at_ = Clock::now();
    ++generation_;
    wanted_.store(false, std::memory_order_relaxed);
  }
  const std::uint64_t one = 1;
  while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void OnDemandText::clear_wake() {
  std::uint64_t count = 0;
  while (::read(wake_fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
}

std::uint64_t OnDemandText::ask() {
  std::lock_guard lock(mutex_);
  wanted_.store(true, std::memory_order_relaxed);
  return generation_;
}

void OnDemandText::ask_again() { wanted_.store(true, std::memory_order_relaxed); }

OnDemandText::Text OnDemandText::for_reader(std::uint64_t asked, bool waited) const {
  std::lock_guard lock(mutex_);
  return generation_ != asked || waited ? text_ : nullptr;
}

OnDemandText::Text OnDemandText::latest() const {
  std::lock_guard lock(mutex_);
  return text_;
}

bool OnDemandText::younger_than(Clock::duration age) const {
  std::lock_guard lock(mutex_);
  return generation_ > 0 && Clock::now() - published_at_ < age;
}

}  // namespace dtrain::controller
