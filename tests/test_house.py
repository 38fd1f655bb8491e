"""The house rules that import-linter cannot state: faces, and rooms a newcomer can take in.

The layers themselves (a wing imports only the wings below it) are import-linter contracts in
pyproject.toml, run by `make lint`."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WINGS = [
    f"effectgate.gateway.{wing}"
    for wing in ("model", "config", "observability", "store", "core", "background", "rpc", "intake", "runtime")
]
PROVIDERS = [f"effectgate.adapters.{name}" for name in ("stripe", "square", "postmark", "smtp", "http")]
# Lab tools that reach into a wing on purpose, and why.
WHITE_BOX = {
    "effectgate_lab.bench.host_clock": "hides PostgreSQL's clock for the bench's store/host clock comparison",
    "effectgate.testing.sim.store": "runs the SQLite store's own statements synchronously, without its writer thread",
}
SOURCES = [ROOT / "src", ROOT / "lab" / "src", ROOT / "clients" / "python" / "src"]


def _module(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _wing(module: str) -> str | None:
    return next((w for w in WINGS if module == w or module.startswith(w + ".")), None)


@pytest.mark.parametrize("package", [*WINGS, *PROVIDERS, "effectgate.adapters", "effectgate.testing"])
def test_every_wing_has_a_public_face(package: str) -> None:
    face = importlib.import_module(package)
    assert face.__doc__, f"{package}: say in its docstring what lives there"
    names = getattr(face, "__all__", None)
    assert names, f"{package}: no __all__"
    assert all(getattr(face, name, None) is not None for name in names), package


def test_other_wings_import_a_wing_through_its_face() -> None:
    # `from effectgate.gateway.core import EffectProtocol`, never `...core.protocol import ...`
    # from outside core: a wing's modules are its own to rearrange.
    leaks = []
    for src in SOURCES:
        for path in src.rglob("*.py"):
            here = _module(path, src)
            if here == "effectgate.gateway.__main__" or here in WHITE_BOX:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    target = _wing(node.module)
                    if target and node.module != target and _wing(here) != target:
                        leaks.append(f"{path.relative_to(ROOT)}:{node.lineno} from {node.module}")
    assert not leaks, "\n".join(leaks)


def test_no_folder_is_a_hall() -> None:
    # A room a newcomer finds by its name: no package holds more than 15 modules.
    halls = {}
    for src in SOURCES:
        for folder in [src, *[p for p in src.rglob("*") if p.is_dir() and p.name != "__pycache__"]]:
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            if len(modules) > 15:
                halls[str(folder.relative_to(ROOT))] = len(modules)
    assert not halls, halls


def _imports(path: Path, module: str, modules: set[str]) -> set[str]:
    """The modules of `modules` that `module` imports anywhere: at the top, in a function, under
    `if TYPE_CHECKING:` (each is a dependency all the same)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            names = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        found.update(name for name in names if name in modules and name != module)
    return found


def _circles(src: Path) -> list[list[str]]:
    """Every set of modules under `src` that import each other round a circle (Tarjan's strongly
    connected components of more than one module)."""
    paths = {_module(path, src): path for path in src.rglob("*.py")}
    graph = {module: _imports(path, module, set(paths)) for module, path in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component: list[str] = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return circles


def test_no_import_circles() -> None:
    # Function-level and type-checking imports count: each hides a two-way dependency.
    assert _circles(ROOT / "src") == []


def test_the_circle_finder_finds_one(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import x\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from . import a\n")
    (tmp_path / "pkg" / "c.py").write_text("from pkg import a\n")
    assert _circles(tmp_path) == [["pkg.a", "pkg.b"]]


def test_no_source_file_is_over_400_lines() -> None:
    long = {}
    for path in (ROOT / "src").rglob("*.py"):
        lines = len(path.read_text().splitlines())
        if lines > 400:
            long[str(path.relative_to(ROOT))] = lines
    assert not long, long


def _wings_table() -> dict[str, set[str]]:
    """docs/architecture.md's table of the gateway's wings: the modules each row names (a
    lowercase name in backticks; a trailing `/` names a folder)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The gateway's wings", 1)[1].split("\n## ", 1)[0]
    named: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.split(" | ")]
        if len(cells) == 3 and cells[0].startswith("| `"):
            wing = cells[0].strip("| `")
            named[wing] = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*/?)`", cells[1]))
    return named


def test_the_architecture_page_names_every_module_of_the_wings() -> None:
    named = _wings_table()
    assert set(named) == {wing.rpartition(".")[2] for wing in WINGS}
    gateway = ROOT / "src" / "effectgate" / "gateway"
    missing = [
        f"{wing}: {name}"
        for wing, names in named.items()
        for name in names
        if not ((gateway / wing / name).is_dir() if name.endswith("/") else (gateway / wing / f"{name}.py").is_file())
    ]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
    unnamed = [
        f"{wing}: {module}"
        for wing, names in named.items()
        for path in sorted((gateway / wing).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
        and (module := str(path.relative_to(gateway / wing).with_suffix(""))) not in names
    ]
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"
