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
