"""The size rules of check_layout.py: product files (PRODUCT_ROOTS, PRODUCT_SUFFIXES) of at most MAX_FILE_LINES lines,
and functions in them of at most MAX_FUNCTION_LINES lines (STRICT_FUNCTION_LINES under the STRICT_FOLDERS), measured
by Universal Ctags from a function's first line (its name) to its last (the closing brace, the end of the body).

A lambda counts as part of the function around it, and is also measured on its own: one longer than the limit is
named "a lambda in FILE:LINE" (ctags gives it no name of its own).
"""

import os
import shutil
import subprocess
import sys

PRODUCT_ROOTS = ("cli", "agent", "common", "trainer", "worker", "proto")
PRODUCT_SUFFIXES = (".cpp", ".h", ".cc", ".hpp", ".c", ".cu", ".cuh", ".py", ".proto")
SKIPPED_DIRS = ("tests", "scripts", "build", "__pycache__")
CXX_SUFFIXES = (".cpp", ".h", ".cc", ".hpp", ".c", ".cu", ".cuh")

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
STRICT_FOLDERS = {"cli/run/": 60}    # folder prefix -> a stricter function limit there

CTAGS_NAMES = ("ctags-universal", "universal-ctags", "ctags")
CTAGS_FIELDS = "%{line}\t%{end}\t%{name}\t%{scope}\t%{input}"
CTAGS_OPTIONS = ["-x", f"--_xformat={CTAGS_FIELDS}", "--fields=+ne", "--languages=C++,C,Python",
                 "--langmap=C++:+.cu.cuh", "--kinds-C++=f", "--kinds-C=f", "--kinds-Python=fm", "-L", "-"]
LAMBDA_PREFIX = "__anon"     # ctags' name for a lambda (and for an anonymous namespace, in a scope)


def product_files(source_dir):
    """Every product file, relative to `source_dir`, sorted."""
    found = []
    for root in PRODUCT_ROOTS:
        for directory, subdirs, files in os.walk(os.path.join(source_dir, root)):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in SKIPPED_DIRS)
            found += [os.path.relpath(os.path.join(directory, name), source_dir)
                      for name in sorted(files) if name.endswith(PRODUCT_SUFFIXES)]
    return found


def check_file_sizes(source_dir, files, problems):
    for path in files:
        with open(os.path.join(source_dir, path), "rb") as f:
            count = sum(1 for _ in f)
        if count > MAX_FILE_LINES:
            problems.append(f"{path}: {count} lines (at most {MAX_FILE_LINES}): split it by concept into files "
                            f"of at most {MAX_FILE_LINES} lines each")


def find_ctags(given):
    """The Universal Ctags executable (`given`, else the first of CTAGS_NAMES on PATH); exits 2 when there is none."""
    candidates = [given] if given else [shutil.which(name) for name in CTAGS_NAMES]
    for path in filter(None, candidates):
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        except OSError:
            continue
        if version.startswith("Universal Ctags"):
            return path
    looked = given or f"{', '.join(CTAGS_NAMES)} on PATH"
    print(f"layout.rules: no Universal Ctags found (looked for {looked}); the function-size rule measures functions "
          f"with it: install the universal-ctags package (scripts/setup.sh --tests installs it), or name it with "
          f"--ctags", file=sys.stderr)
    sys.exit(2)


def read_tags(ctags, source_dir, files):
    """(path, first line, last line, name, scope) of every function, method and lambda in `files`."""
    measured = [path for path in files if path.endswith(CXX_SUFFIXES + (".py",))]
    try:
        result = subprocess.run([ctags] + CTAGS_OPTIONS, input="\n".join(measured) + "\n", cwd=source_dir,
                                capture_output=True, text=True, timeout=120)
    except OSError as e:
        print(f"layout.rules: cannot run {ctags}: {e}", file=sys.stderr)
        sys.exit(2)
    if result.returncode != 0:
        print(f"layout.rules: {ctags} failed ({result.returncode}):\n{result.stderr.strip()}", file=sys.stderr)
        sys.exit(2)
    tags = []
    for line in result.stdout.splitlines():
        fields = line.split("\t", 4)
        if len(fields) == 5 and fields[0].isdigit() and fields[1].isdigit():   # no end: a Python `x = lambda`
            tags.append((fields[4], int(fields[0]), int(fields[1]), fields[2], fields[3]))
    return sorted(tags)


def limit_for(path):
    """The function limit for `path`, and the words that say where it holds."""
    for prefix, limit in STRICT_FOLDERS.items():
        if path.startswith(prefix):
            return limit, f"at most {limit} under {prefix}"
    return MAX_FUNCTION_LINES, f"at most {MAX_FUNCTION_LINES}"


def enclosing(tag, tags):
    """The innermost named function of the same file whose lines hold the lambda `tag`, or None."""
    path, first, last = tag[:3]
    around = [t for t in tags if t[0] == path and t[1] <= first and last <= t[2] and t is not tag
              and not t[3].startswith(LAMBDA_PREFIX)]
    return min(around, key=lambda t: t[2] - t[1], default=None)


def check_function_sizes(ctags, source_dir, files, problems):
    """Appends a problem per function over its limit; returns the number of functions measured."""
    tags = read_tags(ctags, source_dir, files)
    for tag in tags:
        path, first, last, name, _ = tag
        length = last - first + 1
        limit, words = limit_for(path)
        if length <= limit:
            continue
        span = f"lines {first}-{last}; {words}"
        if name.startswith(LAMBDA_PREFIX):
            outer = enclosing(tag, tags)
            inside = f" (inside function {outer[3]})" if outer else ""
            problems.append(f"a lambda in {path}:{first}{inside} is {length} lines ({span}): make it a named "
                            f"function, split into steps")
        else:
            problems.append(f"{path}:{first}: function {name} is {length} lines ({span}): split it into smaller "
                            f"functions, one step each")
    return len(tags)
