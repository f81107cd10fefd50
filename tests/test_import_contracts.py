"""The architecture contracts in pyproject.toml ([tool.importlinter]) hold: the engine imports no
Django, Celery or portal, the CI client only the standard library, plain statistics no Django, and
the apps' domains are layered (sharing and schedules > history > runs > projects > accounts > stats)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    for contract in ("The engine is a plain library", "Apps are layered", "Plain statistics: no Django"):
        assert contract in result.stdout, f"the contract “{contract}” is no longer checked"


def test_the_layers_contract_catches_an_upward_import(tmp_path):
    """A runs module importing the results history breaks the layers contract (so the check can fail)."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "portal", copy / "portal", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "workers", copy / "workers", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "demo", copy / "demo", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    storage = copy / "portal" / "runs" / "results" / "storage.py"
    storage.write_text(storage.read_text() + "\nfrom portal.history import services  # noqa: E402,F401\n")
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=copy, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "portal.runs is not allowed to import portal.history" in result.stdout


def test_every_app_is_in_the_layers():
    """An app left out of the layers could import any other unchecked (how the old loop runs → metrics →
    runs went unseen): every package of portal/ is a layer, but the API's shared interface pieces."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    layered = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    packages = {f"portal.{p.parent.name}" for p in (ROOT / "portal").glob("*/__init__.py")}
    assert packages - {"portal.api"} <= layered, sorted(packages - {"portal.api"} - layered)
    # the only exceptions: imports made by the interface modules (pages, API, commands, URL maps)
    interface = {"views", "api", "management", "urls"}
    for rule in layers["ignore_imports"]:
        assert interface & set(rule.split(" -> ")[0].split(".")), f"{rule}: not an interface module"
