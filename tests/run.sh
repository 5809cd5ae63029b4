#!/usr/bin/env bash
# The project's test command: install the package with its dev tools, then lint, type-check,
# check the import contracts and run the test suite. Run from anywhere in the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e '.[dev]'
echo "== ruff";         python3 -m ruff check .
echo "== mypy";         python3 -m mypy
echo "== import contracts"; lint-imports --no-cache >/dev/null && echo "contracts kept"
echo "== pytest";       python3 -m pytest -q "$@"
