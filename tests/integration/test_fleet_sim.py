"""The launcher (provider join, TLS and the cluster token) with 64 simulated agents from dtrain-fleet-sim (one
process, each agent a real session; scripts/bench/fleet_scale.py runs the cases):

1. Every agent's 8 workers succeed: the job ends with success and every agent got its Shutdown.
2. One agent goes silent 2 s after its StartGroup (health.node_timeout_s 5): the launcher gives it up within
   node_timeout_s + 1 s of its last message, says why, and the job fails (restart.max_restarts 0).
3. One agent stops reading its stream while the launcher has a 256 KiB StartGroup for it (health.node_timeout_s 3):
   every other agent still hears the launcher about once per heartbeat interval (0.6 s) and keeps its lease, and
   the stalled agent is given up after the launcher's stall timeout (10 s) with a reason. A launcher whose writes
   block its event loop would leave every agent without a message for that long.
4. Every worker reports once a second (dtrain-fleet-sim --report-hz 1, coalesced per agent as an agent's Outbox
   does) for 20 s, rank 5 twice as slow with 60% data wait: the job succeeds with no node lost, the straggler
   diagnosis names rank 5 and its data wait within 15 s of every rank reporting, `dtrain status --json` and
   /metrics answer while it runs, and the report page is written.
5. A loaded join: 256 agents join while 4 CPU-bound processes compete for the machine's cores
   (health.node_timeout_s 3): no node is lost and the job succeeds (scripts/bench/fleet_scale.py --burners 4 runs
   it at 1,024).
Cases 1 to 4 start at the same time, each with its own launcher and simulator: 2, 3 and 4 spend their time waiting
out timeouts and report intervals (a few percent of a core each), 1 is over in about a second, and the test runs alone
(tests/integration/CMakeLists.txt). Case 5 starts once 2 and 3 have ended (their bounds are milliseconds) and case 4's
straggler bound has passed (LOADED_AFTER_S), so that its CPU-bound processes overlap only case 4's last seconds,
whose checks (no node lost under a 30 s lease, every rank's reports, the answers to status and /metrics, the report
page) are not timing bounds.
"""

import concurrent.futures
import os
import sys
import time

from harness import BUILD_DIR, DTRAIN, SOURCE_DIR, check, finish

sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts", "bench"))
import fleet_scale  # noqa: E402

SIM = os.path.join(BUILD_DIR, "bin", "dtrain-fleet-sim")
AGENTS = 64
WORKERS = 8
# Each case ends within about 15 s on a loaded machine; this only bounds a hang.
CASE_TIMEOUT_S = 60

if not os.access(SIM, os.X_OK):
    print("SKIP: %s is not built (scripts/build.sh builds it)" % SIM)
    sys.exit(77)


def run(kind, **options):
    return fleet_scale.run_case(DTRAIN, SIM, kind, AGENTS, WORKERS, 1000, timeout_s=CASE_TIMEOUT_S, **options)


def case(kind, report):
    summary = {k: v for k, v in report.items() if k != "launcher_err"}
    print("%s: %s" % (kind, summary), flush=True)
    check(report.get("sim_code") == 0, "%s: every session ended before the simulator's timeout" % kind)
    check(report.get("healthy_lease_lost") == 0, "%s: no healthy agent's lease ran out" % kind)
    return report


LOADED_AGENTS = 256
# Seconds after case 4's start when case 5 may start: case 4's straggler must be named within 15 s of every rank
# reporting, about a second after its start (its first status and /metrics answers come at 15-16 s): past this, case
# 5's CPU-bound processes cannot change that check's outcome.
LOADED_AFTER_S = 17


def loaded_join():
    burners = fleet_scale.start_burners(4)
    try:
        return fleet_scale.run_case(DTRAIN, SIM, "scale", LOADED_AGENTS, WORKERS, 1000, node_timeout_s=3,
                                    timeout_s=CASE_TIMEOUT_S)
    finally:
        fleet_scale.stop_burners(burners)


