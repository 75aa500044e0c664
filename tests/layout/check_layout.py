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
  file size       a product file (layout_sizes.py: under cli/, agent/, common/, trainer/, worker/, proto/; C, C++,
                  CUDA, Python, .proto) is longer than MAX_FILE_LINES lines.
  function size   a function, method or lambda of a product file is longer than MAX_FUNCTION_LINES lines (stricter
                  under the STRICT_FOLDERS: cli/run/), as Universal Ctags measures it.
  include cycles  the folders of the product's C/C++ files, joined by their "x/y.h" includes, form a cycle
                  (layout_cycles.py); each cycle is printed with one include line per edge.
  README table    a product folder is neither a row of README.md's Layout table nor named in the row of the folder
                  above it (layout_readme.py).

Usage: check_layout.py --source-dir DIR (--compiler CXX [--include-dir DIR]... | --skip-domain-headers) [--ctags PATH]
Exit 0 when every rule holds, 1 when one does not, 2 when it cannot check (no compiler, a header it cannot find, no
Universal Ctags).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True      # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layout_cycles  # noqa: E402
import layout_readme  # noqa: E402
import layout_sizes  # noqa: E402

# The domain headers of the launcher and the agent: plain C++ over domain types. Conversion to and from messages
# happens in the wire and service files; credentials and channels stay at the transport edge.
DOMAIN_HEADERS = [
    "cli/controller/controller.h",
    "cli/controller/fleet/fleet.h",
    "cli/controller/round/round.h",
    "cli/controller/observe/job_monitor.h",
    "cli/controller/diagnose/diagnosis.h",
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


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True, help="the repository root")
    parser.add_argument("--compiler", help="the C++ compiler the build uses (the domain-header rule)")
    parser.add_argument("--include-dir", action="append", default=[],
                        help="another include directory of the build (the generated proto headers' directory)")
    parser.add_argument("--skip-domain-headers", action="store_true",
                        help="check no domain header (no compiler needed): the other rules only")
    parser.add_argument("--ctags", help="the Universal Ctags executable (default: found on PATH)")
    args = parser.parse_args()
    if not args.compiler and not args.skip_domain_headers:
        parser.error("--compiler is required unless --skip-domain-headers")
    args.source_dir = os.path.abspath(args.source_dir)
    args.include_dir = [os.path.abspath(d) for d in args.include_dir]
    return args


def main():
    args = parse_args()
    ctags = layout_sizes.find_ctags(args.ctags)
    headers = [] if args.skip_domain_headers else DOMAIN_HEADERS
    problems = []
    check_domain_headers(args, headers, problems)
    files = check_includes(args, problems)
    folders = check_folder_sizes(args, problems)
    product = layout_sizes.product_files(args.source_dir)
    layout_sizes.check_file_sizes(args.source_dir, product, problems)
    functions = layout_sizes.check_function_sizes(ctags, args.source_dir, product, problems)
    cxx = [path for path in product if path.endswith(layout_sizes.CXX_SUFFIXES)]
    graph = layout_cycles.check_include_cycles(args.source_dir, cxx, problems)
    tabled = layout_readme.check_readme_table(args.source_dir, problems)
    if problems:
        print(f"layout.rules: {len(problems)} problem(s):")
        for problem in problems:
            print(f"  {problem}")
        return 1
    strict = ", ".join(f"{limit} under {prefix}" for prefix, limit in layout_sizes.STRICT_FOLDERS.items())
    print(f"layout.rules: {len(headers)} domain headers reach no gRPC/protobuf header; {files} files keep the include "
          f"rules; {folders} folders hold at most {MAX_FOLDER_FILES} source files each; {len(product)} product files "
          f"hold at most {layout_sizes.MAX_FILE_LINES} lines each and their {functions} functions at most "
          f"{layout_sizes.MAX_FUNCTION_LINES} ({strict}); the includes between {graph} folders form no cycle; README's "
          f"Layout table names all {tabled} product folders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
