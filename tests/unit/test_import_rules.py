"""The layer's import rules hold (issue 31): pyproject.toml's [tool.importlinter] contracts, run by `lint-imports`.

The contracts (docs/ARCHITECTURE.md, "Packages and what each may import"): the composition root imported only by
the HTTP edges; the layers (the edges, the root, the features, the stores, the audit trail, the base) each
importing only below it; no import circle between packages or between the modules of one. `make lint` runs the
same command; here the suite fails too, with the contract's own report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def lint_imports() -> subprocess.CompletedProcess[str]:
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run(
        [command, "--no-cache"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'layers' / 'common'}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contracts_are_kept() -> None:
    done = lint_imports()
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
