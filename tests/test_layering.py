"""The folders' arrows (ARCHITECTURE.md, "Folders and their arrows"), checked.

Every `#include "folder/..."` of a source under engine/, parallel/, model/,
optim/ and launch/ must name a folder that its own folder may use (LAYERS
below), and each library under launch/ must link, in its CMakeLists.txt,
exactly the launch_* libraries whose headers it includes: so the build states
every arrow and no arrow points up. Run by CTest (test_layering); the
self-tests build small trees that break each rule and expect it to be caught.

    python3 tests/test_layering.py             # the unit tests
    python3 tests/test_layering.py --check DIR # check the tree at DIR only
"""

import os
import re
import sys
import tempfile
import unittest

# Each folder and the folders its sources may include, itself not counted.
# A folder nested under another (launch/run) is matched before its parent.
LAYERS = {
    "engine": set(),
    "parallel": {"engine"},
    "model": {"engine", "parallel"},
    "optim": {"engine", "parallel"},
    "launch/files": {"engine"},
    "launch/resilience": {"engine", "parallel"},
    "launch/data": {"engine", "launch/files"},
    "launch/formats": {"engine", "model", "launch/files"},
    "launch/hardware": {"engine", "launch/files"},
    "launch/checkpoint": {"engine", "parallel", "model", "optim",
                          "launch/files", "launch/formats", "launch/resilience"},
    "launch/plan": {"engine", "parallel", "model",
                    "launch/files", "launch/hardware", "launch/resilience"},
    # run uses plan for --layout auto (launch/run/auto_layout.h); plan never uses run.
    "launch/run": {"engine", "parallel", "model", "optim",
                   "launch/files", "launch/resilience", "launch/data", "launch/formats",
                   "launch/hardware", "launch/checkpoint", "launch/plan"},
    # The programs' mains, at the top.
    "launch": {"engine", "parallel", "model", "optim",
               "launch/files", "launch/resilience", "launch/data", "launch/formats",
               "launch/hardware", "launch/checkpoint", "launch/plan", "launch/run"},
}

SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LINK = re.compile(r"target_link_libraries\(\s*(launch_\w+)([^)]*)\)", re.S)


def folder_of(relpath, layers=LAYERS):
    """The key of `layers` owning a file (longest matching prefix), or None."""
    parts = relpath.split("/")[:-1]
    while parts:
        key = "/".join(parts)
        if key in layers:
            return key
        parts.pop()
    return None


def layers_are_acyclic(layers):
    """True when the declared arrows have no cycle (a layer using itself through others)."""
    state = {}

    def visit(node):
        if state.get(node) == 1:
            return False
        if state.get(node) == 2:
            return True
        state[node] = 1
        if not all(visit(dep) for dep in layers.get(node, ())):
            return False
        state[node] = 2
        return True

    return all(visit(node) for node in layers)


def check_tree(root, layers=LAYERS):
    """Every broken rule under `root`, one line each (empty when all hold)."""
    problems = []
    if not layers_are_acyclic(layers):
        problems.append("LAYERS: the declared arrows have a cycle")
    for name in layers:
        if not os.path.isdir(os.path.join(root, name)):
            problems.append(f"LAYERS: {name}/ is declared but not in the tree")
    included_launch = {}  # launch folder -> launch folders its sources include
    for top in sorted({name.split("/")[0] for name in layers}):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            if rel_dir.startswith("launch/") and rel_dir not in layers and any(
                    f.endswith(SOURCE_SUFFIXES) for f in filenames):
                problems.append(f"{rel_dir}/: a source folder missing from LAYERS")
            for filename in sorted(filenames):
                if not filename.endswith(SOURCE_SUFFIXES):
                    continue
                relpath = f"{rel_dir}/{filename}"
                owner = folder_of(relpath, layers)
                if owner is None:
                    continue
                with open(os.path.join(root, relpath), encoding="utf-8", errors="replace") as source:
                    text = source.read()
                for header in INCLUDE.findall(text):
                    target = folder_of(header, layers)
                    if target is None or target == owner:
                        continue
                    if target not in layers[owner]:
                        problems.append(f"{relpath}: includes {header}, but {owner}/ may not use {target}/")
                    if owner.startswith("launch/") and target.startswith("launch/"):
                        included_launch.setdefault(owner, set()).add(target)
    # The build states the arrows: launch/X/CMakeLists.txt links launch_Y for each Y it includes.
    for owner in sorted(name for name in layers if name.startswith("launch/")):
        cmake = os.path.join(root, owner, "CMakeLists.txt")
        library = "launch_" + owner.split("/", 1)[1]
        if not os.path.isfile(cmake):
            problems.append(f"{owner}/: no CMakeLists.txt (each folder is its own library)")
            continue
        with open(cmake, encoding="utf-8") as f:
            links = [m for m in LINK.finditer(f.read()) if m.group(1) == library]
        if not links:
            problems.append(f"{owner}/CMakeLists.txt: no target_link_libraries({library} ...)")
            continue
        linked = {"launch/" + name[len("launch_"):]
                  for m in links for name in re.findall(r"\blaunch_\w+", m.group(2))}
        for target in sorted(linked - layers[owner]):
            problems.append(f"{owner}/CMakeLists.txt: {library} links {target}, a folder it may not use")
        for target in sorted((included_launch.get(owner, set()) & layers[owner]) - linked):
            problems.append(f"{owner}/CMakeLists.txt: {library} includes {target}/ headers without linking it")
    return problems


