"""`python -m bench surface`: how big Tower is, read from its code (issue 41's figures).

Every figure comes from the source through Python's own parser (``ast``), never from a
pattern over the text, so a comment or a docstring is never counted:

- lines in ``tower/`` (every ``.py`` file; an AG-UI module, if there is one, apart);
- the public names of each public module (its ``__all__``) and their total;
- the exception classes Tower defines, and the roots they hang from: a Tower class that
  derives from no other Tower exception starts a tree of its own; the classes outside Tower
  those derive from are listed beside;
- failure-type string literals outside the registry: a string spelled where a failure type
  is given (``type=`` of a call, ``non_retryable_error_types=``) or compared with an
  error's ``.type``, found through the names and tuples that carry it to that use;
- ``workflow.patched`` (and ``deprecate_patch``) calls in ``tower/`` and in the example.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PUBLIC = ("tower", "tower.client", "tower.testing", "tower.temporal", "tower.effects")
EXAMPLE = ("workflows", "activities", "worker.py", "starter")
AG_UI = {"ag_ui", "agui"}  # a path part that names the AG-UI module: counted apart
# The one module allowed to spell failure types (issue 41, item 2), once it exists.
REGISTRY: tuple[str, ...] = ("tower/contract/failures.py",)
# A failure type is spelled like a class name; "int" or "function" compared with some
# other ``.type`` (a form field's, a tool call's) is not one.
FAILURE_TYPE = re.compile(r"[A-Z][A-Za-z0-9]*\Z")
PATCH_CALLS = {"patched", "deprecate_patch"}


class SurfaceError(Exception):
    """The tree cannot be measured (a public module missing, an ``__all__`` not literal)."""


@dataclass
class Surface:
    lines: int = 0
    files: int = 0
    ag_ui_lines: int = 0
    names: dict[str, int] = field(default_factory=dict)
    exception_classes: int = 0
    roots: list[str] = field(default_factory=list)  # Tower classes with no Tower base
    outside_bases: dict[str, int] = field(default_factory=dict)  # what the roots derive from
    failure_literals: list[str] = field(default_factory=list)  # "path:line Type"
    patch_calls: list[str] = field(default_factory=list)  # "path:line name(arg)"

    @property
    def total_names(self) -> int:
        return sum(self.names.values())


def _parsed(root: Path, where: str) -> Iterator[tuple[str, str, ast.Module]]:
    base = root / where
    files = [base] if base.suffix == ".py" else sorted(base.rglob("*.py"))
    for path in files:
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            yield path.relative_to(root).as_posix(), text, ast.parse(text, str(path))


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _public_names(root: Path, module: str) -> int:
    parts = module.split(".")
    for path in (root.joinpath(*parts, "__init__.py"), root.joinpath(*parts[:-1],
                                                                     f"{parts[-1]}.py")):
        if path.is_file():
            break
    else:
        raise SurfaceError(f"public module {module} not found under {root}")
    names: list[str] | None = None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id == "__all__"):
            continue
        try:
            listed = list(ast.literal_eval(value))
        except ValueError:
            raise SurfaceError(f"{path}: __all__ is not a literal list of names") from None
        names = [*(names or []), *listed] if isinstance(node, ast.AugAssign) else listed
    if names is None:
        raise SurfaceError(f"{path}: no __all__")
    return len(names)


def _imports(tree: ast.Module) -> dict[str, str]:
    """The names a file imports, each with what it names (``module`` or ``module.name``)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            found.update({a.asname or a.name.split(".")[0]: a.asname and a.name
                          or a.name.split(".")[0] for a in node.names})
    return found


def _is_exception(dotted: str, imports: dict[str, str]) -> bool:
    """Whether a base named outside Tower is an exception class: a builtin one, or one the
    file imports (loaded to check); failing that, judged by its name."""
    head, _, rest = dotted.partition(".")
    if not rest and isinstance(getattr(builtins, head, None), type):
        return issubclass(getattr(builtins, head), BaseException)
    target = imports.get(head, head) + (f".{rest}" if rest else "")
    module, _, name = target.rpartition(".")
    try:
        if module.split(".")[0] == "tower":  # not the measured tree's: the installed one
            raise ImportError(module)
        found = getattr(importlib.import_module(module), name)
        return isinstance(found, type) and issubclass(found, BaseException)
    except (ImportError, AttributeError, ValueError):
        return dotted.endswith(("Error", "Exception", "Warning", "Exit", "Abort"))


def _exceptions(files: list[tuple[str, ast.Module]], surface: Surface) -> None:
    classes: dict[str, list[tuple[str, list[str], dict[str, str]]]] = {}
    aliases: dict[str, str] = {}  # ``CliError = ClientError``: another name of a class
    for path, tree in files:
        imports = _imports(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [_dotted(b) for b in node.bases if _dotted(b)]
                classes.setdefault(node.name, []).append((f"{path}:{node.name}", bases,
                                                          imports))
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name) and _dotted(node.value)):
                aliases[node.targets[0].id] = _dotted(node.value).rpartition(".")[2]
    for name, defs in classes.items():  # each base by the name of the class it is
        classes[name] = [(where, [aliases[b] if b in aliases and aliases[b] in classes
                                  else b for b in bases], imports)
                         for where, bases, imports in defs]
    exceptions: set[str] = set()  # Tower's, by name
    while True:  # until no class joins: a subclass may be defined before its base
        grown = {name for name, defs in classes.items() if name not in exceptions and any(
            b.rpartition(".")[2] in exceptions
            or (b.rpartition(".")[2] not in classes and _is_exception(b, imports))
            for _, bases, imports in defs for b in bases)}
        if not grown:
            break
        exceptions |= grown
    outside: Counter[str] = Counter()
    for name in sorted(exceptions):
        for where, bases, _ in classes[name]:
            surface.exception_classes += 1
            if not any(b.rpartition(".")[2] in exceptions for b in bases):
                surface.roots.append(where)
                outside.update(b for b in bases if b.rpartition(".")[2] not in classes)
    surface.outside_bases = dict(outside.most_common())


