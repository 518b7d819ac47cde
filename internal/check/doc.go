// Package check checks idem the way databases are checked: clients run
// the real engine against the real stores while a nemesis injects real
// faults; every store call is recorded with its call and return times and
// its outcome (ok, a refusal, or info: the client never learned what
// happened); then a checker decides whether some order of the state
// machine of docs/state-machine.md explains the history.
//
// # The model
//
// Model is a porcupine model of one key, partitioned by key: ABSENT,
// PROCESSING(owner, fence), COMPLETED(result, fence), UNKNOWN(fence,
// reason, claim). It is nondeterministic where the real system is: a lease
// or a claim may end at any time after its earliest end (the call that
// granted it plus its length), and an operation whose outcome the client
// did not learn takes every step it could have taken, or none, at any time
// after its call.
//
// # The invariants
//
// Checked on the same history, because linearizability does not state
// them by itself: the side effect (a Ledger outside idem, fenced by key)
// ran at most once per key unless an operator deleted the key between two
// effects; the fences of a key strictly increase in real time; every result
// handed to a client for a key is one of the key's effects, and they are
// all the same bytes (again unless a delete came between).
//
// # Runs
//
// TestCampaign (internal/check, IDEM_CHECK=short or long; make check-short,
// make check) runs every store configuration under its nemeses, each run
// reproducible from its printed seed; a violation writes the history,
// porcupine's visualization and the seed to check-out/.
// docs/checking.md has the figures, and the mutations of the real
// code that the harness catches (scripts/mutate.sh).
package check
