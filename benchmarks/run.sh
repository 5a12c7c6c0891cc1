#!/usr/bin/env bash
# Run the benchmark (untuned vs tuned on the ocean lab) from a fresh clone, as root:
#   bash benchmarks/run.sh [--smoke] [--reps N] [--duration S] [--publish]
# Sources scripts/bootstrap.sh first (packages, .venv, collection link, lab image).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bootstrap.sh
source scripts/bootstrap.sh
exec python benchmarks/run.py "$@"
