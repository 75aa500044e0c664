"""README.md's Layout table covers every folder of the product: each folder under cli/, agent/, common/, trainer/,
worker/ and proto/ is a row (its first cell, `folder/`), or is named as `name/` in the row of the nearest folder above
it that is a row (agent/node/topology/ as `topology/` in the `agent/node/` row; proto/dtrain/ by `dtrain/v1/` in the
`proto/` row). A folder nobody can find in the table
is a folder nobody knows the concept of."""

import os
import re

ROOTS = ("cli", "agent", "common", "trainer", "worker", "proto")
ROW = re.compile(r"^\|\s*`([^`]+?)/?`\s*\|(.*)$")


def table_rows(readme_text):
    """{folder: the row's text} of the table under '## Layout' (up to the next heading)."""
    rows, inside = {}, False
    for line in readme_text.splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Layout"
            continue
        if inside and line.startswith("#"):
            break
        match = ROW.match(line) if inside else None
        if match:
            rows[match.group(1).rstrip("/")] = match.group(2)
    return rows


def product_folders(source_dir):
    out = []
    for root in ROOTS:
        for directory, subdirs, _ in os.walk(os.path.join(source_dir, root)):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith((".", "__")))
            out.append(os.path.relpath(directory, source_dir))
    return out


def covered(folder, rows):
    if folder in rows:
        return True
    parent = os.path.dirname(folder)
    while parent and parent not in rows:
        parent = os.path.dirname(parent)
    if not parent:
        return False
    # `topology/`, or a path from the row's folder that passes through this one (`dtrain/v1/` names dtrain/ too).
    return f"`{os.path.basename(folder)}/`" in rows[parent] or f"`{os.path.relpath(folder, parent)}/" in rows[parent]


def check_readme_table(source_dir, problems):
    """Appends a problem per folder the table misses; returns how many folders it checked."""
    readme = os.path.join(source_dir, "README.md")
    if not os.path.isfile(readme):
        problems.append("README.md is missing: its Layout table must name every folder")
        return 0
    with open(readme, encoding="utf-8", errors="replace") as f:
        rows = table_rows(f.read())
    folders = product_folders(source_dir)
    for folder in folders:
        if not covered(folder, rows):
            problems.append(f"{folder}/ is not in README.md's Layout table: add a row for it, or name it as "
                            f"`{os.path.basename(folder)}/` in the row of the folder above it")
    return len(folders)
