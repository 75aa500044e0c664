"""The job report page (cli/report/) in a real browser and from real jobs.
  fixtures   the run directories under tests/fixtures/runs (recorded from real jobs by record.py there): a PyTorch
             DDP job whose rank 2 is starved of data, and a dtrain-trainer job that hung and was restarted. For each,
             `dtrain report DIR` writes report.html, and headless Chromium, in a network namespace of its own (or,
             without root, with every host name unresolvable), loads it from a file:// URL: no console message at all
             (the page has no script, so any is a refused load or a broken page), a screenshot that is not blank, and
             a DOM with one heat-map row per rank, the straggler's row outlined, the diagnosis and its fix, and the
             rounds of the timeline;
  real jobs  a job that succeeds and one whose worker exits 3 each get report.html in their run directory when they
             end, the failure's exit code is kept, and its page names the root cause; the successful one, 30
             dtrain-trainer steps in a second or two (a few samples windows, its reports coalesced by the agents),
             draws its loss and tokens/s curves a point per step from the reports' per-step points (at least 10
             points each), in Chromium's DOM too; `dtrain report` with no argument
             writes the newest job's page; a directory without a job is refused with what to pass instead."""

import glob
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib

from harness import BUILD_DIR, DTRAIN, SOURCE_DIR, Run, check, finish, write

FIXTURES = os.path.join(SOURCE_DIR, "tests", "fixtures", "runs")
TRAINER = os.path.join(BUILD_DIR, "bin", "dtrain-trainer")
CHROMIUM = shutil.which("chromium")
# Chromium's first start in a fresh profile takes several seconds on a loaded machine; a minute is a page that hangs.
BROWSER_TIMEOUT_S = 90


def chromium(page, *args):
    """Runs headless Chromium on file://page without network; returns (stdout, stderr)."""
    profile = tempfile.mkdtemp(prefix="dtrain-chromium-")
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + profile,
               "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0"] + list(args) + [
                   "file://" + page]
    if os.geteuid() == 0 and shutil.which("unshare"):
        command = ["unshare", "--net"] + command
    done = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    shutil.rmtree(profile, ignore_errors=True)
    return done.stdout, done.stderr


def png_colours(path):
    """(distinct colours, share of pixels that are not white) of an 8-bit RGB or RGBA PNG, decoded with zlib."""
    with open(path, "rb") as f:
        data = f.read()
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            channels = {2: 3, 6: 4}[colour]
            assert depth == 8
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, prev, colours, ink = zlib.decompress(idat), width * channels, bytearray(width * channels), set(), 0
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, channels):
            pixel = bytes(line[x:x + 3])
            colours.add(pixel)
            ink += pixel != b"\xff\xff\xff"
        prev = line
    return len(colours), ink / float(width * height)


def browse(page, name):
    """The browser checks every page must pass; returns its DOM."""
    dom, log = chromium(page, "--dump-dom")
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    check(not console, "%s: no console message in Chromium (%s)" % (name, console[:3]))
    check(dom.strip().endswith("</html>") and "<svg" in dom, "%s: Chromium rendered the page's DOM" % name)
    shot = os.path.join(os.path.dirname(page), "shot.png")
    chromium(page, "--screenshot=" + shot, "--window-size=1100,2400", "--hide-scrollbars")
    if check(os.path.exists(shot), "%s: Chromium took a screenshot" % name):
        colours, ink = png_colours(shot)
        check(colours >= 30 and ink > 0.05, "%s: the screenshot is not blank (%d colours, %.0f%% not white)" %
              (name, colours, ink * 100))
    return dom


