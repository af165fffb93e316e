import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: File or folder -> the third-party packages none of its files may import (anywhere in the file).
FORBIDDEN = {
    "geonp/models": {"rasterio", "xarray", "rioxarray", "click", "dask"},
    "geonp/io": {"torch"},
    "geonp/tasks": {"torch", "rasterio", "xarray", "rioxarray", "dask"},
    "geonp/evaluation/metrics.py": {"torch", "rasterio"},
    "geonp/data/gaps.py": {"torch", "rasterio"},
    "geonp/data/gap_shapes.py": {"torch", "rasterio"},
    # what a block computes and the plan it follows: arrays only, whatever reads them
    "geonp/filling/block.py": {"rasterio", "xarray", "rioxarray", "dask", "distributed"},
    "geonp/filling/plan.py": {"rasterio", "xarray", "rioxarray", "dask", "distributed"},
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def third_party_violations(root: Path, rules: dict[str, set[str]]) -> list[str]:
    """``"file imports [names]"`` for every file under ``root`` that imports a package ``rules`` bans."""
    violations = []
    for where, banned in rules.items():
        target = root / where
        files = [target] if target.is_file() else sorted(target.rglob("*.py"))
        for f in files:
            bad = _imports(f) & banned
            if bad:
                violations.append(f"{f.relative_to(root)} imports {sorted(bad)}")
    return violations


def test_layers_import_only_what_they_may():
    assert [w for w in FORBIDDEN if not (ROOT / w).exists()] == []
    assert third_party_violations(ROOT, FORBIDDEN) == []


def test_the_third_party_rule_catches_a_planted_import(tmp_path):
    for rel, text in {"geonp/tasks/tiling.py": "def f():\n    import rasterio\n",
                      "geonp/tasks/context.py": "import numpy\n",
                      "geonp/io/raster.py": "from torch import nn\n",
                      "geonp/models/tnpkr.py": "import xarray as xr\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert third_party_violations(tmp_path, FORBIDDEN) == [
        "geonp/models/tnpkr.py imports ['xarray']", "geonp/io/raster.py imports ['torch']",
        "geonp/tasks/tiling.py imports ['rasterio']"]


def test_cli_imports_no_torch_or_numerics_at_module_level():
    for f in sorted((ROOT / "cli").glob("*.py")):
        top = {n for n in ast.parse(f.read_text()).body if isinstance(n, ast.Import | ast.ImportFrom)}
        names = set()
        for node in top:
            names |= {a.name.split(".")[0] for a in node.names} if isinstance(node, ast.Import) else {node.module.split(".")[0]}
        assert not names & {"torch", "numpy", "rasterio", "xarray"}, f


def test_loading_a_model_imports_no_gdal():
    # model_files may use geonp.io's file writers, but not its raster ones (rasterio loads GDAL)
    code = ("import sys; import geonp.model_files.registry, geonp.tasks.context, geonp.tasks.lattice; "
            "import geonp.tasks.normalize; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('rasterio', 'osgeo')); "
            "assert bad == [], bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_help_and_version_do_not_import_torch():
    code = ("import sys; from geonp_cli.main import cli; import geonp; "
            "assert 'torch' not in sys.modules and 'rasterio' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run([sys.executable, "-m", "geonp_cli", "--version"], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0 and "geonp, version" in out.stdout


# --------------------------------------------------------------------------------------------
# geonp's own layers
#
# Every import counts, also those inside functions (they hide cycles from Python, not from
# readers): each file is parsed with ast and every Import/ImportFrom node anywhere in it is an
# edge from its module to the geonp module it names (``from a.b import c`` names ``a.b.c`` when
# that is a module, else ``a.b``).
#
# The layers, bottom up:
#   errors, _version, config            (no geonp imports but errors; config its own modules)
#   io, tasks, evaluation.metrics       (io: rasterio, never torch; tasks: tiles and context
#                                        geometry, pure numpy; neither imports another layer)
#   models                              (torch only: models.*, config, errors)
#   data, model_files                   (training tasks; model directories)
#   filling                             (read -> gaps -> tasks -> model -> blocks -> write)
#   batch                               (many files, each a fill)
#   training, evaluation                (training calibrates with evaluation; evaluation scores
#                                        fills and multi-date training's series)
#   geonp (the lazy public API)  <-  geonp_cli (the CLI): geonp, geonp.config, geonp.errors,
#                                    geonp._version only

PACKAGES = {"geonp": ROOT / "geonp", "geonp_cli": ROOT / "cli"}

#: Module prefix -> the geonp modules (prefixes) it may import.
ALLOWED = {
    "geonp.errors": (),
    "geonp.config": ("geonp.config", "geonp.errors"),
    "geonp.io": ("geonp.io", "geonp.errors"),
    "geonp.tasks": ("geonp.tasks", "geonp.errors"),
    "geonp.evaluation.metrics": ("geonp.errors",),
    "geonp.models": ("geonp.models", "geonp.config", "geonp.errors"),
    "geonp.data": ("geonp.data", "geonp.tasks", "geonp.io", "geonp.errors"),
    "geonp.model_files": ("geonp.model_files", "geonp.models", "geonp.io", "geonp.config",
                          "geonp.errors", "geonp._version"),
    # "geonp": the accessor ``da.geonp.fill()`` calls the public geonp.fill
    "geonp.filling": ("geonp.filling", "geonp.tasks", "geonp.data", "geonp.io", "geonp.models",
                      "geonp.model_files", "geonp.config", "geonp.errors", "geonp._version", "geonp"),
    "geonp.batch": ("geonp.batch", "geonp.filling", "geonp.io", "geonp.model_files", "geonp.config",
                    "geonp.errors", "geonp._version"),
    "geonp.training": ("geonp.training", "geonp.evaluation", "geonp.filling", "geonp.tasks", "geonp.data", "geonp.io",
                       "geonp.models", "geonp.model_files", "geonp.config", "geonp.errors",
                       "geonp._version"),
    "geonp.evaluation": ("geonp.evaluation", "geonp.training", "geonp.filling", "geonp.tasks",
                         "geonp.data", "geonp.io", "geonp.models", "geonp.model_files", "geonp.config",
                         "geonp.errors", "geonp._version", "geonp"),
    "geonp_cli": ("geonp_cli", "geonp", "geonp.config", "geonp.errors", "geonp._version"),
}


def module_files(packages: dict[str, Path]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the packages."""
    mods = {}
    for pkg, base in packages.items():
        for f in sorted(base.rglob("*.py")):
            parts = [pkg, *f.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


def import_graph(packages: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports, anywhere in its file."""
    mods = module_files(packages)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, f in mods.items():
        here = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            deps |= {r for r in map(resolve, names) if r is not None}
        graph[mod] = deps - {mod}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of two or more modules, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def _covers(allowed: str, dep: str) -> bool:
    """An allowed name covers itself and its submodules; ``geonp`` alone is the public API only."""
    return dep == allowed or (allowed != "geonp" and dep.startswith(allowed + "."))


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``"a imports b"`` for every import that ``ALLOWED`` forbids."""
    out = []
    for mod, deps in sorted(graph.items()):
        rule = next((p for p in sorted(ALLOWED, key=len, reverse=True)
                     if mod == p or mod.startswith(p + ".")), None)
        if rule is None:
            continue
        for dep in sorted(deps):
            if not any(_covers(a, dep) for a in ALLOWED[rule]):
                out.append(f"{mod} imports {dep}")
    return out


@functools.cache
def _package_graph() -> dict[str, frozenset[str]]:
    return {mod: frozenset(deps) for mod, deps in import_graph(PACKAGES).items()}


def package_graph() -> dict[str, set[str]]:
    """``import_graph(PACKAGES)``, parsed once per session (a copy: a test may plant imports in it)."""
    return {mod: set(deps) for mod, deps in _package_graph().items()}


def test_geonp_has_no_import_cycle():
    graph = package_graph()
    # imports inside functions count: the plan loads models with one (geonp.filling.plan.load_for_fill)
    assert len(graph) > 60 and "geonp.model_files.registry" in graph["geonp.filling.plan"]
    assert find_cycles(graph) == []


def test_each_layer_imports_only_the_layers_below_it():
    graph = package_graph()
    assert "geonp.config" in graph["geonp.models"]  # build_model reads ModelConfig
    assert layer_violations(graph) == []


def test_the_cli_uses_only_the_public_api():
    graph = package_graph()
    cli_deps = set().union(*(deps for mod, deps in graph.items() if mod.startswith("geonp_cli")))
    assert {d for d in cli_deps if not d.startswith("geonp_cli")} <= {
        "geonp", "geonp.config", "geonp.errors", "geonp._version"}
    import geonp

    for f in sorted((ROOT / "cli").glob("*.py")):  # every name taken from geonp is public
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "geonp":
                assert {a.name for a in node.names} <= set(geonp.__all__), f


def test_the_cycle_finder_reports_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"d", "e"}}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "__init__.py").write_text("from pkg.models.net import Net\n")
    (pkg / "models" / "net.py").write_text("class Net:\n    pass\n")
    (pkg / "models" / "files.py").write_text(
        "def load():\n    from pkg.training import checkpoint\n    return checkpoint\n")
    (pkg / "training.py").write_text("from . import models\nfrom .models import files\n")
    graph = import_graph({"pkg": pkg})
    assert graph["pkg.training"] == {"pkg.models", "pkg.models.files"}
    assert graph["pkg.models.files"] == {"pkg.training"}
    assert find_cycles(graph) == [["pkg.models.files", "pkg.training"]]
    rules = {"pkg.models": ("pkg.models",)}
    violations = [f"{m} imports {d}" for m, deps in graph.items() if m.startswith("pkg.models")
                  for d in deps if not any(d.startswith(r) for r in rules["pkg.models"])]
    assert violations == ["pkg.models.files imports pkg.training"]


def test_every_geonp_module_falls_under_a_layer_rule():
    graph = package_graph()
    unruled = [m for m in graph if m not in ("geonp", "geonp._version")
               and not any(m == p or m.startswith(p + ".") for p in ALLOWED)]
    assert unruled == []


@pytest.mark.parametrize(("module", "planted"), [
    ("geonp.models.tnpkr", "geonp.model_files.registry"),
    ("geonp.models.tnpkr", "geonp.filling.predict"),
    ("geonp.models.tnpkr", "geonp.io.raster"),
    ("geonp.models.tnpkr", "geonp.training.loop"),
    ("geonp.models.tnpkr", "geonp.batch.jobs"),
    ("geonp.io.raster", "geonp.filling.engine"),
    ("geonp.io.raster", "geonp.models.layers"),
    ("geonp.io.raster", "geonp.training.windows"),
    ("geonp.tasks.context", "geonp.filling.predict"),
    ("geonp.tasks.tiling", "geonp.training.windows"),
    ("geonp.tasks.lattice", "geonp.io.raster"),
    ("geonp.filling.engine", "geonp.batch.jobs"),
    ("geonp.filling.predict", "geonp.training.loop"),
    ("geonp.filling.raster", "geonp.evaluation.run"),
    ("geonp.batch.jobs", "geonp.training.raster"),
    ("geonp.training.windows", "geonp.batch.jobs"),
    ("geonp.evaluation.metrics", "geonp.filling.calibration"),
    ("geonp_cli.fill", "geonp.filling.raster"),
    ("geonp_cli.batch", "geonp.batch.jobs"),
])
def test_the_layer_rule_catches_an_import_from_above(module, planted):
    graph = package_graph()
    assert layer_violations({**graph, module: graph[module] | {planted}}) == [f"{module} imports {planted}"]
