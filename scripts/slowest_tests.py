#!/usr/bin/env python3
"""Prints the N slowest tests of a ctest run from its JUnit file (ctest --output-junit FILE), slowest first:

    scripts/slowest_tests.py build/Testing/ctest-junit.xml [N]      (N defaults to 10)

A test ctest did not run (skipped, or left out by -R) is marked; the total is the sum of the tests' own times, which
under ctest -j is more than the run's wall time."""

import sys
import xml.etree.ElementTree as ET


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: slowest_tests.py JUNIT_FILE [N]")
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 10
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit("slowest_tests: cannot read %s (%s); ctest writes it with --output-junit" % (path, e))
    cases = [(float(c.get("time") or 0), c.get("name"), c.get("status") or "") for c in root.iter("testcase")]
    cases.sort(reverse=True)
    print("%d slowest of %d tests (sum of their times %.0f s):" % (min(n, len(cases)), len(cases),
                                                                   sum(t for t, _, _ in cases)))
    for t, name, status in cases[:n]:
        note = "" if status == "run" else "  (" + status + ")"
        print("  %8.2f s  %s%s" % (t, name, note))


if __name__ == "__main__":
    main()
