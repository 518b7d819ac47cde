#!/usr/bin/env bash
# The test command of idem: starts (or installs) Redis, PostgreSQL and NATS when
# they are not reachable (scripts/services.sh), then vets and runs every
# test with the race detector against the real servers. It prints one line
# per phase, and go test's line per package as each one finishes.
# Arguments go to go test (scripts/test.sh -run TestBurst, for example).
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
phase() { echo "test.sh: [$((SECONDS - start))s] $*"; }

phase "servers, go vet, then go test -race on every package; the whole run takes about 10 min with both of 2 cores busy (2 of them the check campaign); the first also compiles every package with -race (about 5 min more), and a fresh machine adds about a minute of apt-get installs"
scripts/services.sh
phase "go vet ./..."
go vet ./...
packages=$(go list ./... | wc -l)
phase "go test -race -count=1 ./... ($packages packages, printed in package order as they finish: 'ok  <package>  <time>'; the slowest: store/redisstore about 2 min, cmd/idem and internal/lab just over a minute each)"
# -parallel 8: most of the suite's time is tests waiting on real time (a
# TTL to end, a Sentinel election, a drain delay), each on its own servers
# and keys; go test's default, one per core, queued them behind each other.
go test -race -count=1 -parallel 8 -timeout 15m ./... "$@"
phase "scripts/model.sh (make model): spin checks the protocol's model (model/idem.pml) exhaustively for a double effect, a fence that does not increase or a replay that differs (about 20 s; apt-get installs spin where missing)"
scripts/model.sh
phase "scripts/check.sh short (make check-short): every store configuration under real faults, each history checked for linearizability and the effect, fence and replay invariants, and three runs of the product check (about 3 min; check-out/ gets the history of a violation)"
scripts/check.sh short
phase "examples/natsconsumer, its own module: go vet, then its fault test on NATS JetStream (about 20 s)"
(cd examples/natsconsumer && go vet ./... && go test -race -count=1 -timeout 5m ./...)
phase "interop: stripe-go against idem serve on memory, Redis and PostgreSQL (its own module, about 30s)"
(cd interop && go vet ./... && go test -race -count=1 -timeout 5m ./...)
phase "the operator's console in headless Chromium, driven by chromedp (internal/console/browsertest, its own module, about 30s)"
(cd internal/console/browsertest && go vet ./... && go test -race -count=1 -timeout 5m ./...)
phase "deploy/image and deploy/helm/charttest, their own modules: the OCI image built and inspected, the Helm chart linted and rendered by helm's packages (about 1 min; the first compiles helm, about 5 min more)"
# One command a line: set -e does not stop at a failure in front of &&.
(cd deploy/image && go vet ./... && go test -count=1 -timeout 10m ./...)
(cd deploy/helm/charttest && go vet ./... && go test -count=1 -timeout 10m ./...)
phase "every test passed"
