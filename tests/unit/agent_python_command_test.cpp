// Which worker commands get the PyTorch bootstrap (health.instrument: auto), and the PYTHONPATH they get.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "agent/job/python_command.h"

using dtrain::agent::PythonDirs;
using dtrain::agent::runs_python;
using dtrain::agent::worker_python_path;
using Argv = std::vector<std::string>;

TEST_CASE("an interpreter with a script, -m or -c runs Python; with nothing to run it does not") {
  CHECK(runs_python({"python3", "train.py"}));
  CHECK(runs_python({"/usr/bin/python3", "train.py", "--lr", "3e-4"}));
  CHECK(runs_python({"python", "train"}));          // a script need not end in .py
  CHECK(runs_python({"python3.11", "-m", "pkg.train"}));
  CHECK(runs_python({"python3", "-mpkg.train"}));
  CHECK(runs_python({"python3", "-c", "import torch"}));
  CHECK(runs_python({"python3", "-", "arg"}));        // the program from stdin
  CHECK(runs_python({"python3", "-u", "-X", "dev", "-W", "error", "train.py"}));
  CHECK(runs_python({"python3", "-uBm", "pkg"}));
  CHECK(runs_python({"python3", "-Werror", "train.py"}));
  CHECK(runs_python({"python3", "--check-hash-based-pycs", "never", "train.py"}));
  CHECK(runs_python({"python3", "--", "train.py"}));

  CHECK_FALSE(runs_python({"python3"}));             // an interactive prompt
  CHECK_FALSE(runs_python({"python3", "-u"}));
  CHECK_FALSE(runs_python({"python3", "-X", "dev"}));  // dev is -X's value, not a script
  CHECK_FALSE(runs_python({"python3", "-m"}));
  CHECK_FALSE(runs_python({"python3", "--"}));
}

TEST_CASE("a .py path runs Python; other programs, shells and launchers of Python do not") {
  CHECK(runs_python({"./train.py", "--epochs", "3"}));
  CHECK(runs_python({"/opt/job/train.py"}));
  CHECK_FALSE(runs_python({}));
  CHECK_FALSE(runs_python({"dtrain-trainer", "--model", "tiny", "train.py"}));
  CHECK_FALSE(runs_python({".py"}));
  CHECK_FALSE(runs_python({"train.pyc"}));
  CHECK_FALSE(runs_python({"pythonista", "train.py"}));
  CHECK_FALSE(runs_python({"python3-config", "train.py"}));
  CHECK_FALSE(runs_python({"python3.x", "train.py"}));
  CHECK_FALSE(runs_python({"/bin/sh", "-c", "python3 train.py"}));
  CHECK_FALSE(runs_python({"torchrun", "--nproc-per-node", "2", "train.py"}));
}

TEST_CASE("behind env(1), the command after its options and assignments decides") {
  CHECK(runs_python({"env", "python3", "train.py"}));
  CHECK(runs_python({"/usr/bin/env", "-i", "-u", "HOME", "A=1", "B=2", "python3", "-m", "pkg"}));
  CHECK(runs_python({"env", "-C", "/tmp", "./train.py"}));
  CHECK(runs_python({"env", "--", "python3", "train.py"}));
  CHECK_FALSE(runs_python({"env", "A=1"}));
  CHECK_FALSE(runs_python({"env", "A=1", "dtrain-trainer"}));
  CHECK_FALSE(runs_python({"env", "python3"}));
}

TEST_CASE("PYTHONPATH: the helper's directory, the bootstrap's only for Python with instrument, then the rest") {
  const PythonDirs dirs{.helper = "/share/python", .bootstrap = "/share/python/bootstrap"};
  const Argv python = {"python3", "train.py"}, trainer = {"dtrain-trainer"};
  CHECK(worker_python_path(dirs, true, python, "/user") == "/share/python:/share/python/bootstrap:/user");
  CHECK(worker_python_path(dirs, true, python, "") == "/share/python:/share/python/bootstrap");
  CHECK(worker_python_path(dirs, false, python, "/user") == "/share/python:/user");
  CHECK(worker_python_path(dirs, true, trainer, "/user") == "/share/python:/user");
  const PythonDirs helper_only{.helper = "/share/python", .bootstrap = ""};
  CHECK(worker_python_path(helper_only, true, python, "/user") == "/share/python:/user");
  CHECK(worker_python_path({}, true, python, "/user") == "/user");
  CHECK(worker_python_path({}, true, python, "").empty());
}
