#!/usr/bin/env python3
"""The layout's rules (README.md, Layout), checked against the tree as it is. Fails, naming each offending file, when:

  domain headers  a header of DOMAIN_HEADERS reaches a gRPC or protobuf header (grpcpp/, grpc/, google/protobuf/,
                  *.pb.h) through any chain of includes. The compiler itself follows the includes (-M on a one-line
                  file that includes the header), so a chain through any number of headers counts; the chain to the
                  first such header is printed.
  includes        trainer/ or worker/ includes "agent/...", agent/ or worker/ includes "trainer/...", or worker/,
                  agent/ or trainer/ includes "cli/..." (cli -> (agent, trainer, worker) -> common).
  folder size     a folder under cli/, agent/, common/, trainer/ or worker/ holds more than MAX_FOLDER_FILES source
                  files (.cpp .h .cu .py) directly: a folder that big holds more than one concept.

Usage: check_layout.py --source-dir DIR --compiler CXX [--include-dir DIR]...
Exit 0 when every rule holds, 1 when one does not, 2 when it cannot check (no compiler, a header it cannot find).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

# The domain headers of the launcher and the agent: plain C++ over domain types. Conversion to and from messages
# happens in the wire and service files; credentials and channels stay at the transport edge.
DOMAIN_HEADERS = [
    "cli/controller/controller.h",
    "cli/controller/fleet/fleet.h",
    "cli/controller/round/round.h",
    "cli/controller/monitor/job_monitor.h",
    "cli/controller/watch/diagnosis.h",
    "agent/job/job_runner.h",
    "agent/agent.h",
]

# (folders whose files are checked, the include prefix they must not use, why)
INCLUDE_RULES = [
    (("trainer", "worker"), "agent/", "a worker reaches its agent through worker/, not agent/'s code"),
    (("agent", "worker"), "trainer/", "the agent and worker/ run any program, not only dtrain-trainer"),
    (("worker", "agent", "trainer"), "cli/", "cli/ is the top: nothing below it includes it"),
]
SOURCE_SUFFIXES = (".cpp", ".h", ".cc", ".hpp", ".cu", ".cuh")

SIZE_ROOTS = ("cli", "agent", "common", "trainer", "worker")
COUNTED_SUFFIXES = (".cpp", ".h", ".cu", ".py")
MAX_FOLDER_FILES = 20

INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
WIRE_HEADER_DIR = re.compile(r"(^|/)(grpcpp|grpc|google/protobuf)/")


def is_wire_header(path, source_dir):
    """A gRPC or protobuf header: generated *.pb.h anywhere, or a header under grpcpp/, grpc/ or google/protobuf/
    outside this tree (a project file such as common/grpc/grpc_options.h is judged by what it includes)."""
    if path.endswith(".pb.h"):
        return True
    inside = os.path.isabs(path) and path.startswith(source_dir + os.sep)   # relative: missing, named as included
    return not inside and WIRE_HEADER_DIR.search(path) is not None


def dependencies_of(deps_text):
    """The dependency list of `-M` output, one path per entry (backslash-newline continuations joined)."""
    text = deps_text.replace("\\\n", " ")
    _, _, deps = text.partition(":")
    return deps.split()


def chain_to(tree_text, wanted):
    """The include chain to `wanted` from `-H` output (". a.h", ".. b.h", ...): each header's includer is the last
    header printed one level up before it. None when `wanted` was never opened (a generated header not made yet)."""
    stack = []
    for line in tree_text.splitlines():
        match = re.match(r"^(\.+) (.+)$", line)
        if not match:
            continue
        depth = len(match.group(1))
        del stack[depth - 1:]
        stack.append(match.group(2))
        if match.group(2) == wanted:
            return list(stack)
    return None


def shown(path, roots):
    """`path` relative to the include directory that holds it, as an #include names it."""
    best = path
    for root in roots:
        if path.startswith(root + os.sep) and len(path) - len(root) - 1 < len(best):
            best = path[len(root) + 1:]
    return best


