#!/usr/bin/env bash
# Checks that the harness of internal/check can fail: each patch in
# internal/check/mutations breaks the real code on purpose (its header
# names the configuration to run and what it breaks). For each, the
# committed tree is copied to a temporary directory, the patch applied,
# and the configuration run (IDEM_CHECK_EXPECT=violation: up to
# IDEM_MUTATE_RUNS runs, default 10, stopping at the first violation). A
# mutation the checker does not catch fails the script. It prints one line
# per mutation: caught or not, the run (seed) that caught it and the
# violations found; the histories go to check-out/mutations/NAME/.
#   scripts/mutate.sh [NAME ...]   only these mutations
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
runs=${IDEM_MUTATE_RUNS:-10}
out=$root/check-out/mutations
mkdir -p "$out"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for p in internal/check/mutations/*.patch; do names+=("$(basename "$p" .patch)"); done
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/tally.sh
. scripts/tally.sh
for name in "${names[@]}"; do
  patch=$root/internal/check/mutations/$name.patch
  config=$(sed -n 's/^# config: //p' "$patch")
  what=$(sed -n 's/^# what: //p' "$patch")
  tree=$tmp/$name
  mkdir -p "$tree"
  git archive HEAD | tar -x -C "$tree"
  (cd "$tree" && git apply "$patch")
  rm -rf "${out:?}/$name"
  log=$out/$name.log
  set +e
  (cd "$tree" && IDEM_CHECK=short IDEM_CHECK_CONFIGS=$config IDEM_CHECK_RUNS=$runs IDEM_CHECK_EXPECT=violation \
    IDEM_CHECK_OUT=$out/$name go test -count=1 -timeout 15m -run '^TestCampaign$' -v ./internal/check/) >"$log" 2>&1
  rc=$?
  set -e
  caught=$(ls "$out/$name" 2>/dev/null | grep -v -e summary -e inconclusive | head -1 || true)
  if [ $rc -eq 0 ] && [ -n "$caught" ]; then
    kinds=$(cut -d' ' -f1 "$out/$name/$caught/violations.txt" | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
    mutant_caught mutate "$name" "$config, run $caught: $kinds"
  else
    mutant_missed mutate "$name" "$config: $what; see $log"
  fi
done
mutants_verdict mutate ${#names[@]} mutations
