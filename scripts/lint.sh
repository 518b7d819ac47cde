#!/usr/bin/env bash
# gofmt, go vet and staticcheck, as CI runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l .)
[ -z "$unformatted" ] || { echo "gofmt: these files need formatting:"; echo "$unformatted"; exit 1; }
go vet ./...
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