def check_domain_headers(args, headers, problems):
    roots = [args.source_dir] + args.include_dir + ["/usr/include", "/usr/local/include"]
    with tempfile.TemporaryDirectory(prefix="dtrain-layout-") as scratch:
        for header in headers:
            if not os.path.isfile(os.path.join(args.source_dir, header)):
                print(f"layout.rules: domain header {header} is not in {args.source_dir}; if it moved, update "
                      f"DOMAIN_HEADERS in {os.path.relpath(__file__, args.source_dir)}", file=sys.stderr)
                sys.exit(2)
            unit = os.path.join(scratch, "unit.cpp")
            with open(unit, "w") as f:
                f.write(f'#include "{header}"\n')
            command = [args.compiler, "-std=c++20", "-M", "-MG", "-H"]
            command += [f"-I{d}" for d in [args.source_dir] + args.include_dir]
            command.append(unit)
            try:
                result = subprocess.run(command, capture_output=True, text=True, timeout=120)
            except OSError as e:
                print(f"layout.rules: cannot run the compiler {args.compiler}: {e}", file=sys.stderr)
                sys.exit(2)
            if result.returncode != 0:
                problems.append(f"{header}: the compiler could not follow its includes:\n{result.stderr.strip()}")
                continue
            bad = [d for d in dependencies_of(result.stdout) if is_wire_header(d, args.source_dir)]
            if not bad:
                continue
            chain = chain_to(result.stderr, bad[0])
            first = (" -> ".join(shown(p, roots) for p in chain) if chain
                     else f"{bad[0]} (not generated yet: its includer is unknown)")
            problems.append(f"{header} reaches {len(bad)} gRPC/protobuf header(s), the first by {first}; keep them "
                            f"behind the transport edge (wire/service files; a forward-declared or abstract type in "
                            f"the header)")


def check_includes(args, problems):
    checked = set()
    for folders, prefix, why in INCLUDE_RULES:
        for folder in folders:
            top = os.path.join(args.source_dir, folder)
            for directory, subdirs, files in os.walk(top):
                subdirs[:] = sorted(d for d in subdirs if not d.startswith((".", "__")))
                for name in sorted(files):
                    if not name.endswith(SOURCE_SUFFIXES):
                        continue
                    path = os.path.join(directory, name)
                    checked.add(path)
                    with open(path, errors="replace") as f:
                        for number, line in enumerate(f, 1):
                            match = INCLUDE_LINE.match(line)
                            if match and match.group(1).startswith(prefix):
                                problems.append(f"{os.path.relpath(path, args.source_dir)}:{number}: includes "
                                                f'"{match.group(1)}": {folder}/ may not include {prefix} ({why})')
    return len(checked)


def check_folder_sizes(args, problems):
    folders = 0
    for root in SIZE_ROOTS:
        for directory, subdirs, files in os.walk(os.path.join(args.source_dir, root)):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith((".", "__")))
            folders += 1
            count = sum(1 for name in files if name.endswith(COUNTED_SUFFIXES))
            if count > MAX_FOLDER_FILES:
                problems.append(f"{os.path.relpath(directory, args.source_dir)}/ holds {count} source files "
                                f"directly (at most {MAX_FOLDER_FILES}): split it into sub-folders, one concept each")
    return folders


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True, help="the repository root")
    parser.add_argument("--compiler", required=True, help="the C++ compiler the build uses")
    parser.add_argument("--include-dir", action="append", default=[],
                        help="another include directory of the build (the generated proto headers' directory)")
    args = parser.parse_args()
    args.source_dir = os.path.abspath(args.source_dir)
    args.include_dir = [os.path.abspath(d) for d in args.include_dir]

    problems = []
    check_domain_headers(args, DOMAIN_HEADERS, problems)
    files = check_includes(args, problems)
    folders = check_folder_sizes(args, problems)
    if problems:
        print(f"layout.rules: {len(problems)} problem(s):")
        for problem in problems:
            print(f"  {problem}")
        return 1
    print(f"layout.rules: {len(DOMAIN_HEADERS)} domain headers reach no gRPC/protobuf header; {files} files keep "
          f"the include rules; {folders} folders hold at most {MAX_FOLDER_FILES} source files each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