def report(directory, cwd=None):
    return subprocess.run([DTRAIN, "report"] + ([directory] if directory else []), cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def fixture(name):
    """A copy of the fixture (the page is written into the run directory), its page written by `dtrain report`."""
    directory = os.path.join(tempfile.mkdtemp(prefix="dtrain-report-"), name)
    shutil.copytree(os.path.join(FIXTURES, name), directory)
    done = report(directory)
    check(done.returncode == 0 and done.stdout.strip() == os.path.join(directory, "report.html"),
          "%s: dtrain report DIR writes DIR/report.html and prints its path (%r %r)" % (name, done.stdout,
                                                                                      done.stderr))
    return os.path.join(directory, "report.html")


def ranks_of(page):
    with open(os.path.join(os.path.dirname(page), "events.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    return {e["rank"] for e in events if e.get("event") == "worker_started"}


def heat_rows(dom):
    return re.findall(r'<g class="hm-row" data-rank="(\d+)" data-straggler="([01])"', dom)


def curve_points(dom, chart):
    """The points of the first line of the chart `chart` ("loss", "tokens_per_s"); 0 without one."""
    found = re.search(r'data-chart="%s".*?<polyline[^>]*points="([^"]*)"' % chart, dom, re.S)
    return len(found.group(1).split()) if found else 0


# ---- fixtures in the browser
if CHROMIUM:
    page = fixture("ddp-data-starved")
    dom = browse(page, "ddp")
    rows = heat_rows(dom)
    check(len(rows) == len(ranks_of(page)) == 4, "ddp: one heat-map row per rank (%d rows)" % len(rows))
    check([r for r, s in rows if s == "1"] == ["2"], "ddp: rank 2's row, and only it, is the straggler's (%s)" % rows)
    check(re.search(r'data-rank="2" data-straggler="1"><title>rank 2</title>.*?<rect class="straggler"', dom),
          "ddp: the straggler's heat-map row is outlined")
    check(re.search(r"rank 2 on node 1 \(.*?\) was \d+% slower than the median", dom) and "fix: " in dom,
          "ddp: the straggler diagnosis is on the page with its fix")
    check('data-chart="loss"' in dom and 'data-chart="step-breakdown"' in dom and 'data-chart="memory-host"' in dom,
          "ddp: loss, step breakdown and memory charts are drawn")

    page = fixture("trainer-restart")
    dom = browse(page, "trainer")
    rows = heat_rows(dom)
    check(len(rows) == len(ranks_of(page)) == 2, "trainer: one heat-map row per rank (%d rows)" % len(rows))
    rounds = re.findall(r'<g class="round" data-round="(\d+)" data-outcome="(\w+)"', dom)
    check(rounds == [("0", "worker_failed"), ("1", "succeeded")], "trainer: the timeline shows the failed round and "
          "its restart (%s)" % rounds)
    check(re.search(r"<td>restarts</td><td>1</td>", dom), "trainer: the header counts 1 restart")
    check(re.search(r"made no step progress", dom), "trainer: the hang is on the page")
    check("attempt_0/stacks/rank_1.txt" in dom, "trainer: the hang evidence (the stalled rank's stacks) is listed")
    check(len(re.findall(r'<polyline class="line" data-round="(\d)"', dom)) >= 2,
          "trainer: loss and tokens/s have a line per round")
else:
    print("SKIPPED (browser part): chromium is not installed (scripts/setup.sh installs it)")

# ---- real jobs: the page at the end of a successful and of a failed job
SPEC = """
name: %s
nodes: {provider: local, count: 2}
workers_per_node: 1
shell: true
command: %s
stop: {grace_s: 1}
logs: {dir: runs, console: none}
"""
run = Run([], timeout=120)
text = write(os.path.join(run.dir, "data.txt"), " ".join(["the model trains on bytes"] * 2000))
shard = os.path.join(run.dir, "data.bin")
subprocess.run([TRAINER, "prepare-text", text, shard], check=True, capture_output=True, timeout=60)
trainer = "exec %s --model tiny --data %s --batch-size 2 --seq-len 32 --threads 1 --steps 30" % (TRAINER, shard)
for name, command, code in (("ok", '"%s"' % trainer, 0), ("fails", '"[ $RANK = 1 ] && exit 3; %s"' % trainer, 3)):
    run.args = [DTRAIN, "launch", write(os.path.join(run.dir, name + ".yaml"), SPEC % (name, command))]
    run.run()
    check(run.code == code, "%s: the job's exit code is its own (%d), got %s" % (name, code, run.code))
    pages = glob.glob(os.path.join(run.dir, "runs", name + "-*", "report.html"))
    check(len(pages) == 1 and ("report: " + pages[0]) in run.err,
          "%s: the launcher wrote report.html at the end and said where (%s)" % (name, pages))
    if pages:
        with open(pages[0]) as f:
            html = f.read()
        check('class="outcome-%s"' % ("succeeded" if code == 0 else "failed") in html, "%s: the outcome" % name)
        if code:
            check(re.search(r'class="root-cause">rank 1 on node 1 \(.*\): exited with code 3', html), "fails: the root cause")
        else:
            check(len(heat_rows(html)) == 2, "ok: the heat map has both ranks from the job's samples events")
            for chart in ("loss", "tokens_per_s"):
                n = curve_points(html, chart)
                check(n >= 10, "ok: a 30-step job's %s curve has a point per step from the reports' points (%d)" %
                      (chart, n))
            if CHROMIUM:
                dom = browse(pages[0], "ok")
                counts = [curve_points(dom, chart) for chart in ("loss", "tokens_per_s")]
                check(min(counts) >= 10, "ok: Chromium draws both curves with 10 points or more (%s)" % counts)
    run.assert_no_leaks()

newest = report(None, cwd=run.dir)
check(newest.returncode == 0 and newest.stdout.startswith("runs/fails-"), "dtrain report with no argument writes the newest "
      "job's page (%r %r)" % (newest.stdout, newest.stderr))
missing = report(run.dir)
check(missing.returncode == 1 and "neither a job's directory" in missing.stderr,
      "a directory without events.jsonl is refused with what to pass (%r)" % missing.stderr)

finish()
