"""Silence judged fairly: a node is lost for silence only when the launcher could read for health.node_timeout_s
and heard nothing, and an agent's lease counts only time in which the agent could read. Real launchers and local
agents (2 nodes x 1 worker, health.node_timeout_s 3), real SIGSTOP and SIGCONT:
  launcher  the launcher is stopped 5 times for 2.7 s (0.9 x node_timeout_s), 0.5 s apart, while the job runs: no
            node is lost, every worker runs through it, and the job exits 0. Before the launcher measured its own
            stalls, it found its nodes silent the moment it resumed and failed the job.
  agent     an agent stopped for good is declared lost within node_timeout_s + 1 s of its SIGSTOP (the fair judgement
            still gives up a node that really is silent), and the job fails naming the lost node.
  lease     an agent stopped for 1.8 s (under its lease) keeps its workers, twice, from 9 s after the workers
            started (past the agent's default lease of 10 s: Configure's lease used to hold only after it). Just
            before each stop the launcher is held for 1.6 s, so that the agent's last message from the launcher is
            already 1.6 s old when the agent stops: an agent that counted its own stop as the launcher's silence
            would wake past its lease (3.4 s > 3 s) every time and stop its workers; the launcher hears the agent
            again within 2.4 s and loses no node.
The three cases run side by side, each with its own launcher and agents (a SIGSTOP reaches only its own case's
processes).
"""

import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid

from harness import DTRAIN, argv_of, check, describe, finish, kill_tagged, tagged_pids, wait_for, wait_no_leaks, write

NODE_TIMEOUT = 3
SPEC = """
name: silence-{name}
nodes: {{provider: local, count: 2}}
workers_per_node: 1
command: [/bin/sh, -c, "echo started; while [ ! -e {done} ]; do sleep 0.05; done"]
stop: {{grace_s: 1}}
health: {{node_timeout_s: {timeout}}}
logs: {{console: all}}
"""


