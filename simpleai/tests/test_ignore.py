"""The .gitignore rules a project's packing honours, as git reads them."""

from __future__ import annotations

import pytest

from simpleai import ignore


def ignored(lines: str, path: str, is_dir: bool = False, base: str = "") -> bool:
    return ignore.is_ignored(ignore.parse(lines, base), path, is_dir)


@pytest.mark.parametrize(("rules", "path", "is_dir", "expected"), [
    ("*.pyc", "a/b/c.pyc", False, True),           # a name without / matches at any depth
    ("*.pyc", "a/b/c.py", False, False),
    ("data/", "data", True, True),                 # a trailing / : directories only
    ("data/", "data", False, False),
    ("data/", "src/data", True, True),
    ("/build", "build", True, True),               # a leading / anchors it to the file's directory
    ("/build", "src/build", True, False),
    ("docs/*.md", "docs/a.md", False, True),       # a / in the middle anchors it too
    ("docs/*.md", "x/docs/a.md", False, False),
    ("docs/*.md", "docs/sub/a.md", False, False),  # * stops at /
    ("**/logs", "a/b/logs", True, True),
    ("**/logs", "logs", True, True),
    ("a/**/z", "a/z", False, True),
    ("a/**/z", "a/b/c/z", False, True),
    ("out/**", "out/x/y", False, True),
    ("out/**", "out", True, False),
    ("file?.txt", "file1.txt", False, True),
    ("file?.txt", "file10.txt", False, False),
    ("[abc].txt", "b.txt", False, True),
    ("[!abc].txt", "b.txt", False, False),
    ("# a comment\n\n", "# a comment", False, False),
    ("\\#hash", "#hash", False, True),
    ("*.csv\n!keep.csv", "keep.csv", False, False),  # the last match wins
    ("!keep.csv\n*.csv", "keep.csv", False, True),
    ("trailing   ", "trailing", False, True),
])
def test_patterns_match_as_git_matches_them(rules, path, is_dir, expected):
    assert ignored(rules, path, is_dir) is expected


def test_a_nested_ignore_file_applies_below_its_directory_only():
    rules = ignore.parse("*.bin", base="models")
    assert ignore.is_ignored(rules, "models/big.bin", False)
    assert ignore.is_ignored(rules, "models/sub/big.bin", False)
    assert not ignore.is_ignored(rules, "big.bin", False)
    anchored = ignore.parse("/cache", base="models")
    assert ignore.is_ignored(anchored, "models/cache", True) and not ignore.is_ignored(anchored, "models/x/cache", True)
