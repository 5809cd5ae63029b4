"""The tests, files and commands the docs cite exist: a claim names what checks it, and
a renamed test left the docs pointing at nothing (found by a review)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CITED = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def test_every_test_the_docs_cite_exists() -> None:
    missing = []
    for doc in DOCS:
        for file, name in CITED.findall(doc.read_text()):
            path = ROOT / file
            if not path.exists():
                missing.append(f"{doc.name}: {file}")
            elif name and name not in _tests_in(path):
                missing.append(f"{doc.name}: {file}::{name}")
    assert not missing, missing


def test_every_benchmark_the_docs_run_exists() -> None:
    named = {m for doc in DOCS for m in re.findall(r"-m (benchmarks\.\w+)", doc.read_text())}
    assert named and not [m for m in named
                          if not (ROOT / (m.replace(".", "/") + ".py")).exists()], named