def write(root, relpath, text):
    path = os.path.join(root, relpath)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class SmallTree(unittest.TestCase):
    """A two-folder tree: launch/b may use launch/a, not the other way round."""
    LAYERS = {"launch/a": set(), "launch/b": {"launch/a"}, "launch": {"launch/a", "launch/b"}}

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        write(self.root, "launch/a/a.h", "#pragma once\n")
        write(self.root, "launch/a/CMakeLists.txt", "target_link_libraries(launch_a PUBLIC engine)\n")
        write(self.root, "launch/b/b.cpp", '#include "launch/a/a.h"\n')
        write(self.root, "launch/b/CMakeLists.txt", "target_link_libraries(launch_b PUBLIC launch_a engine)\n")
        write(self.root, "launch/main.cpp", '#include "launch/b/b.h"\n')

    def tearDown(self):
        self.dir.cleanup()

    def test_a_tree_that_keeps_the_rules_passes(self):
        self.assertEqual(check_tree(self.root, self.LAYERS), [])

    def test_an_include_pointing_up_is_caught(self):
        write(self.root, "launch/a/a.cpp", '#include "launch/a/a.h"\n  #  include "launch/b/b.h"\n')
        self.assertEqual(check_tree(self.root, self.LAYERS),
                         ["launch/a/a.cpp: includes launch/b/b.h, but launch/a/ may not use launch/b/"])

    def test_an_include_without_its_link_is_caught(self):
        write(self.root, "launch/b/CMakeLists.txt", "target_link_libraries(launch_b PUBLIC engine)\n")
        self.assertEqual(check_tree(self.root, self.LAYERS),
                         ["launch/b/CMakeLists.txt: launch_b includes launch/a/ headers without linking it"])

    def test_a_link_pointing_up_is_caught(self):
        write(self.root, "launch/a/CMakeLists.txt", "target_link_libraries(launch_a\n  PUBLIC launch_b)\n")
        self.assertEqual(check_tree(self.root, self.LAYERS),
                         ["launch/a/CMakeLists.txt: launch_a links launch/b, a folder it may not use"])

    def test_a_new_folder_must_be_declared(self):
        write(self.root, "launch/c/c.cpp", "int c;\n")
        self.assertEqual(check_tree(self.root, self.LAYERS), ["launch/c/: a source folder missing from LAYERS"])

    def test_a_cycle_in_the_declared_arrows_is_refused(self):
        layers = dict(self.LAYERS, **{"launch/a": {"launch/b"}})
        self.assertIn("LAYERS: the declared arrows have a cycle", check_tree(self.root, layers))


class ThisRepository(unittest.TestCase):
    def test_every_include_and_link_follows_the_arrows(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        problems = check_tree(root)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_the_declared_arrows_are_acyclic(self):
        self.assertTrue(layers_are_acyclic(LAYERS))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        found = check_tree(sys.argv[2])
        print("\n".join(found) if found else "layering: every include and link follows the arrows")
        sys.exit(1 if found else 0)
    unittest.main()
