#!/usr/bin/env bash
# The test command of idem: starts (or installs) Redis and PostgreSQL when
# they are not reachable, then vets and runs every test with the race
# detector against the real servers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
go vet ./...
go test -race -count=1 -timeout 15m ./... "$@"
