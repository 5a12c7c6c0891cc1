#!/usr/bin/env bash
# The lab tests that publish a benchmark figure rather than check a behaviour (marked `benchmark`,
# left out of scripts/test.sh): the egress pool's throughput against one path and its recovery from a
# cut upstream. Builds the default lab and deploys it with site.yml, as the lab tests do (about 10 min).
#   bash benchmarks/lab_figures.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bootstrap.sh
source scripts/bootstrap.sh
exec python -m pytest -q -p no:cacheprovider -p tests.no_skips_plugin -m benchmark tests/lab
