"""The quickstart as a newcomer runs it: configs/quickstart.yaml and configs/ddp_toy.py, copied unchanged, launched
from the directory above configs/. ddp_toy.py is an ordinary PyTorch DDP script (gloo, 2 nodes x 2 ranks, 50 steps)
that imports nothing of dtrain; with health.instrument auto (the default) `dtrain status --json` after the job shows
each of the 4 ranks at step 50 with a step time, a loss and samples/s, and the job's report page leaves no section
empty for want of data ("No rank reported this"). The Diagnoses section may say that no rank stood out and there was no
bottleneck: that is a finding about the machine the job ran on, which differs between machines, not missing data."""

import glob
import os
import re
import shutil

from harness import SOURCE_DIR, Run, check, finish, status_json

run = Run([], timeout=240)
os.makedirs(os.path.join(run.dir, "configs"))
for name in ("quickstart.yaml", "ddp_toy.py"):
    shutil.copy(os.path.join(SOURCE_DIR, "configs", name), os.path.join(run.dir, "configs", name))
run.args += ["launch", "configs/quickstart.yaml"]
run.run()
run.show()
check(run.code == 0, "the quickstart succeeds, got %s" % run.code)

ranks = {r["rank"]: r for r in status_json(run).get("ranks", [])}
check(sorted(ranks) == [0, 1, 2, 3], "status shows the 4 ranks: %s" % sorted(ranks))
for rank, row in sorted(ranks.items()):
    check(row["step"] == 50 and row["step_ms"] > 0 and row["loss"] is not None and row["loss"] > 0 and
          row.get("samples_per_s", 0) > 0,
          "rank %d is at step 50 with a step time, a loss and samples/s: %s" % (rank, row))

pages = glob.glob(os.path.join(run.dir, "runs", "*", "report.html"))
check(len(pages) == 1, "one report page: %s" % pages)
if pages:
    with open(pages[0]) as f:
        page = f.read()
    sections = re.findall(r'<section id="([^"]+)"><h2>[^<]*</h2>(.*?)</section>', page, re.S)
    check(len(sections) == 6, "the report page has its 6 sections: %s" % [name for name, _ in sections])
    empty = [name for name, body in sections
             if body.startswith('<p class="empty">') and
             not (name == "diagnoses" and "no rank stood out, and no bottleneck" in body)]
    check(not empty and "No rank reported this" not in page, "no section of the report page lacks data: %s" % empty)
run.assert_no_leaks()
finish()
