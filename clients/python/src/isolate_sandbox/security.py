"""The import policy: which modules a piece of Python code imports, found by parsing it.

This is policy, not protection. Code can reach any module without an import statement
(``getattr(__builtins__, ...)``, ``eval`` of a built string); the sandbox, not this list, is the
security boundary. The list lets a caller refuse or flag code that plainly asks for things it
should not need.
"""

import ast
import dataclasses
from typing import FrozenSet, Iterable, List, Optional, Set

from .config import DEFAULT_BLOCKED_IMPORTS, IMPORT_MODES


@dataclasses.dataclass
class SecurityReport:
    """What :func:`analyze_code` found.

    ``imports``: every module imported (full dotted names, sorted); ``blocked``: those the block
    list matches; ``mode``: ``block``, ``warn`` or ``off``; ``allowed``: whether the code may run;
    ``bypassed``: the caller vouched for the code; ``syntax_error``: the parser's message when the
    code does not parse (imports are then unknown and the sandbox's interpreter has the last word).
    """

    imports: List[str]
    blocked: List[str]
    mode: str
    allowed: bool
    bypassed: bool = False
    syntax_error: Optional[str] = None
    warnings: List[str] = dataclasses.field(default_factory=list)


def analyze_code(code: str, blocked_imports: Optional[Iterable[str]] = None,
                 mode: str = "block", bypass: bool = False) -> SecurityReport:
    """Parse ``code`` and check its imports against ``blocked_imports``.

    A module is blocked when it or any package above it is on the list (``os.path`` matches
    ``os``). Found: ``import m``, ``from m import x``, ``__import__("m")`` and
    ``importlib.import_module("m")`` with a literal name. ``bypass=True`` reports what it finds
    but always allows (trusted code).
    """
    if mode not in IMPORT_MODES:
        raise ValueError(f"unknown import mode {mode!r}; valid: {', '.join(IMPORT_MODES)}")
    block_list: FrozenSet[str] = (DEFAULT_BLOCKED_IMPORTS if blocked_imports is None
                                  else frozenset(blocked_imports))
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return SecurityReport(imports=[], blocked=[], mode=mode, allowed=True, bypassed=bypass,
                              syntax_error=syntax_error_text(e))
    imports = sorted(_imports(tree))
    blocked = [m for m in imports if _matches(m, block_list)] if mode != "off" else []
    warnings = [f"imports {m}, which the policy lists" for m in blocked]
    allowed = bypass or mode != "block" or not blocked
    return SecurityReport(imports=imports, blocked=blocked, mode=mode, allowed=allowed,
                          bypassed=bypass, warnings=warnings)


def syntax_error_text(e: SyntaxError) -> str:
    """``invalid syntax (line 3)``: the parser's message and where."""
    where = f" (line {e.lineno})" if e.lineno else ""
    return f"{e.msg}{where}"


def _matches(module: str, block_list: FrozenSet[str]) -> bool:
    parts = module.split(".")
    return any(".".join(parts[:i]) in block_list for i in range(1, len(parts) + 1))


def _imports(tree: ast.AST) -> Set[str]:
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.add(node.module)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            if node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    # builtins.__import__("m"), importlib.import_module("m"), and the like.
    return isinstance(func, ast.Attribute) and func.attr in ("__import__", "import_module")
