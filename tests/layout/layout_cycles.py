"""The folder-cycle rule of check_layout.py: the folders of the product's C/C++ files, joined by their includes, form
no cycle. An edge runs from a file's folder to the folder of each header it includes as "x/y.h" (a path from the
repository root that names a file of the tree; generated and system headers are not in the graph). Each strongly
connected component of more than one folder is a cycle; it is printed with one include line per edge inside it.
"""

import os
import re

INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def include_graph(source_dir, files):
    """{folder: {included folder: (file, line number, header)}}, the first include line of each edge."""
    graph = {}
    for path in files:
        folder = os.path.dirname(path)
        graph.setdefault(folder, {})
        with open(os.path.join(source_dir, path), errors="replace") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE_LINE.match(line)
                if not match or not os.path.isfile(os.path.join(source_dir, match.group(1))):
                    continue
                target = os.path.dirname(os.path.normpath(match.group(1)))
                if target != folder:
                    graph[folder].setdefault(target, (path, number, match.group(1)))
                    graph.setdefault(target, {})
    return graph


def strongly_connected(graph):
    """Tarjan's strongly connected components of `graph` ({node: iterable of nodes}), iteratively; each sorted."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            following = next(successors, None)
            if following is not None:
                if following not in index:
                    index[following] = low[following] = len(index)
                    stack.append(following)
                    on_stack.add(following)
                    work.append((following, iter(sorted(graph[following]))))
                elif following in on_stack:
                    low[node] = min(low[node], index[following])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def check_include_cycles(source_dir, files, problems):
    """Appends a problem per cycle between folders; returns the number of folders in the graph."""
    graph = include_graph(source_dir, files)
    for component in sorted(strongly_connected(graph)):
        if len(component) < 2:
            continue
        members = set(component)
        edges = [f"      {folder}/ -> {target}/: {path}:{number} includes \"{header}\""
                 for folder in component for target, (path, number, header) in sorted(graph[folder].items())
                 if target in members]
        problems.append(f"include cycle between the folders {', '.join(f + '/' for f in component)}: make the "
                        f"includes point one way (move what both sides need into the lower folder, or merge the "
                        f"folders); the edges:\n" + "\n".join(edges))
    return len(graph)
