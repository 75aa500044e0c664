#include <doctest/doctest.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "cli/controller/console/console.h"
#include "cli/controller/round/restart_policy.h"

using namespace dtrain::controller;

TEST_CASE("exit descriptions and the launcher's exit code") {
  WorkerExit exit;
  exit.exit_code = 3;
  CHECK(describe_exit(exit) == "exited with code 3");
  CHECK(exit_code_of(exit) == 3);

  exit.exit_code = 0;
  exit.signal = SIGKILL;
  CHECK(describe_exit(exit) == "killed by signal 9 (SIGKILL)");
  CHECK(exit_code_of(exit) == 137);

  WorkerExit never;
  never.spawn_error = "cannot execute 'trainx': No such file or directory";
  CHECK(describe_exit(never) == "could not start: cannot execute 'trainx': No such file or directory");
  CHECK(exit_code_of(never) == 127);
}

TEST_CASE("PyTorch error files: message and traceback; other text passed through") {
  std::string json =
      R"({"message": {"message": "RuntimeError: CUDA out of memory", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 7", "timestamp": "1700000000"}}})";
  CHECK(error_file_message(json) ==
        "RuntimeError: CUDA out of memory\nTraceback (most recent call last):\n  File \"train.py\", line 7");
  CHECK(error_file_message(R"({"message": "plain"})") == "plain");
  CHECK(error_file_message("not json at all") == "not json at all");
}

TEST_CASE("failure summary names rank, node, host, pid, cause, stderr tail, error file and log") {
  Failure root;
  root.rank = 2;
  root.node = 1;
  root.host = "gpu-07";
  root.exit.pid = 4242;
  root.exit.exit_code = 3;
  root.exit.runtime_ms = 1500;
  root.exit.stderr_tail.push_back("loading shard 17");
  root.exit.stderr_tail.push_back("boom");
  root.exit.error_file_json = R"({"message": {"message": "ValueError: bad shard", "extraInfo": {}}})";
  root.log_path = "/runs/job/attempt_0/rank_2.log";
  Failure other;
  other.rank = 5;
  other.node = 1;
  other.host = "gpu-07";
  other.exit.signal = SIGSEGV;
  std::string text = failure_summary("job-1", root, {other}, 0, 0);
  CHECK(text.find("job job-1 failed") != std::string::npos);
  CHECK(text.find("root cause: rank 2 on node 1 (gpu-07), pid 4242, exited with code 3 after 1.5 s") !=
        std::string::npos);
  CHECK(text.find("    | loading shard 17\n    | boom\n") != std::string::npos);
  CHECK(text.find("ValueError: bad shard") != std::string::npos);
  CHECK(text.find("full log: /runs/job/attempt_0/rank_2.log") != std::string::npos);
  CHECK(text.find("also failed: rank 5 on node 1 (gpu-07), killed by signal 11 (SIGSEGV)") != std::string::npos);
  CHECK(failure_summary("job-1", root, {}, 2, 3).find("failed after 3 attempts") != std::string::npos);
}

TEST_CASE("failure summary shows the root cause's last phase, when its report had one") {
  Failure root;
  root.rank = 1;
  root.health_failure = "made no progress for 60 s (health.hang_timeout_s)";
  WorkerHealth health;
  health.step = 7;
  health.loss = 2.5;
  health.tokens_per_s = 1000;
  health.phase = "allreduce bucket 3";
  root.last_health = health;
  CHECK(failure_summary("job-1", root, {}, 0, 0)
            .find("last health report of rank 1: step 7, loss 2.5, 1000 tokens/s, last phase: allreduce bucket 3") !=
        std::string::npos);
  root.last_health->phase.clear();
  CHECK(failure_summary("job-1", root, {}, 0, 0).find("last phase") == std::string::npos);
  CHECK(failure_summary("job-1", root, {}, 0, 0).find("its last step") == std::string::npos);
  CHECK(failure_summary("job-1", root, {}, 0, 0).find("bytes:") == std::string::npos);
}

TEST_CASE("failure summary shows where the root cause's last step went and the sizes it reported") {
  Failure root;
  root.rank = 1;
  root.exit.signal = SIGKILL;
  WorkerHealth health;
  health.step_ms = 200;
  health.data_wait_ms = 1;
  health.compute_ms = 150;
  health.comm_exposed_ms = 20;
  health.optimizer_ms = 25;
  health.loss_scale = 1024;
  health.rss_bytes = 7;
  health.mem_params_bytes = 100;
  health.mem_gathered_peak_bytes = 50;
  health.comm_bytes = 300;
  root.last_health = health;
  std::string text = failure_summary("job-1", root, {}, 0, 0);
  CHECK(text.find("    its last step: 200 ms (data wait 1, compute 150, comm exposed 20, optimizer 25), loss scale "
                  "1024\n") != std::string::npos);
  CHECK(text.find("    bytes: rss 7, params 100, gathered peak 50, sent in the step 300\n") != std::string::npos);
  // Samples/s and the device memory, when the worker reported them.
  root.last_health->samples_per_s = 64;
  root.last_health->device_mem_used_bytes = 8;
  root.last_health->device_mem_peak_bytes = 6;
  root.last_health->device_mem_total_bytes = 9;
  text = failure_summary("job-1", root, {}, 0, 0);
  CHECK(text.find("optimizer 25), 64 samples/s, loss scale 1024\n") != std::string::npos);
  CHECK(text.find("    bytes: rss 7, device used 8, device peak 6, device total 9, params 100,") != std::string::npos);
}

