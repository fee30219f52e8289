"""Unpacking what collect= brings back: the box wrote it, so it is read as untrusted."""

from isolate_sandbox.collect import ARCHIVE, CollectLimits, collect_command, unpack

import pytest


def test_unpack_enforces_the_bounds_itself() -> None:
    archive = b"3 3 a\nAAA3 3 b\nBBB3 3 c\nCCC=\n"
    assert unpack({ARCHIVE: archive}, {}, CollectLimits()) == \
        ({"a": b"AAA", "b": b"BBB", "c": b"CCC"}, [])
    assert unpack({ARCHIVE: archive}, {}, CollectLimits(max_files=2, max_bytes=4)) == \
        ({"a": b"AAA", "b": b"B"}, ["collected file b cut to 1 of 3 bytes (all files together "
                                    "at most 4)", "collected files cut at 2 files"])


def test_unpack_says_what_went_wrong() -> None:
    limits = CollectLimits()
    assert unpack({ARCHIVE: b""}, {}, limits) == \
        ({}, ["collected files: none, the command did not finish"])
    assert unpack({}, {ARCHIVE: "over 67108864 bytes"}, limits) == \
        ({}, ["collected files not returned: over 67108864 bytes"])
    assert unpack({}, {}, limits) == \
        ({}, ["collected files not returned: the command did not finish"])
    for bad in (b"9 3 a\nAAA", b"3 9 a\nAAA=\n", b"-1 -1 a\n=\n", b"x y\n=\n"):
        assert unpack({ARCHIVE: bad}, {}, limits)[1][-1].startswith("collected files: the "
                                                                    "archive"), bad
    assert unpack({ARCHIVE: b"1 1 a\nA+ 101\n=\n"}, {}, limits) == \
        ({"a": b"A"}, ["collected files cut at 100 files"])


def test_collect_command_refuses_bad_patterns() -> None:
    argv, copy_out = collect_command("make", ["*.xml"], CollectLimits())
    assert (argv[:2], argv[3:], copy_out) == (["/bin/sh", "-c"], ["collect", "make", "*.xml"],
                                              [ARCHIVE])
    with pytest.raises(ValueError, match="a non-empty glob on one line"):
        collect_command("make", ["a\nb"], CollectLimits())
    with pytest.raises(ValueError, match="collect limits must be positive"):
        CollectLimits(max_files=0)
