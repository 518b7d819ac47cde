.PHONY: help test lint fuzz bench bench-gateway curve lab soak demo test-topology systemd-check fresh-debian screenshots image check check-short mutate model model-mutants

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

test: ## every test against real Redis and PostgreSQL (starts them when down)
	scripts/test.sh

lint: ## gofmt, go vet and staticcheck
	scripts/lint.sh

fuzz: ## every fuzz target for FUZZTIME (default 3s) each
	scripts/fuzz.sh

bench: ## the Go benchmarks, with ratios against the naive lock and the bare handler
	scripts/services.sh
	go test -run '^$$' -bench . -benchmem ./...

bench-gateway: ## idem serve against a pooled bare Go proxy and the naive SET NX EX gateway, each a process, 1/32/128 clients, 3 runs of 3 rounds (docs/benchmarks.md)
	scripts/services.sh
	for run in 1 2 3; do go run ./bench/gateway -clients 1,32,128 -rounds 3 -duration 3s || exit 1; done

curve: ## the cost curve: cycles/s by concurrency and stored records, CSV and SVG charts in docs/curve (docs/cost-curve.md)
	scripts/services.sh
	go run ./bench/curve -out docs/curve

lab: ## the breach lab, one short run of every scenario, printed as a table
	scripts/services.sh
	go run ./cmd/idem lab

soak: ## the breach lab's long version
	scripts/services.sh
	go run ./cmd/idem lab --long

demo: ## the gateway in front of a toy payment API, under a burst of duplicates
	go run ./cmd/idem demo

test-topology: ## the long multi-node Redis tests (cluster resharding, Sentinel failovers)
	scripts/services.sh
	IDEM_TEST_TOPOLOGY=long go test -race -count=1 -timeout 20m -run 'TestCluster|TestSentinel' ./store/redisstore/

systemd-check: ## boot deploy/systemd/idem.service in a systemd-nspawn container: start, reload, stop (root; first run ~3 min)
	scripts/systemd-check.sh

fresh-debian: ## the README's two commands on a fresh Debian with only Go, in namespaces (root; about an hour on 2 busy cores; times at the end)
	scripts/fresh-debian.sh

image: ## the OCI image of idem in idem-oci/ (an OCI layout), built without a container daemon (deploy/image)
	cd deploy/image && go run . --out ../../idem-oci

screenshots: ## the console's screenshots in docs/console, taken by its browser test in headless Chromium
	cd internal/console/browsertest && IDEM_SCREENSHOTS=1 go test -count=1 ./...
check-short: ## the check campaign, short: one run of every store configuration under its nemeses, and of each of the product check's three profiles (about 3 min; non-zero on a violation)
	scripts/check.sh short

check: ## the check campaign, long: 50 runs of every store configuration (about an hour); figures in check-out/summary.txt
	nice scripts/check.sh long

mutate: ## apply each mutation of internal/check/mutations to a copy of the tree and check that the harness catches it
	scripts/mutate.sh

model: ## spin checks model/idem.pml, the protocol of a key with three workers, an operator and the clock, exhaustively (about 20 s)
	scripts/model.sh

model-mutants: ## each deliberate mutation of the model (scripts/model.sh) must be caught by spin
	scripts/model.sh mutants
