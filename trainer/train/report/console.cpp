#include "trainer/train/report/console.h"

#include <cstdio>
#include <memory>
#include <mutex>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

namespace dtrain::trainer {
namespace {

// Levels below warn go to stdout, the rest to stderr; each line is flushed (the launcher streams both).
class SplitSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::FILE* out = msg.level >= spdlog::level::warn ? stderr : stdout;
    std::fwrite(line.data(), 1, line.size(), out);
    std::fflush(out);
  }
  void flush_() override {
    std::fflush(stdout);
    std::fflush(stderr);
  }
};

}  // namespace

void setup_console() {
  auto logger = std::make_shared<spdlog::logger>("dtrain-trainer", std::make_shared<SplitSink>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  spdlog::set_default_logger(logger);
}

void quiet_console_unless_rank0(int rank) {
  if (rank != 0) spdlog::set_level(spdlog::level::warn);
}

}  // namespace dtrain::trainer
