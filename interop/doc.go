// Package interop holds the interoperability suite of idem: the official
// Stripe SDK for Go (stripe-go v82), with its retries on, against a real
// `idem serve --error-format stripe` process in front of a fake
// Stripe-shaped upstream that never deduplicates and counts every charge
// it makes, on the memory, Redis and PostgreSQL stores.
//
// It is a module of its own so that the SDK stays out of idem's go.mod.
// Run it with scripts/test.sh, or:
//
//	cd interop && go test -race -count=1 ./...
//
// The burst scenario runs 50 goroutines of 20 calls each on every store,
// as issue 14 asks; INTEROP_BURST=GxC changes that.
package interop
