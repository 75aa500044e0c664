#pragma once
// A single-threaded epoll loop with a thread-safe task queue (woken through an eventfd).

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dtrain::supervisor {

// Level-triggered: a handler that leaves data unread is called again on the next run_once(). All methods except
// post() must be called on the thread that calls run_once().
class EventLoop {
 public:
  using Handler = std::function<void(std::uint32_t epoll_events)>;
  using Token = std::uint64_t;

  EventLoop();  // throws std::system_error when epoll or eventfd cannot be created
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Watches `fd` (not owned, not closed by the loop) for `events` (EPOLLIN, ...). Throws std::system_error.
  Token add(int fd, std::uint32_t events, Handler handler);
  // Stops watching. Safe from inside any handler, including the removed one; events already fetched for the token
  // are dropped. Call before closing the fd.
  void remove(Token token);
  // Queues `task` to run on the loop thread during a later run_once(). Safe from any thread.
  void post(std::function<void()> task);
  // Waits up to `timeout_ms` (-1: no limit, 0: do not wait) for events, then runs their handlers and queued tasks.
  void run_once(int timeout_ms);

 private:
  struct Watch {
    int fd;
    std::shared_ptr<Handler> handler;  // shared so a handler that removes itself is not destroyed while running
  };
  void run_posted();

  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd written by post()
  Token next_token_ = 1;
  std::unordered_map<Token, Watch> watches_;
  std::mutex posted_mutex_;
  std::vector<std::function<void()>> posted_;
};

}  // namespace dtrain::supervisor
