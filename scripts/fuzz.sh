#!/usr/bin/env bash
# Runs every fuzz target of the module for a short time each (default 3s;
# FUZZTIME=1m scripts/fuzz.sh for longer). Plain `go test` already runs their
# seed corpora; this explores beyond them.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  dir=$(dirname "$file")
  for name in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
    echo "fuzz: $dir $name ($fuzztime)"
    # Quiet while it passes; on a failure, the fuzzer's report (the input,
    # and the file under testdata/fuzz it was saved to) is what CI shows.
    if ! out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" 2>&1); then
      printf '%s\n' "$out" | tail -40
      exit 1
    fi
  done
done
