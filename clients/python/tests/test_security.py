"""The import policy (no root needed)."""

import pytest

from isolate_sandbox import analyze_code

CODE = """
import json, os.path
from subprocess import run
from . import sibling
import collections.abc as abc
__import__("socket")
import importlib
importlib.import_module("shutil")
"""


def test_finds_every_kind_of_import() -> None:
    report = analyze_code(CODE)
    assert report.imports == ["collections.abc", "importlib", "json", "os.path", "shutil",
                              "socket", "subprocess"]
    assert report.blocked == ["importlib", "os.path", "shutil", "socket", "subprocess"]
    assert report.mode == "block"
    assert not report.allowed
    assert report.warnings[0] == "imports importlib, which the policy lists"


def test_clean_code_allowed() -> None:
    report = analyze_code("import math\nprint(math.pi)")
    assert report.allowed and report.blocked == [] and report.imports == ["math"]


def test_warn_mode_allows_but_reports() -> None:
    report = analyze_code("import os", mode="warn")
    assert report.allowed and report.blocked == ["os"]


def test_bypass_allows_and_says_so() -> None:
    report = analyze_code("import os", bypass=True)
    assert report.allowed and report.bypassed and report.blocked == ["os"]


def test_off_mode_blocks_nothing() -> None:
    report = analyze_code("import os", mode="off")
    assert report.allowed and report.blocked == [] and report.imports == ["os"]


def test_custom_list_matches_packages_not_prefixes() -> None:
    report = analyze_code("import numpy.linalg\nimport numpyx", blocked_imports=["numpy"])
    assert report.blocked == ["numpy.linalg"]


def test_syntax_error_reported_not_raised() -> None:
    report = analyze_code("def f(:\n")
    assert report.allowed
    assert report.syntax_error is not None and "(line 1)" in report.syntax_error


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown import mode 'strict'"):
        analyze_code("", mode="strict")
