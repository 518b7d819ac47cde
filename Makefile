.PHONY: help test lint bench fmt

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

test: ## run every test against real Redis and PostgreSQL (starts them when down)
	scripts/test.sh

lint: ## gofmt, go vet and staticcheck
	scripts/lint.sh

bench: ## the benchmarks, with ratios against the naive lock and the bare handler
	scripts/services.sh
	go test -run '^$$' -bench . -benchmem ./...

fmt: ## format the code
	gofmt -w .