class _Literals:
    """Failure types spelled as strings: found from where a type is used, through the
    names, attributes, tuples and conditionals that carry it there."""

    def __init__(self, files: list[tuple[str, ast.Module]]) -> None:
        self.defs: dict[str, list[tuple[str, ast.expr]]] = {}  # name -> (path, value)
        for path, tree in files:
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    targets, value = [node.target], node.value
                else:
                    continue
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.defs.setdefault(t.id, []).append((path, value))
        self.found: set[tuple[str, int, str]] = set()

    def uses(self, path: str, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg in ("type", "non_retryable_error_types"):
                        self.resolve(path, kw.value, set())
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Attribute) and s.attr == "type" for s in sides):
                    for s in sides:
                        self.resolve(path, s, set())

    def resolve(self, path: str, node: ast.expr, seen: set[str]) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if FAILURE_TYPE.match(node.value):
                self.found.add((path, node.lineno, node.value))
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            for elt in node.elts:
                self.resolve(path, elt, seen)
        elif isinstance(node, ast.Starred):
            self.resolve(path, node.value, seen)
        elif isinstance(node, ast.IfExp):
            self.resolve(path, node.body, seen)
            self.resolve(path, node.orelse, seen)
        elif isinstance(node, ast.BinOp | ast.BoolOp):
            for part in (node.values if isinstance(node, ast.BoolOp)
                         else [node.left, node.right]):
                self.resolve(path, part, seen)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("list", "tuple", "set", "frozenset") and node.args):
            self.resolve(path, node.args[0], seen)
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name == "type" or name in seen:
                return
            defs = self.defs.get(name, [])
            here = [d for d in defs if d[0] == path]  # this file's own, when it has one
            for where, value in here or defs:
                self.resolve(where, value, seen | {name})


def measure(root: Path) -> Surface:
    """The figures of the Tower tree at ``root`` (the folder holding ``tower/``)."""
    root = root.resolve()
    if not (root / "tower").is_dir():
        raise SurfaceError(f"{root}: no tower/ folder to measure")
    surface = Surface()
    files: list[tuple[str, ast.Module]] = []
    for path, text, tree in _parsed(root, "tower"):
        count = len(text.splitlines())
        if AG_UI & {Path(part).stem for part in Path(path).parts}:  # tower/agui.py or a package
            surface.ag_ui_lines += count
        else:
            surface.lines += count
            surface.files += 1
        files.append((path, tree))
    surface.names = {m: _public_names(root, m) for m in PUBLIC}
    _exceptions(files, surface)
    literals = _Literals(files)
    for path, tree in files:
        if path not in REGISTRY:
            literals.uses(path, tree)
    surface.failure_literals = [f"{p}:{n} {t}" for p, n, t in sorted(literals.found)
                                if p not in REGISTRY]
    example = [(p, t) for where in EXAMPLE for p, _, t in _parsed(root, where)]
    calls = sorted((path, node.lineno, f"{_dotted(node.func)}({ast.unparse(node.args[0])})")
                   for path, tree in [*files, *example] for node in ast.walk(tree)
                   if isinstance(node, ast.Call) and node.args
                   and _dotted(node.func).rpartition(".")[2] in PATCH_CALLS)
    surface.patch_calls = [f"{p}:{n} {call}" for p, n, call in calls]
    return surface


def render(s: Surface, root: Path) -> str:
    modules = len({w.split(":")[0] for w in s.failure_literals})
    types = len({w.rsplit(" ", 1)[1] for w in s.failure_literals})
    rows = [
        f"Tower's surface, measured from {root}",
        f"lines in tower/              {s.lines:>7,}  ({s.files} files; AG-UI apart: "
        f"{s.ag_ui_lines:,})",
        f"public names                 {s.total_names:>7}",
        *(f"  {m:<26} {n:>7}" for m, n in s.names.items()),
        f"exception classes            {s.exception_classes:>7}",
        f"  roots (no Tower base)      {len(s.roots):>7}  deriving from "
        + ", ".join(f"{b} x{n}" for b, n in s.outside_bases.items()),
        f"failure-type literals        {len(s.failure_literals):>7}  ({types} types in "
        f"{modules} modules, outside the registry)",
        *(f"  {w}" for w in s.failure_literals),
        f"workflow.patched calls       {len(s.patch_calls):>7}  (tower/ and the example)",
        *(f"  {w}" for w in s.patch_calls),
    ]
    return "\n".join(rows)


def add_command(commands: Any) -> None:
    """``surface`` among ``python -m bench``'s subcommands."""
    parser = commands.add_parser("surface", help=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the folder holding tower/ (default: this repository)")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")


def main(args: argparse.Namespace) -> int:
    try:
        surface = measure(args.root)
    except (SurfaceError, SyntaxError) as exc:  # a figure it cannot read is no figure
        print(f"bench surface: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**asdict(surface), "total_names": surface.total_names}, indent=1))
    else:
        print(render(surface, args.root))
    return 0
