#!/usr/bin/env python3
"""Self-test of check_layout.py: each rule, run on a small tree in a temporary directory, fails when the tree breaks
it (naming the file, the limit and the fix) and passes when the tree is exactly at its limit. The domain-header rule
needs the build's compiler and headers; these trees are checked with --skip-domain-headers.

Usage: check_layout_test.py [unittest options]
"""

import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True      # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import layout_cycles  # noqa: E402

CHECKER = os.path.join(HERE, "check_layout.py")


def cpp_function(name, lines, indent=""):
    """A C++ function `lines` long, from the line of its name to its closing brace."""
    body = [f"{indent}  x += {i};" for i in range(lines - 2)]
    return "\n".join([f"{indent}int {name}(int x) {{"] + body + [f"{indent}}}"]) + "\n"


def cpp_lambda(name, lines):
    """A lambda at namespace scope, `lines` long from its first line to its closing brace."""
    body = [f"  x += {i};" for i in range(lines - 2)]
    return "\n".join([f"auto {name} = [](int x) {{"] + body + ["};"]) + "\n"


def py_method(name, lines):
    """A class with one method `lines` long (its `def` line and its body)."""
    body = [f"        y = {i}" for i in range(lines - 1)]
    return "\n".join(["class Holder:", f"    def {name}(self):"] + body) + "\n"


def text_of(lines):
    return "".join(f"// line {i}\n" for i in range(lines))


class LayoutTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="dtrain-layout-test-")
        self.root = self.scratch.name
        self.addCleanup(self.scratch.cleanup)
        for root in ("cli", "agent", "common", "trainer", "worker", "proto"):
            os.makedirs(os.path.join(self.root, root))

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def table_every_folder(self):
        """A README.md whose Layout table has a row for every folder of the tree as it is now."""
        rows = []
        for root in ("cli", "agent", "common", "trainer", "worker", "proto"):
            for directory, subdirs, _ in os.walk(os.path.join(self.root, root)):
                subdirs[:] = [d for d in subdirs if not d.startswith((".", "__"))]
                rows.append(f"| `{os.path.relpath(directory, self.root)}/` | a concept | | |")
        self.write("README.md", "# x\n## Layout\n| folder | concept | types | deps |\n| --- | --- | --- | --- |\n" +
                   "\n".join(rows) + "\n## Next\n")

    def check(self, *extra, table=True):
        if table:
            self.table_every_folder()
        result = subprocess.run([sys.executable, CHECKER, "--source-dir", self.root, "--skip-domain-headers", *extra],
                                capture_output=True, text=True, timeout=60)
        return result.returncode, result.stdout + result.stderr

    def assert_passes(self):
        code, output = self.check()
        self.assertEqual(code, 0, output)
        self.assertIn("layout.rules: 0 domain headers", output)

    def assert_fails(self, *needles, table=True):
        code, output = self.check(table=table)
        self.assertEqual(code, 1, output)
        for needle in needles:
            self.assertIn(needle, output)
        return output

    # README's Layout table
    def test_folder_named_in_the_row_above_passes(self):
        self.write("agent/node/topology/t.h", "")
        self.write("proto/dtrain/v1/x.proto", "")
        rows = ["cli", "agent", "common", "trainer", "worker"]
        table = "\n".join(f"| `{r}/` | x | | |" for r in rows)
        self.write("README.md", "## Layout\n| f | c | t | d |\n| --- | --- | --- | --- |\n" + table +
                   "\n| `agent/node/` | the node, `topology/` | | |\n| `proto/` | the wire (`dtrain/v1/`) | | |\n## Next\n")
        code, output = self.check(table=False)
        self.assertEqual(code, 0, output)
        self.assertIn("README's Layout table names all", output)

    def test_folder_missing_from_the_table_fails(self):
        self.write("agent/node/topology/t.h", "")
        self.write("README.md", "## Layout\n| `agent/` | x | | |\n## Other\n| `agent/node/topology/` | x |\n")
        self.assert_fails("agent/node/ is not in README.md's Layout table", "agent/node/topology/ is not in",
                          "cli/ is not in", table=False)

    def test_no_readme_fails(self):
        self.assert_fails("README.md is missing", table=False)

    # file size
    def test_file_of_400_lines_passes(self):
        self.write("common/big.cpp", text_of(400))
        self.write("worker/big.py", "# x\n" * 400)
        self.assert_passes()

    def test_file_of_401_lines_fails(self):
        self.write("common/big.cpp", text_of(401))
        self.assert_fails("common/big.cpp: 401 lines (at most 400)", "split it")

    def test_every_product_suffix_is_measured(self):
        for suffix in (".cpp", ".h", ".cc", ".hpp", ".c", ".cu", ".cuh", ".py", ".proto"):
            self.write(f"proto/dtrain/big{suffix}", "\n" * 401)
        output = self.assert_fails()
        self.assertEqual(output.count(": 401 lines"), 9, output)

    def test_files_outside_the_product_are_not_measured(self):
        for path in ("tests/big.cpp", "scripts/big.py", "cli/tests/big.cpp", "worker/__pycache__/big.py",
                     "agent/.hidden/big.h", "trainer/build/big.cpp", "common/notes.txt"):
            self.write(path, text_of(401))
        self.assert_passes()

    # function size
    def test_cpp_function_of_80_lines_passes(self):
        self.write("agent/f.cpp", cpp_function("fits", 80))
        self.assert_passes()

    def test_cpp_function_of_81_lines_fails(self):
        self.write("agent/f.cpp", "// head\n" + cpp_function("too_long", 81))
        self.assert_fails("agent/f.cpp:2: function too_long is 81 lines (lines 2-82; at most 80)", "split it")

    def test_cuda_and_c_functions_are_measured(self):
        self.write("trainer/k.cu", cpp_function("kernel_host", 81))
        self.write("worker/hooks.c", cpp_function("hook", 81))
        self.assert_fails("trainer/k.cu:1: function kernel_host is 81 lines", "worker/hooks.c:1: function hook is 81")

    def test_cli_run_function_of_60_lines_passes(self):
        self.write("cli/run/options.cpp", cpp_function("resolve", 60))
        self.write("cli/other.cpp", cpp_function("longer_elsewhere", 61))
        self.assert_passes()

    def test_cli_run_function_of_61_lines_fails(self):
        self.write("cli/run/options.cpp", cpp_function("resolve", 61))
        self.assert_fails("cli/run/options.cpp:1: function resolve is 61 lines (lines 1-61; at most 60 under cli/run/)")

    def test_python_method_of_80_lines_passes(self):
        self.write("worker/python/m.py", py_method("fits", 80))
        self.assert_passes()

    def test_python_method_of_81_lines_fails(self):
        self.write("worker/python/m.py", py_method("too_long", 81))
        self.assert_fails("worker/python/m.py:2: function too_long is 81 lines (lines 2-82; at most 80)")

    def test_lambda_at_namespace_scope_of_81_lines_fails(self):
        self.write("common/l.cpp", "// head\n" + cpp_lambda("handler", 80) + cpp_lambda("too_long", 81))
        output = self.assert_fails("a lambda in common/l.cpp:82 is 81 lines (lines 82-162; at most 80)",
                                   "make it a named function")
        self.assertNotIn("common/l.cpp:2", output)

    def test_lambda_inside_a_function_counts_for_both(self):
        inner = cpp_lambda("handler", 81).replace("\n", "\n  ").rstrip()
        self.write("common/l.cpp", "int outer() {\n  " + inner + "\n  return 0;\n}\n")
        self.assert_fails("common/l.cpp:1: function outer is 84 lines",
                          "a lambda in common/l.cpp:2 (inside function outer) is 81 lines")

    def test_missing_ctags_cannot_check(self):
        code, output = self.check("--ctags", os.path.join(self.root, "no-ctags"))
        self.assertEqual(code, 2, output)
        self.assertIn("no Universal Ctags found", output)
        self.assertIn("universal-ctags", output)

    # folder size
    def test_folder_of_20_files_passes(self):
        for i in range(20):
            self.write(f"common/wide/f{i}.cpp", "")
        self.assert_passes()

    def test_folder_of_21_files_fails(self):
        for i in range(21):
            self.write(f"common/wide/f{i}.cpp", "")
        self.assert_fails("common/wide/ holds 21 source files directly (at most 20)", "split it into sub-folders")

    # include rules and cycles
    def test_include_upwards_fails(self):
        self.write("agent/a.h", "")
        self.write("trainer/t.cpp", '#include "agent/a.h"\n')
        self.assert_fails('trainer/t.cpp:1: includes "agent/a.h": trainer/ may not include agent/')

    def test_includes_one_way_pass(self):
        self.write("common/a/a.h", '#include "common/b/b.h"\n#include "common/missing.h"\n#include <vector>\n')
        self.write("common/b/b.h", '#include "common/b/c.h"\n#include "dtrain/generated.pb.h"\n')
        self.write("common/b/c.h", "")
        self.assert_passes()

    def test_two_folder_cycle_fails(self):
        self.write("common/a/a.h", '#include "common/b/b.h"\n')
        self.write("common/b/b.cpp", '// head\n#include "common/a/a.h"\n')
        self.write("common/b/b.h", "")
        self.assert_fails("include cycle between the folders common/a/, common/b/", "make the includes point one way",
                          'common/a/ -> common/b/: common/a/a.h:1 includes "common/b/b.h"',
                          'common/b/ -> common/a/: common/b/b.cpp:2 includes "common/a/a.h"')

    def test_three_folder_cycle_is_one_problem(self):
        self.write("agent/x/x.h", '#include "agent/y/y.h"\n')
        self.write("agent/y/y.h", '#include "agent/z/z.h"\n')
        self.write("agent/z/z.h", '#include "agent/x/x.h"\n')
        output = self.assert_fails("layout.rules: 1 problem(s)", "agent/x/, agent/y/, agent/z/",
                                   "agent/z/ -> agent/x/: agent/z/z.h:1")
        self.assertEqual(output.count(" -> agent/"), 3, output)


class TarjanTest(unittest.TestCase):
    def test_components(self):
        graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}
        self.assertEqual(sorted(layout_cycles.strongly_connected(graph)), [["a", "b"], ["c", "d"], ["e"]])

    def test_a_long_chain_needs_no_recursion(self):
        size = sys.getrecursionlimit() * 3
        graph = {i: {i + 1} for i in range(size)}
        graph[size] = {0}
        components = layout_cycles.strongly_connected(graph)
        self.assertEqual([len(c) for c in components], [size + 1])


if __name__ == "__main__":
    unittest.main()
