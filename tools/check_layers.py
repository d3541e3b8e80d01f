#!/usr/bin/env python3
"""tools/check_layers.py [--root DIR] [--design FILE]

Checks that the library's includes follow its layers. The layer table is
the block fenced with ```layers in docs/design.md: one line per layer, the
top first, naming its folders (src/<folder>, actors), each followed by the
public headers (lockstep/<name>.hpp) it implements, which count as its
files; a public header the table does not name is vocabulary, the bottom
layer. A line of public headers alone is a layer of its own. A line may end with "; siblings: a -> b, ..." for includes allowed
between folders of that layer. Every `#include "..."` of src/, actors/ and
include/ must point into its own folder, a folder of a lower layer, or an
allowed sibling.

An include that breaks the rule fails the check, naming the file, the line
and both layers. The allowed sibling includes must not form a cycle
between folders.

Exit status: 0 when the includes hold, 1 when not, 2 for a table that
cannot be read.
"""

import argparse
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
VOCABULARY = "vocabulary"


class TableError(Exception):
    pass


def read_table(design: Path):
    """The layers, top first: a list of (folders, allowed sibling edges)."""
    text = design.read_text(encoding="utf-8")
    match = re.search(r"^```layers\n(.*?)^```", text, re.M | re.S)
    if not match:
        raise TableError(f"{design}: no ```layers block")
    layers = []
    owners = {}  # public header -> the folder that implements it
    for number, line in enumerate(match.group(1).splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        folders_text, _, siblings_text = line.partition(";")
        folders = []
        for word in folders_text.split():
            if word.startswith("lockstep/") and folders:
                owners[word] = folders[-1]  # a public header of the folder before it
            else:
                folders.append(word)
                if word.startswith("lockstep/"):
                    owners[word] = word  # a layer of public headers alone
        edges = set()
        siblings_text = siblings_text.strip()
        if siblings_text:
            if not siblings_text.startswith("siblings:"):
                raise TableError(f"{design}: layer line {number}: expected '; siblings: a -> b'")
            for pair in siblings_text[len("siblings:"):].split(","):
                parts = [p.strip() for p in pair.split("->")]
                if len(parts) != 2 or not all(p in folders for p in parts):
                    raise TableError(f"{design}: layer line {number}: '{pair.strip()}' is no "
                                     "pair of this layer's folders")
                edges.add((parts[0], parts[1]))
        layers.append((folders, edges))
    layers.append(([VOCABULARY], set()))
    seen = set()
    for folders, _ in layers:
        for folder in folders:
            if folder in seen:
                raise TableError(f"{design}: '{folder}' is in two layers")
            seen.add(folder)
    return layers, owners


def folder_of(path: Path, root: Path, owners):
    """The table's folder of a library file; None outside the library."""
    relative = path.relative_to(root).parts
    if relative[0] == "src" and len(relative) > 2:
        return relative[1]
    if relative[0] == "actors":
        return "actors"
    if relative[:2] == ("include", "lockstep"):
        return owners.get("lockstep/" + "/".join(relative[2:]), VOCABULARY)
    return None


def resolve(including: Path, target: str, root: Path):
    """The file an #include "target" in `including` names (the compiler's
    order: the including file's folder, then -I . src include)."""
    for base in (including.parent, root, root / "src", root / "include"):
        candidate = base / target
        if candidate.is_file():
            return candidate.resolve()
    return None


def find_cycle(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in graph.get(node, []):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in list(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--design", type=Path)
    args = parser.parse_args()
    root = args.root.resolve()
    design = args.design or root / "docs" / "design.md"
    try:
        layers, owners = read_table(design)
    except (OSError, TableError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    rank = {}
    for index, (folders, _) in enumerate(layers):
        for folder in folders:
            rank[folder] = index
    siblings = set().union(*(edges for _, edges in layers))
    cycle = find_cycle(siblings)
    if cycle:
        print("check_layers: the allowed sibling includes form a cycle: " + " -> ".join(cycle))
        return 1

    def layer_name(folder):
        return f"'{folder}' (layer {rank[folder] + 1} of {len(layers)} from the top)"

    failures = []
    files = sorted(p for d in ("src", "actors", "include")
                   for p in (root / d).rglob("*") if p.suffix in (".hpp", ".cpp", ".h", ".cu", ".cuh"))
    for path in files:
        source = folder_of(path, root, owners)
        if source is None:
            continue
        if source not in rank:
            failures.append(f"{path.relative_to(root)}: its folder '{source}' is in no layer of "
                            f"the table in {design.relative_to(root)}")
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target_path = resolve(path, match.group(1), root)
            if target_path is None:
                continue  # a generated header (version.hpp) or one outside the tree
            target = folder_of(target_path, root, owners)
            if target is None or target == source:
                continue
            if target not in rank:
                failures.append(f"{path.relative_to(root)}:{number}: includes "
                                f"{match.group(1)}, whose folder '{target}' is in no layer")
                continue
            if rank[target] > rank[source] or (source, target) in siblings:
                continue
            how = "up to" if rank[target] < rank[source] else "into its sibling"
            failures.append(f"{path.relative_to(root)}:{number}: #include \"{match.group(1)}\" "
                            f"points {how} {layer_name(target)} from {layer_name(source)}")
    for failure in failures:
        print(failure)
    if failures:
        print(f"check_layers: {len(failures)} include(s) break the layers of "
              f"{design.name} (tools/check_layers.py says how)")
        return 1
    print(f"check_layers: {len(files)} files, {len(layers)} layers: the includes hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
