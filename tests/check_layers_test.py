#!/usr/bin/env python3
"""tools/check_layers.py, on small planted trees and on this repository:
a clean tree passes; an include that points up, or into a sibling the
table does not allow, fails naming the file, the line and both layers;
allowed siblings that form a cycle fail; a table without its block is a usage error (2)."""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

CHECK = Path(__file__).resolve().parent.parent / "tools" / "check_layers.py"

TABLE = """# Design

```layers
# top first
high lockstep/api.hpp
left right; siblings: left -> right
low
```
"""


def run(root):
    args = [sys.executable, str(CHECK), "--root", str(root)]
    return subprocess.run(args, capture_output=True, text=True)


class planted_tree(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        self.write("docs/design.md", TABLE)
        self.write("src/high/top.cpp", '#include "left/l.hpp"\n#include "lockstep/api.hpp"\n')
        self.write("include/lockstep/api.hpp", '#include "lockstep/word.hpp"\n')
        self.write("include/lockstep/word.hpp", "")
        self.write("src/left/l.hpp", '#include "right/r.hpp"\n#include "low/base.hpp"\n')
        self.write("src/right/r.hpp", '#include "lockstep/word.hpp"\n')
        self.write("src/low/base.hpp", '#include "lockstep/word.hpp"\n#include "other.hpp"\n')
        self.write("src/low/other.hpp", "")

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def test_a_clean_tree_passes(self):
        result = run(self.root)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("the includes hold", result.stdout)

    def test_an_upward_include_fails_naming_file_line_and_layers(self):
        self.write("src/low/base.hpp", '#include "lockstep/word.hpp"\n#include "high/top.hpp"\n')
        self.write("src/high/top.hpp", "")
        result = run(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn('src/low/base.hpp:2: #include "high/top.hpp" points up to \'high\' '
                      "(layer 1 of 4 from the top) from 'low' (layer 3 of 4 from the top)",
                      result.stdout)

    def test_a_public_header_counts_as_its_layer(self):
        self.write("src/right/r.hpp", '#include "lockstep/api.hpp"\n')
        result = run(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("src/right/r.hpp:1: #include \"lockstep/api.hpp\" points up to 'high'",
                      result.stdout)

    def test_a_sibling_the_table_does_not_allow_fails(self):
        self.write("src/right/r.hpp", '#include "left/l.hpp"\n')
        result = run(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("points into its sibling 'left'", result.stdout)

    def test_allowed_siblings_that_form_a_cycle_fail(self):
        self.write("docs/design.md", TABLE.replace("left -> right", "left -> right, right -> left"))
        result = run(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("form a cycle", result.stdout)

    def test_a_folder_in_no_layer_fails(self):
        self.write("src/stray/s.cpp", '#include "low/base.hpp"\n')
        result = run(self.root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("its folder 'stray' is in no layer", result.stdout)

    def test_a_design_without_the_table_is_an_error(self):
        self.write("docs/design.md", "# no table\n")
        result = run(self.root)
        self.assertEqual(result.returncode, 2)
        self.assertIn("no ```layers block", result.stderr)


class this_repository(unittest.TestCase):
    def test_its_includes_hold(self):
        result = run(CHECK.parent.parent)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main()
