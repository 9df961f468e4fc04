"""The import graph of the installed packages has no cycles, between packages or modules.

Every import counts, also those inside functions (deferred to keep start-up light): a
cycle through a deferred import is still two modules that cannot be understood apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# installed package -> source folder, as pyproject.toml's package-dir maps them
SOURCES = {"costmodel": "costmodel", "costmodel.features": "features",
           "costmodel.measure": "measure", "costmodel.training": "training",
           "costmodel.models": "models", "costmodel.api": "api"}

# The README's layout picture, top to bottom: a package imports only packages below it.
# A subpackage not drawn there (features.stablehlo) is part of the package above it.
LAYERS = (("costmodel.cli",), ("costmodel.api",), ("costmodel.training",),
          ("costmodel.training.evaluation",), ("costmodel.training.fitting",),
          ("costmodel.training.measure",), ("costmodel.training.corpus", "costmodel.training.store"),
          ("costmodel",), ("costmodel.measure", "costmodel.models"), ("costmodel.features",))
# What `predict`, `record` and `profile` run; none of it may import training, not even deferred.
RUNTIME = ("costmodel", "costmodel.measure", "costmodel.models", "costmodel.features")
LEVEL = {package: level for level, packages in enumerate(LAYERS) for package in packages}


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in SOURCES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if not (path.parent / "__init__.py").exists():
                continue
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _package_of(module: str) -> str:
    """The drawn package `module` belongs to: the nearest of LAYERS' packages above it."""
    name = module
    while name not in LEVEL:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, path: Path) -> set[str]:
    """The project modules `module` imports (a `from P import x` of a submodule x counts as
    importing x, otherwise as importing P), unresolved names included."""
    package = module if module in PACKAGES else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                out.add(sub if sub in MODULES else source)
    return {name for name in out if name.partition(".")[0] == "costmodel" and name != module}


IMPORTS = {module: _imports(module, path) for module, path in MODULES.items()}
GRAPH = {module: {name for name in names if name in MODULES}
         for module, names in IMPORTS.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read():
    assert len(MODULES) > 80
    assert "costmodel.measure.harness" in MODULES
    assert "costmodel.features" in GRAPH["costmodel.measure.harness"]
    assert "costmodel.measure.harness" in GRAPH["costmodel._profile"]
    assert "costmodel.measure.harness" in GRAPH["costmodel.training.measure.child"]


def test_every_import_of_the_project_names_a_module_that_exists():
    """Deferred imports fail only when their function runs: check them all here."""
    missing = {module: sorted(names - set(MODULES)) for module, names in IMPORTS.items()
               if names - set(MODULES)}
    assert missing == {}


def test_no_module_cycles():
    assert _cycles(GRAPH) == []


def test_no_package_cycles():
    packages: dict[str, set[str]] = {}
    why: dict[tuple[str, str], str] = {}
    for module, targets in GRAPH.items():
        for target in targets:
            a, b = _package_of(module), _package_of(target)
            if a != b:
                packages.setdefault(a, set()).add(b)
                why.setdefault((a, b), f"{module} -> {target}")
    cycles = _cycles(packages)
    explained = [[why.get((x, y), "") for x in c for y in c if (x, y) in why] for c in cycles]
    assert cycles == [], explained


def test_every_drawn_package_exists():
    assert set(LEVEL) <= PACKAGES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    level = LEVEL[_package_of(module)]
    upward = {target for target in GRAPH[module]
              if _package_of(target) != _package_of(module) and LEVEL[_package_of(target)] <= level}
    assert upward == set()


def test_the_runtime_never_imports_training():
    """The service and a user's `record` or `profile` load no training code (and so none of
    scikit-learn, pandas or the corpus); only the command line and a retrain do."""
    runtime = {module for module in MODULES if _package_of(module) in RUNTIME}
    assert {"costmodel._record", "costmodel._profile", "costmodel.measure.harness"} <= runtime
    reach = {module: sorted(t for t in GRAPH[module] if t.startswith("costmodel.training"))
             for module in runtime}
    assert {module: targets for module, targets in reach.items() if targets} == {}


def _drawn_layers(readme: str) -> list[set[str]]:
    """The packages of the README's layout picture, line by line from the top: a folder at
    the start of a line, or beside another one (`training/store/`), is a package there."""
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    layers = []
    for line in block.splitlines():
        folders = re.findall(r"(?:^ |\s{2,})([a-z_]+(?:/[a-z_]+)*(?:/|/build\.py))(?=\s|$)", line)
        names = {"costmodel" + "".join("." + part for part in folder.removesuffix("/build.py")
                                       .strip("/").split("/")).removeprefix(".costmodel")
                 for folder in folders}
        if names:
            layers.append(names)
    return layers


def test_the_readme_draws_the_layers_checked_here():
    assert _drawn_layers((ROOT / "README.md").read_text()) == [set(level) for level in LAYERS]


def _bench_paths(tree: ast.AST) -> list[str]:
    """Path-like uses of bench/ in code (docstrings and prose such as help texts aside): a
    string naming a path under it (`"bench/results"`), or `"bench"` joined onto a path."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    found = [node.value for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and id(node) not in docstrings and " " not in node.value
             and ("bench/" in node.value or "/bench" in node.value)]
    found += ["/ 'bench'" for node in ast.walk(tree)
              if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
              and any(isinstance(side, ast.Constant) and side.value == "bench"
                      for side in (node.left, node.right))]
    return found


def test_the_bench_finder_sees_a_baked_in_path():
    assert _bench_paths(ast.parse('RESULTS = ROOT / "bench" / "results"')) == ["/ 'bench'"]
    assert _bench_paths(ast.parse('load(Path("bench/results"))')) == ["bench/results"]
    assert _bench_paths(ast.parse('"""Reads `bench/results`."""\nframe["bench"]')) == []
    assert _bench_paths(ast.parse('help="stored runs (bench/results in a checkout)"')) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_library_module_reads_bench(module):
    """The benches' results reach the library only as an argument (the build command's
    `--outside-results`): an installed package has no bench/ folder."""
    assert _bench_paths(ast.parse(MODULES[module].read_text())) == []