with concurrent.futures.ThreadPoolExecutor(5) as pool:
    health_started = time.monotonic()
    health = pool.submit(run, "health", report_hz=1.0, health_run_s=20)
    scale = pool.submit(run, "scale")
    lost = pool.submit(run, "lost")
    stall = pool.submit(run, "stall")
    concurrent.futures.wait([lost, stall])
    time.sleep(max(0.0, health_started + LOADED_AFTER_S - time.monotonic()))
    loaded = pool.submit(loaded_join)

# 1. Success.
r = case("scale", scale.result())
check(r["code"] == 0, "scale: the job succeeds (exit %d): %s" % (r["code"], r["launcher_err"][-500:]))
check(r.get("goodbyes") == AGENTS, "scale: every agent got Shutdown (%s of %d)" % (r.get("goodbyes"), AGENTS))
check(r.get("all_exited_ms", -1) >= 0, "scale: every worker's exit reached the launcher")

# 2. A silent agent.
r = case("lost", lost.result())
check(r["code"] != 0, "lost: the job fails after losing a node (exit %d)" % r["code"])
detect = r.get("drop_detect_ms") or [-1]
check(0 <= detect[0] <= 6000, "lost: the silent agent is given up within node_timeout_s + 1 s (%.0f ms)" % detect[0])
check("no message from its agent for 5000 ms (health.node_timeout_s)" in r["launcher_err"],
      "lost: the launcher says why it gave the node up: " + r["launcher_err"][-500:])

# 3. A stalled agent.
r = case("stall", stall.result())
gap = r.get("healthy_max_launcher_gap_ms", -1)
check(0 < gap < 2000, "stall: healthy agents heard the launcher at least every 2 s (longest silence %s ms)" % gap)
check("did not read its stream for 10000 ms" in r["launcher_err"],
      "stall: the stalled agent is given up with a reason: " + r["launcher_err"][-500:])
stalled = r.get("stalled") or {}
check(stalled.get("configured") and stalled.get("closed_after_configure_ms", -1) >= 0,
      "stall: the stalled agent's session ended (%s)" % stalled)
check(r["code"] != 0, "stall: the job fails after losing the stalled node (exit %d)" % r["code"])

# 4. Health reports from every rank, one straggler.
report = health.result()
print("health: %s" % {k: v for k, v in report.items() if k != "launcher_err"}, flush=True)
check(report["code"] == 0 and report.get("nodes_lost") == 0,
      "health: the job succeeds with no node lost (exit %d, %s lost): %s" % (
          report["code"], report.get("nodes_lost"), report["launcher_err"][-500:]))
check(report.get("reports", 0) >= AGENTS * WORKERS * 15,
      "health: every rank reported about once a second (%s reports)" % report.get("reports"))
named = report.get("straggler_ts")
after = (named - report["t0_unix_ms"] - report.get("all_reporting_ms", 0)) / 1000.0 if named else None
check(after is not None and after <= 15, "health: the straggler is named within 15 s of every rank reporting (%s s)"
      % after)
check("rank 5 " in report.get("straggler_message", "") and "data wait" in report.get("straggler_message", ""),
      "health: the diagnosis names rank 5 and its data wait: %s" % report.get("straggler_message"))
check(report.get("status_s") and report.get("metrics_s") and not report.get("probe_errors"),
      "health: dtrain status --json and /metrics answered while it ran (%s, %s, errors %s)" % (
          report.get("status_s"), report.get("metrics_s"), report.get("probe_errors")))
check(report.get("report_page_code") == 0 and report.get("report_page_bytes", 0) > 0,
      "health: the report page is written (%s bytes)" % report.get("report_page_bytes"))

# 5. A loaded join.
r = loaded.result()
print("loaded join: %s" % {k: v for k, v in r.items() if k != "launcher_err"}, flush=True)
check(r["code"] == 0 and r.get("lost_lines") == 0,
      "loaded join: the job succeeds with no node lost (exit %d, %s lost): %s" % (
          r["code"], r.get("lost_lines"), r["launcher_err"][-500:]))
check(r.get("goodbyes") == LOADED_AGENTS, "loaded join: every agent got Shutdown (%s of %d)" % (
    r.get("goodbyes"), LOADED_AGENTS))

finish()
