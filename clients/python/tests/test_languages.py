"""Language names and extensions (no root needed)."""

import pytest

from isolate_sandbox.languages import canonical_language, language_of_file


@pytest.mark.parametrize("name, canonical", [
    ("python", "python"), ("PY3", "python"), ("c++", "cpp"), ("golang", "go"), ("js", "javascript"),
    ("rs", "rust"), ("java", "java"), ("c", "c")])
def test_canonical(name: str, canonical: str) -> None:
    assert canonical_language(name) == canonical


def test_unknown_language() -> None:
    with pytest.raises(ValueError, match="unknown language 'cobol'; valid: c, cpp, go, java"):
        canonical_language("cobol")


@pytest.mark.parametrize("path, lang", [
    ("a/b.py", "python"), ("x.CC", "cpp"), ("Main.java", "java"), ("m.rs", "rust"),
    ("m.go", "go"), ("m.mjs", "javascript"), ("m.c", "c")])
def test_extensions(path: str, lang: str) -> None:
    assert language_of_file(path) == lang


def test_unknown_extension() -> None:
    with pytest.raises(ValueError, match="cannot tell the language of 'notes.txt'"):
        language_of_file("notes.txt")
