"""The layout is the architecture (docs/architecture.md), and this keeps it so.

Every import of gateway/, memory/ and channels/ is read from the source (function-level imports and
`if TYPE_CHECKING:` blocks included), and the rules are checked on that graph:
- no import circles at all;
- gateway.core, the shared vocabulary, imports nothing else of the project;
- memory imports nothing of gateway but gateway.core, and channels nothing but gateway.core;
  channels and memory never import each other;
- no module over 600 lines, no package with more than 15 modules (the migrations' history aside);
- a platform is one package of channels/ and one entry of its registry;
- comments cite the docs, not issue numbers;
- docs/architecture.md's tree names every package, and no other.
The checks are tried on small trees made to break each rule, so a check that cannot fail is caught.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

import channels
from gateway.config.model import PLATFORM_TYPES

REPO = Path(__file__).resolve().parents[2]
TOP = ("gateway", "memory", "channels")
MAX_LINES = 600
MAX_MODULES = 15
_ISSUE = re.compile(r"\b[Ii]ssues? ?#?\d+\b")

Graph = dict[str, set[str]]


def modules(root: Path) -> dict[str, Path]:
    """Every module of the three packages under `root`, by dotted name (a package by its own)."""
    found = {}
    for top in TOP:
        for path in (root / top).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The project's modules that `name` imports, anywhere in it."""
    known = set(known)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            resolved = resolve(target)
            if resolved is not None and resolved != name:
                found.add(resolved)
    return found


def graph(root: Path) -> Graph:
    mods = modules(root)
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def circles(edges: Graph) -> list[list[str]]:
    """Every group of modules that import each other, directly or round about (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def upward(edges: Graph) -> list[str]:
    """Imports against the layers: core <- memory, channels <- the rest of gateway."""
    wrong = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if _within(source, "gateway.core") and not _within(target, "gateway.core"):
                wrong.append(f"{source} -> {target} (gateway.core imports only itself)")
            elif _within(source, "memory") and _within(target, "gateway") and not _within(target, "gateway.core"):
                wrong.append(f"{source} -> {target} (memory imports only gateway.core of gateway)")
            elif _within(source, "channels") and _within(target, "gateway") and not _within(target, "gateway.core"):
                wrong.append(f"{source} -> {target} (channels import only gateway.core of gateway)")
            elif _within(source, "memory") and _within(target, "channels"):
                wrong.append(f"{source} -> {target} (memory and channels never import each other)")
            elif _within(source, "channels") and _within(target, "memory"):
                wrong.append(f"{source} -> {target} (memory and channels never import each other)")
    return wrong


def too_big(root: Path) -> list[str]:
    found = []
    for path in sorted(modules(root).values()):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(root)}: {lines} lines")
    for top in TOP:
        for folder in [root / top, *[p for p in (root / top).rglob("*") if p.is_dir()]]:
            if folder.match("migrations/versions"):
                continue  # the schema's history, one file a change: not modules anyone navigates
            count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
            if count > MAX_MODULES:
                found.append(f"{folder.relative_to(root)}/: {count} modules")
    return found


def issue_numbers(root: Path) -> list[str]:
    found = []
    for path in modules(root).values():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _ISSUE.search(line):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return found


# -- the project -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project() -> Graph:
    return graph(REPO)


def test_no_module_imports_itself_round_about(project: Graph) -> None:
    assert circles(project) == []


def test_each_layer_imports_only_what_is_below_it(project: Graph) -> None:
    assert upward(project) == []


def test_modules_and_packages_stay_small() -> None:
    assert too_big(REPO) == []


def test_comments_cite_the_docs_not_issue_numbers() -> None:
    assert issue_numbers(REPO) == []


def documented_packages(doc: str) -> set[str]:
    """The packages the tree in docs/architecture.md names, as paths (`gateway/turn/commands`)."""
    tree = doc.split("## The tree", 1)[1].split("```")[1]
    found, stack = set(), []
    for line in tree.splitlines():
        m = re.match(r"( *)([\w.]+)/\s", line + " ")
        if not m:
            continue
        depth = len(m.group(1)) // 2
        stack[depth:] = [m.group(2)]
        found.add("/".join(stack))
    return found


def test_the_architecture_doc_names_every_package_and_no_other() -> None:
    packages = {
        str(p.parent.relative_to(REPO))
        for top in TOP
        for p in (REPO / top).rglob("__init__.py")
        if "versions" not in p.parts
    }
    assert documented_packages((REPO / "docs" / "architecture.md").read_text(encoding="utf-8")) == packages


def test_a_platform_is_one_package_and_one_registry_entry() -> None:
    packages = {p.name for p in (REPO / "channels").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(channels._FACTORIES) == set(PLATFORM_TYPES)
    for name in packages:
        assert (REPO / "channels" / name / "config.py").exists(), f"channels/{name} has no config model"


# -- the checks themselves, on trees made to break each rule -------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in TOP:
        for folder in [root / top, *[p for p in (root / top).rglob("*") if p.is_dir()]]:
            (folder / "__init__.py").touch()
    return root


def test_a_circle_through_a_function_level_or_type_only_import_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "gateway/core/events.py": "",
            "gateway/a.py": "def f():\n    from gateway.b import g\n",
            "gateway/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gateway import c\n",
            "gateway/c.py": "from gateway.a import f\n",
            "memory/x.py": "from memory import y\n",
            "memory/y.py": "import memory.x\n",
            "channels/web/adapter.py": "",
        },
    )
    assert circles(graph(root)) == [["gateway.a", "gateway.b", "gateway.c"], ["memory.x", "memory.y"]]


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "gateway/core/events.py": "from gateway.config import model\n",
            "gateway/config/model.py": "",
            "memory/store.py": "from gateway.core.events import X\nfrom gateway.config.model import Config\n",
            "channels/web/adapter.py": "from gateway.core import events\nfrom memory.store import S\n",
            "channels/web/config.py": "def f():\n    from gateway.config.model import Config\n",
        },
    )
    assert upward(graph(root)) == [
        "channels.web.adapter -> memory.store (memory and channels never import each other)",
        "channels.web.config -> gateway.config.model (channels import only gateway.core of gateway)",
        "gateway.core.events -> gateway.config (gateway.core imports only itself)",
        "gateway.core.events -> gateway.config.model (gateway.core imports only itself)",
        "memory.store -> gateway.config.model (memory imports only gateway.core of gateway)",
    ]


def test_a_long_module_a_crowded_package_and_an_issue_number_are_found(tmp_path: Path) -> None:
    files = {f"memory/store/m{i}.py": "" for i in range(MAX_MODULES + 1)}
    files["gateway/long.py"] = "x = 1\n" * (MAX_LINES + 1)
    files["channels/web/adapter.py"] = "# fixed in issue 12\n"
    root = _tree(tmp_path, files)
    assert too_big(root) == [f"gateway/long.py: {MAX_LINES + 1} lines", f"memory/store/: {MAX_MODULES + 1} modules"]
    assert issue_numbers(root) == ["channels/web/adapter.py:1: # fixed in issue 12"]
