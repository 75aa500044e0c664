#pragma once

// Which worker commands run Python, and the PYTHONPATH such a worker gets, for health.instrument: auto: the PyTorch
// bootstrap (worker/python/bootstrap/sitecustomize.py) reaches only the workers that run Python, so any other
// program's environment keeps what it had.

#include <string>
#include <vector>

namespace dtrain::agent {

// Whether exec'ing `argv` runs a Python program, judged from argv alone:
//   - a Python interpreter (python, python3, python3.11, ... by file name, from any directory) followed by something
//     to run: a script path ("-" for stdin), `-m module` or `-c code`; its options before that (-u, -O, -X dev,
//     -W error, -- ...) are skipped. An interpreter with nothing to run (an interactive prompt) does not count;
//   - a path ending in ".py" (a script run through its own #! line);
//   - either of them behind env(1): `env [-i] [-u NAME] [-C DIR] [NAME=VALUE]... COMMAND...`.
// A shell command (`shell: true`: /bin/sh -c STRING) is not looked into and does not count, nor does a launcher of
// Python such as torchrun or uv: their children would see the bootstrap too, so they are left alone.
bool runs_python(const std::vector<std::string>& argv);

// The directories dtrain puts on a worker's PYTHONPATH; "" where the agent did not find one.
struct PythonDirs {
  std::string helper;     // dtrain_health.py's directory: on every worker's PYTHONPATH
  std::string bootstrap;  // the bootstrap's directory (its sitecustomize.py): only where instrument_python applies
};

// The PYTHONPATH of a worker with this argv: the helper's directory, then the bootstrap's when `instrument` and
// runs_python(argv) (before everything of the user's, so that its sitecustomize is found first and then loads
// theirs), then `rest` (the plan's PYTHONPATH, else the agent's own). Empty parts are left out; "" = unset.
std::string worker_python_path(const PythonDirs& dirs, bool instrument, const std::vector<std::string>& argv,
                               const std::string& rest);

}  // namespace dtrain::agent
