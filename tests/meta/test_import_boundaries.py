import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "geonp/models": {"rasterio", "xarray", "rioxarray", "click", "dask"},
    "geonp/io": {"torch"},
    "geonp/tiling.py": {"torch", "rasterio", "xarray"},
    "geonp/normalize.py": {"torch", "rasterio"},
    "geonp/metrics.py": {"torch", "rasterio"},
    "geonp/data/gaps.py": {"torch", "rasterio"},
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_layers_import_only_what_they_may():
    violations = []
    for where, banned in FORBIDDEN.items():
        target = ROOT / where
        files = [target] if target.is_file() else sorted(target.rglob("*.py"))
        assert files, where
        for f in files:
            bad = _imports(f) & banned
            if bad:
                violations.append(f"{f.relative_to(ROOT)} imports {sorted(bad)}")
    assert violations == []


def test_cli_imports_no_torch_or_numerics_at_module_level():
    for f in sorted((ROOT / "cli").glob("*.py")):
        top = {n for n in ast.parse(f.read_text()).body if isinstance(n, ast.Import | ast.ImportFrom)}
        names = set()
        for node in top:
            names |= {a.name.split(".")[0] for a in node.names} if isinstance(node, ast.Import) else {node.module.split(".")[0]}
        assert not names & {"torch", "numpy", "rasterio", "xarray"}, f


def test_help_and_version_do_not_import_torch():
    code = ("import sys; from geonp_cli.main import cli; import geonp; "
            "assert 'torch' not in sys.modules and 'rasterio' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run([sys.executable, "-m", "geonp_cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "geonp, version" in out.stdout
