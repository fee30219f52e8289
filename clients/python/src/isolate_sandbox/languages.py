"""The seven languages of isolate's images, their source file names and extensions."""

import os
from typing import Dict

# The file name `isolate exec` gives the source in the box (docs/LANGUAGES.md).
SOURCE_NAMES: Dict[str, str] = {
    "python": "main.py",
    "c": "main.c",
    "cpp": "main.cpp",
    "go": "main.go",
    "javascript": "main.js",
    "rust": "main.rs",
    "java": "Main.java",
}

# Languages whose source is compiled before it runs (their calls may take compile_timeout more).
COMPILED = frozenset({"c", "cpp", "go", "rust", "java"})

ALIASES: Dict[str, str] = {
    "python3": "python", "py": "python", "py3": "python",
    "c++": "cpp", "g++": "cpp", "cxx": "cpp",
    "golang": "go",
    "js": "javascript", "node": "javascript", "nodejs": "javascript",
    "rs": "rust", "rustc": "rust",
    "javac": "java", "jdk": "java",
}

EXTENSIONS: Dict[str, str] = {
    ".py": "python", ".c": "c", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".c++": "cpp",
    ".go": "go", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".rs": "rust", ".java": "java",
}


def canonical_language(name: str) -> str:
    """Return the canonical name of a language or alias; raise ValueError for an unknown one."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in SOURCE_NAMES:
        raise ValueError(
            f"unknown language {name!r}; valid: {', '.join(sorted(SOURCE_NAMES))}")
    return key


def language_of_file(path: str) -> str:
    """Return the language of a source file from its extension; raise ValueError if unknown."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in EXTENSIONS:
        raise ValueError(
            f"cannot tell the language of {path!r} from its extension {ext!r}; "
            f"known: {', '.join(sorted(EXTENSIONS))}")
    return EXTENSIONS[ext]
