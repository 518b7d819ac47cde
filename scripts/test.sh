#!/usr/bin/env bash
# The test command of idem: starts (or installs) Redis and PostgreSQL when
# they are not reachable (scripts/services.sh), then vets and runs every
# test with the race detector against the real servers. It prints one line
# per phase, and go test's line per package as each one finishes.
# Arguments go to go test (scripts/test.sh -run TestBurst, for example).
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
phase() { echo "test.sh: [$((SECONDS - start))s] $*"; }

phase "servers, go vet, then go test -race on every package; the whole run usually takes 6-8 min on 2 cores (plus about a minute of apt-get installs on a fresh machine)"
scripts/services.sh
phase "go vet ./..."
go vet ./...
packages=$(go list ./... | wc -l)
phase "go test -race -count=1 ./... ($packages packages, printed in package order as they finish: 'ok  <package>  <time>'; the slowest take 1-3 min)"
go test -race -count=1 -timeout 15m ./... "$@"
phase "every test passed"
