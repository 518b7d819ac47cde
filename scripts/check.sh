#!/usr/bin/env bash
# The check campaign of internal/check: every store configuration runs
# under its nemeses (real faults on servers the harness starts itself),
# and every run's history is checked (porcupine against the model of a
# key, then the effect, fence and result invariants).
#
#   scripts/check.sh short   one run of each configuration; the expected
#                            unsafe ones run until the checker finds a
#                            violation (at most 5 runs); about 2 minutes
#   scripts/check.sh long    50 runs of each (about an hour on 2 cores)
#
# It prints one line per run (its seed, operations, faults, verdict) and
# one per configuration, appended to check-out/summary.txt as well, and
# exits non-zero on any violation in a configuration the docs call safe
# (or none in an expected unsafe one). A violation's history, porcupine's
# visualization and its seed go to check-out/CONFIG-SEED/. Environment
# variables of TestCampaign (IDEM_CHECK_CONFIGS, IDEM_CHECK_SEED,
# IDEM_CHECK_RUNS) narrow or repeat a run.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-short}
case $mode in
short) timeout=10m ;;
long) timeout=5h ;;
*) echo "usage: scripts/check.sh short|long" >&2; exit 2 ;;
esac
mkdir -p check-out
IDEM_CHECK=$mode go test -count=1 -timeout "$timeout" -run '^TestCampaign$' -v ./internal/check/ 2>&1 |
  grep --line-buffered -v '^=== RUN'