class Launch:
    """`dtrain launch` of SPEC, its stderr read as it comes (each line with the monotonic time it arrived)."""

    def __init__(self, name):
        self.tag = uuid.uuid4().hex
        self.dir = tempfile.mkdtemp(prefix="dtrain-it-silence-")
        self.done = os.path.join(self.dir, "done")
        spec = write(os.path.join(self.dir, "job.yaml"),
                     SPEC.format(name=name, done=self.done, timeout=NODE_TIMEOUT))
        env = dict(os.environ, DTRAIN_TEST_TAG=self.tag)
        self.proc = subprocess.Popen([DTRAIN, "launch", spec], cwd=self.dir, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def stderr(self):
        return "\n".join(line for _, line in self.lines)

    def first(self, text):
        """The time the first stderr line containing `text` arrived, or None."""
        return next((t for t, line in self.lines if text in line), None)

    def processes(self):
        """(agent pids, worker pids) of this launch, each sorted."""
        agents, workers = [], []
        for pid in tagged_pids(self.tag):
            argv = argv_of(pid)
            if argv[1:2] == [b"agent"]:
                agents.append(pid)
            elif argv[:1] == [b"/bin/sh"] and any(self.done.encode() in a for a in argv):
                workers.append(pid)
        return sorted(agents), sorted(workers)

    def wait_started(self):
        """(agent pids, worker pids) once the launcher said the workers started, or (None, None)."""
        if not wait_for("the launcher's 'workers started'", lambda: self.first("workers started"), 30, interval=0.05):
            return None, None
        ready = wait_for("2 agents and 2 workers", lambda: [p for p in [self.processes()] if len(p[0]) == 2 and
                                                            len(p[1]) == 2], 10, interval=0.05)
        return ready[0] if ready else (None, None)

    def end(self, timeout=30):
        """Lets the workers finish, waits for the launcher; its exit code (None after a timeout, then killed)."""
        write(self.done, "")
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = None
        self.reader.join(timeout=5)
        took, left = wait_no_leaks(self.tag, 5.0)
        check(took is not None, "processes left running after the launcher exited: " + describe(left))
        if left:
            kill_tagged(self.tag)
        return code


def pause(pid, seconds):
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def case_launcher_paused():
    job = Launch("launcher")
    agents, workers = job.wait_started()
    if agents is None:
        return check(job.end() is not None, "launcher case: the launcher exits")
    for _ in range(5):
        pause(job.proc.pid, 0.9 * NODE_TIMEOUT)
        time.sleep(0.5)
    survived = job.processes()[1] == workers
    code = job.end()
    print("launcher stopped 5 x %.1f s: exit %s, lost lines: %s" %
          (0.9 * NODE_TIMEOUT, code, [line for _, line in job.lines if "lost" in line]), flush=True)
    check("lost" not in job.stderr(), "launcher stopped 5 x 0.9 x node_timeout_s: no node lost:\n" + job.stderr())
    check(survived, "launcher stopped 5 times: the same 2 workers ran through it")
    check(code == 0, "launcher stopped 5 times: the job exits 0, got %s" % code)


def case_agent_silent():
    job = Launch("agent")
    agents, _ = job.wait_started()
    if agents is None:
        return check(job.end() is not None, "agent case: the launcher exits")
    stopped = time.monotonic()
    os.kill(agents[1], signal.SIGSTOP)
    try:
        seen = wait_for("a node lost", lambda: job.first("lost:"), NODE_TIMEOUT + 5, interval=0.02)
    finally:
        os.kill(agents[1], signal.SIGCONT)
    took = seen - stopped if seen else None
    print("a SIGSTOPped agent was declared lost %s s after its stop" % ("%.2f" % took if took else "never"),
          flush=True)
    check(took is not None and took <= NODE_TIMEOUT + 1,
          "a SIGSTOPped agent is lost within node_timeout_s + 1 s of its stop (took %s)" % took)
    check("no message from its agent for 3000 ms" in job.stderr(), "the loss says why:\n" + job.stderr())
    code = job.end()
    check(code == 1, "a lost node fails the job: exit 1, got %s" % code)


def case_agent_paused_under_lease():
    job = Launch("paused-agent")
    agents, workers = job.wait_started()
    if agents is None:
        return check(job.end() is not None, "lease case: the launcher exits")
    # Past the agent's default lease (10 s): Configure's lease has been in force for a while, even where it once took
    # effect only after the default one's first wait.
    time.sleep(9.0)
    for turn in range(2):
        os.kill(job.proc.pid, signal.SIGSTOP)
        time.sleep(1.6)
        os.kill(agents[1], signal.SIGSTOP)
        os.kill(job.proc.pid, signal.SIGCONT)
        time.sleep(1.8)
        os.kill(agents[1], signal.SIGCONT)
        time.sleep(1.0)
        if not check(job.processes() == (agents, workers), "turn %d: the paused agent and every worker are still "
                     "there: %s" % (turn, describe(tagged_pids(job.tag)))):
            break
    code = job.end()
    print("agent stopped 2 x 1.8 s after 1.6 s without the launcher: exit %s" % code, flush=True)
    check("lost" not in job.stderr(),
          "an agent stopped under its lease keeps its session and its workers:\n" + job.stderr())
    check(code == 0, "an agent stopped under its lease: the job exits 0, got %s" % code)


def side_by_side(*cases):
    """Runs each case in a thread of its own and waits for all: each has its own launcher, agents and tag, and they
    mostly sleep through their stops, so together they take as long as the longest (about 18 s, not 38 s one after
    the other). A case that raises is a failed check."""
    def guarded(case):
        try:
            case()
        except Exception as error:  # noqa: BLE001 - reported as a failed check, the other cases go on
            check(False, "%s raised %r" % (case.__name__, error))
    threads = [threading.Thread(target=guarded, args=(case,)) for case in cases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


side_by_side(case_launcher_paused, case_agent_silent, case_agent_paused_under_lease)
finish()