TEST_CASE("failure summary shows what the root cause's agent last saw of it in /proc") {
  Failure root;
  root.rank = 1;
  root.exit.signal = SIGKILL;
  root.failed_unix_ms = 5000;
  WorkerSample sample;
  sample.state = 'T';
  sample.cpu_seconds = 1.5;
  sample.threads = 4;
  sample.unix_ms = 4500;
  root.last_sample = sample;
  CHECK(failure_summary("job-1", root, {}, 0, 0)
            .find("  its agent's last look at rank 1 (/proc): state T (stopped by a signal), 1.5 s of CPU, 4 threads, "
                  "0.5 s before it failed\n") != std::string::npos);
  root.last_sample.reset();
  CHECK(failure_summary("job-1", root, {}, 0, 0).find("last look") == std::string::npos);
}

TEST_CASE("restart policy counts restarts, not attempts") {
  RestartPolicy none(0, std::chrono::milliseconds(1000));
  CHECK_FALSE(none.may_restart(0));
  RestartPolicy two(2, std::chrono::milliseconds(250));
  CHECK(two.may_restart(0));
  CHECK(two.may_restart(1));
  CHECK_FALSE(two.may_restart(2));
  CHECK(two.backoff() == std::chrono::milliseconds(250));
}

TEST_CASE("failure summary lists a few other failures, then counts the rest") {
  Failure root;
  root.exit.exit_code = 1;
  std::vector<Failure> others(12);
  for (unsigned i = 0; i < others.size(); ++i) {
    others[i].rank = 100 + i;
    others[i].exit.exit_code = 1;
  }
  std::string text = failure_summary("job", root, others, 0, 0);
  CHECK(text.find("also failed: rank 107") != std::string::npos);
  CHECK(text.find("also failed: rank 108") == std::string::npos);
  CHECK(text.find("and 4 more ranks failed") != std::string::npos);
}

TEST_CASE("error files: JSON \\u escapes are decoded, surrogate pairs included") {
  CHECK(error_file_message(R"({"message": "a\u001b[2Jb\u00e9"})") == "a\x1b[2Jb\xc3\xa9");
  CHECK(error_file_message(R"({"message": "\ud83d\ude00 done"})") == "\xf0\x9f\x98\x80 done");
  CHECK(error_file_message(R"({"message": "lone \udc00 half"})") == "lone \xef\xbf\xbd half");
}

TEST_CASE("failure summary shows a worker's terminal controls escaped: stderr tail, phase, error file, stacks") {
  Failure root;
  root.rank = 0;
  root.exit.exit_code = 1;
  root.exit.stderr_tail.push_back("boom \x1b]0;pwned\x07");
  root.exit.error_file_json = R"({"message": "bad \u001b[2J\u0007 file"})";
  WorkerHealth health;
  health.phase = "phase\x1b[2J\nline";
  root.last_health = health;
  RankStacks stacks;
  stacks.top_frames.push_back("#0 frame\x1b[31m");
  root.stacks = stacks;
  const std::string text = failure_summary("job-1", root, {}, 0, 0);
  CHECK(text.find("    | boom \\x1b]0;pwned\\x07\n") != std::string::npos);
  CHECK(text.find("last phase: phase\\x1b[2J\\x0aline") != std::string::npos);
  CHECK(text.find("    bad \\x1b[2J\\x07 file\n") != std::string::npos);
  CHECK(text.find("    #0 frame\\x1b[31m\n") != std::string::npos);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
}

TEST_CASE("a launcher note is shown with control characters escaped, line by line") {
  std::FILE* err = std::tmpfile();
  REQUIRE(err != nullptr);
  Console console(stdout, err);
  console.note("node 0 agent: \x1b[2Jcleared\nsecond\tline\x07");
  std::rewind(err);
  char text[256] = {};
  const std::size_t n = std::fread(text, 1, sizeof text - 1, err);
  std::fclose(err);
  CHECK(std::string(text, n) == "dtrain: node 0 agent: \\x1b[2Jcleared\nsecond\tline\\x07\n");
}
