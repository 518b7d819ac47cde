#!/usr/bin/env bash
# gofmt, go vet and staticcheck, as CI runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l .)
[ -z "$unformatted" ] || { echo "gofmt: these files need formatting:"; echo "$unformatted"; exit 1; }
go vet ./...
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
# The nested modules (examples, interop suites) keep their own go.mod.
for mod in $(find . -mindepth 2 -name go.mod -not -path './.git/*' | sort); do
  dir=$(dirname "$mod")
  (cd "$dir" && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...)
done
