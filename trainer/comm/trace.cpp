#include "trainer/comm/trace.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace dtrain::trainer {
namespace {

std::atomic<const CollectiveTrace*> live_traces[kMaxTraces];

std::int64_t now_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

}  // namespace

SignalSafeLine& SignalSafeLine::text(const char* s) {
  while (*s != '\0' && used_ < sizeof(buffer_) - 1) buffer_[used_++] = *s++;
  return *this;
}

SignalSafeLine& SignalSafeLine::number(std::uint64_t value) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0 && used_ < sizeof(buffer_) - 1) buffer_[used_++] = digits[--n];
  return *this;
}

SignalSafeLine& SignalSafeLine::seconds(std::int64_t us) {
  const std::uint64_t ms = static_cast<std::uint64_t>(std::max<std::int64_t>(us, 0)) / 1000;
  number(ms / 1000).text(".");
  const std::uint64_t frac = ms % 1000;
  if (frac < 100) text("0");
  if (frac < 10) text("0");
  return number(frac).text(" s");
}

void SignalSafeLine::write_to(int fd) {
  buffer_[used_++] = '\n';
  std::size_t done = 0;
  while (done < used_) {
    const ssize_t n = ::write(fd, buffer_ + done, used_ - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

CollectiveTrace::CollectiveTrace(std::string name) : name_(std::move(name)), slots_(kCapacity) {
  for (auto& entry : live_traces) {
    const CollectiveTrace* empty = nullptr;
    if (entry.compare_exchange_strong(empty, this)) break;
  }
}

CollectiveTrace::~CollectiveTrace() {
  for (auto& entry : live_traces) {
    const CollectiveTrace* self = this;
    if (entry.compare_exchange_strong(self, nullptr)) break;
  }
}

std::uint64_t CollectiveTrace::issue(const std::string& what) {
  const std::uint64_t seq = issued_.load() + 1;
  Slot& s = slot(seq);
  s.version.fetch_add(1);   // odd: being written
  s.seq = seq;
  s.issued_us = now_us();
  s.started_us = 0;
  s.finished_us = 0;
  const std::size_t n = std::min(what.size(), kWhatBytes - 1);
  for (std::size_t i = 0; i < kWhatBytes; ++i) s.what[i] = i < n ? what[i] : '\0';
  s.version.fetch_add(1);
  issued_ = seq;
  return seq;
}

void CollectiveTrace::started(std::uint64_t seq) {
  Slot& s = slot(seq);
  if (s.seq == seq) s.started_us = now_us();
  started_ = std::max(started_.load(), seq);
}

void CollectiveTrace::finished(std::uint64_t seq) {
  Slot& s = slot(seq);
  if (s.seq == seq) s.finished_us = now_us();
  finished_ = std::max(finished_.load(), seq);
}

TraceSummary CollectiveTrace::summary() const {
  TraceSummary summary{issued_, started_, finished_, {}};
  if (summary.finished < summary.issued) {
    const Slot& s = slot(summary.finished + 1);
    if (s.seq == summary.finished + 1) {
      for (const auto& c : s.what) {
        const char ch = c.load();
        if (ch == '\0') break;
        summary.pending += ch;
      }
    }
  }
  return summary;
}

void CollectiveTrace::write_to(int fd) const {
  const std::uint64_t issued = issued_;
  SignalSafeLine header;
  header.text("collectives of ").text(name_.c_str()).text(": issued ").number(issued).text(", started ")
      .number(started_).text(", finished ").number(finished_);
  header.write_to(fd);
  const std::uint64_t first = issued > kCapacity ? issued - kCapacity + 1 : 1;
  for (std::uint64_t seq = first; seq <= issued; ++seq) {
    const Slot& s = slot(seq);
    const std::uint64_t before = s.version;
    char what[kWhatBytes];
    for (std::size_t i = 0; i < kWhatBytes; ++i) what[i] = s.what[i];
    what[kWhatBytes - 1] = '\0';
    const std::uint64_t slot_seq = s.seq;
    const std::int64_t issued_us = s.issued_us, started_us = s.started_us, finished_us = s.finished_us;
    // A slot being rewritten (or rewritten meanwhile) is skipped rather than printed torn.
    if ((before & 1) != 0 || s.version != before || slot_seq != seq) continue;
    SignalSafeLine line;
    line.text("#").number(seq).text(" ").text(what).text(": issued at ").seconds(issued_us);
    if (started_us == 0) {
      line.text(", not started");
    } else {
      line.text(", started at ").seconds(started_us);
      if (finished_us == 0) {
        line.text(", not finished");
      } else {
        line.text(", finished at ").seconds(finished_us);
      }
    }
    line.write_to(fd);
  }
}

void write_all_traces(int fd) {
  for (const auto& entry : live_traces) {
    if (const CollectiveTrace* trace = entry.load()) trace->write_to(fd);
  }
}

}  // namespace dtrain::trainer
