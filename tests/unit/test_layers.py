"""The layer rules hold: import-linter's contracts (pyproject.toml) and no import of another package's private names."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint, "import-linter is not installed (the dev extra)"
    proc = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_module_imports_another_packages_private_names():
    offences = []
    for path in sorted((ROOT / "hygraph").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hygraph"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.endswith("__")]
                if private and _package(node.module) != _package(module):
                    offences.append(f"{module} imports {', '.join(private)} from {node.module}")
    assert not offences, "\n".join(offences)
