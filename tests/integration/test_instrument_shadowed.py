"""A script's own modules named as the bootstrap's never reach the bootstrap (real agents, Debian's torch 1.13, one
rank, `dtrain run`): the bootstrap loads its C wrappers (_dtrain_hooks) and the health helper (dtrain_health) from
their files beside its own directory, not by name through sys.path, where the script's directory (or the working
directory, for -m and -c) comes first. Each job runs 3 optimizer steps of an unmodified script, then imports the
module of that name itself:
  hooks     a _dtrain_hooks.py beside the script (any module of the user's: no State in it): the job succeeds (exit 0;
            `import torch` used to raise AttributeError out of the bootstrap), the C wrappers armed, its 3 steps
            reach `dtrain status`, and the script's own import of _dtrain_hooks is its file, imported by nobody before;
  helper    `python -m job` from a working directory that holds a dtrain_health.py of the user's: the same, and the
            bootstrap neither ran that file (it used to, at the first step, and then turned itself off: no steps)
            nor said that it turned itself off."""

import os
import re

from harness import PYTHON, Run, check, finish, status_json, write

JOB = r"""
import sys
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
name = sys.argv[1]
before = name in sys.modules
mine = __import__(name)
print("wrappers %s; %s imported before the script: %s; the script's import is its own: %s" % (
    type(torch.Tensor.backward).__name__, name, before, getattr(mine, "USERS_OWN", False)), flush=True)
"""

USERS_OWN = "USERS_OWN = True\n"


def job(case, name, as_module):
    """`dtrain run` of JOB in a fresh directory that holds the user's module `name`: the script by its path, or
    `-m job` from that directory."""
    run = Run([], timeout=120)
    script = write(os.path.join(run.dir, "job.py"), JOB)
    write(os.path.join(run.dir, name + ".py"), USERS_OWN)
    run.args += ["run", "-n", "1", "--", PYTHON] + (["-m", "job"] if as_module else [script]) + [name]
    run.run()
    run.show()
    check(run.code == 0, "%s: the job succeeds, got %s" % (case, run.code))
    said = re.search(r"wrappers (\w+); %s imported before the script: (\w+); the script's import is its own: (\w+)"
                     % name, run.out)
    check(said is not None and said.groups() == ("Hook", "False", "True"),
          "%s: the C wrappers armed, the bootstrap did not import the user's %s.py, and the script's import is that "
          "file: %s" % (case, name, said and said.groups()))
    check("instrumentation (health.instrument: auto) is off" not in run.err + run.out,
          "%s: the instrumentation did not turn itself off" % case)
    steps = [r.get("step") for r in status_json(run).get("ranks", [])]
    check(steps == [3], "%s: dtrain status shows the 3 steps: %s" % (case, steps))
    run.assert_no_leaks()


job("hooks", "_dtrain_hooks", as_module=False)
job("helper", "dtrain_health", as_module=True)
finish()
