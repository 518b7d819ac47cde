#!/bin/sh
# api-renames.sh redoes the renames of branch api (issue 34: the API) with
# sed-like rewrites, so that a branch written against the old names can be
# brought to the new ones after a merge conflict or a rebase:
#
#   sh changes/api-renames.sh            # every step, in order
#   sh changes/api-renames.sh request    # one step (names below)
#
# Run it from the repository root on a clean tree, then `gofmt -w`, build
# and vet every module (grep for go.mod files), and read the diff: it
# rewrites code, tests and Markdown (never CHANGELOG.md or changes/). It
# only renames; the files the branch added (types.go) and the doc comments
# it rewrote come with the merge. The branch made each rename with gopls
# (type-checked); this script is the plain-text fallback, and was checked to
# give the same Go code as gopls on the branch's base.
set -eu

# files: the tracked Go and Markdown files holding the regexp $1.
files() {
	git grep -lP "$1" -- '*.go' '*.md' ':!CHANGELOG.md' ':!changes/' || true
}

# rootfiles: the tracked Go files of package idem (and idem_test) holding $1.
rootfiles() {
	git grep -lP "$1" -- '*.go' ':!*/*' || true
}

# sub REGEXP REPLACEMENT FILES...: a Perl substitution on every line.
sub() {
	re=$1 to=$2
	shift 2
	[ $# -eq 0 ] || RE=$re TO=$to perl -pi -e 's/$ENV{RE}/qq{"$ENV{TO}"}/gee' "$@"
}

# subcode: as sub, on code lines only (not // comments).
subcode() {
	re=$1 to=$2
	shift 2
	[ $# -eq 0 ] || RE=$re TO=$to perl -pi -e 's/$ENV{RE}/qq{"$ENV{TO}"}/gee unless m{^\s*//}' "$@"
}

# dropimport: in the Go files given that no longer name package store,
# its import is removed, or becomes package idem's where that is missing.
dropimport() {
	for f in "$@"; do
		code=$(grep -v '^\s*//' "$f")
		echo "$code" | grep -q '\bstore\.' && continue
		if ! grep -q '^package idem$' "$f" && echo "$code" | grep -q '\bidem\.' &&
			! grep -q '^\s*"github.com/idemkit/idem"$' "$f"; then
			sed -i 's|^\(\s*\)"github.com/idemkit/idem/store"$|\1"github.com/idemkit/idem"|' "$f"
		else
			sed -i '/^\s*"github.com\/idemkit\/idem\/store"$/d' "$f"
		fi
	done
}

# aliases: idem.ID, Result, Record, State (and its StateProcessing,
# StateCompleted, StateUnknown, StateExpired), ListParams, ListPage and
# Store (types.go, aliases of package store's types) in place of the store
# names, in package idem, its tests and the application-facing code.
step_aliases() {
	re='\bstore\.(ID|Result|Record|State|ListParams|ListPage|StateProcessing|StateCompleted|StateUnknown|StateExpired)\b'
	for f in $(rootfiles "$re"); do
		case $f in
		*_test.go) grep -q '^package idem$' "$f" && sub "$re" '$1' "$f" || sub "$re" 'idem.$1' "$f" ;;
		types.go | doc.go) continue ;; # they name package store on purpose
		*) sub "$re" '$1' "$f" ;;
		esac
		dropimport "$f"
	done
	sub '^func New\(s store\.Store,' 'func New(s Store,' engine.go
	for f in idemgrpc/result.go examples/natsconsumer/ledger.go; do
		[ -f "$f" ] && sub '\bstore\.(Result|Record)\b' 'idem.$1' "$f" && dropimport "$f"
	done
	sub '\(store\.Record\.Reason\)' '(idem.Record.Reason)' $(files '\(store\.Record\.Reason\)')
}

# request: type idem.Key is idem.Request (its fields stay: idem.Request{Key: ...}).
step_request() {
	subcode '(?<![.\w-])Key\b(?!\s*:)(?!\s+string)(?!-)' 'Request' $(rootfiles '\bKey\b')
	sub '\bidem\.Key\b' 'idem.Request' $(files '\bidem\.Key\b')
}

# outcomeerror: type idem.UnknownError is idem.OutcomeUnknownError, as
# idemclient's and idemgrpc's are, beside ErrOutcomeUnknown and
# OutcomeUnknown (an "unknown error" read as an error nobody knew). The
# table of Do's documentation (do.go) needs its columns re-aligned by hand.
step_outcomeerror() {
	subcode '(?<![\w.])UnknownError\b' 'OutcomeUnknownError' $(rootfiles '\bUnknownError\b')
	sub '\bidem\.UnknownError\b' 'idem.OutcomeUnknownError' $(files '\bidem\.UnknownError\b')
}

# reconcileall: Engine.ReconcileUnknown is Engine.ReconcileAll: beside
# Reconcile (one key, now) and Resolve (an operator's answer), the name says
# it sweeps every UNKNOWN key. Tests named after it follow.
step_reconcileall() {
	sub 'ReconcileUnknown' 'ReconcileAll' $(files 'ReconcileUnknown')
}

# keyunknown: idemhttp.OutcomeUnknown (the outcome of a request whose key is
# UNKNOWN) is idemhttp.OutcomeKeyUnknown, beside OutcomeMarkedUnknown (the
# handler ran and marked it so), no longer a constant with the name of the
# func idem.OutcomeUnknown. Its metric label stays "unknown".
step_keyunknown() {
	sub '(?<![\w.])OutcomeUnknown\b' 'OutcomeKeyUnknown' $(git grep -lP '(?<![\w.])OutcomeUnknown\b' -- 'idemhttp/*.go')
	sub '\bidemhttp\.OutcomeUnknown\b' 'idemhttp.OutcomeKeyUnknown' $(files '\bidemhttp\.OutcomeUnknown\b')
}

# stripeconsts: idemhttp's StripeTypeIdempotency, StripeTypeInvalidRequest,
# StripeTypeAPI and StripeLockTimeout are unexported; outside idemhttp, a
# client names them as stripe-go does (stripe.ErrorTypeIdempotency,
# stripe.ErrorCodeLockTimeout) or by their values.
step_stripeconsts() {
	for n in TypeIdempotency TypeInvalidRequest TypeAPI LockTimeout; do
		sub "(?<![\\w.])Stripe$n\\b" "stripe$n" $(git grep -lP "(?<![\\w.])Stripe$n\\b" -- 'idemhttp/*.go' ':!idemhttp/*_test.go')
	done
	sub '\bidemhttp\.StripeLockTimeout\b' '\"lock_timeout\"' $(files '\bidemhttp\.StripeLockTimeout\b')
	sub '\bidemhttp\.StripeType(Idempotency|InvalidRequest|API)\b' 'string(stripe.ErrorType$1)' $(files '\bidemhttp\.StripeType')
}

# flush: Engine.Flush, deprecated for Shutdown, is gone.
step_flush() {
	for f in $(git grep -lP '\.Flush\(' -- '*.go' '*.md' ':!CHANGELOG.md' ':!changes/'); do
		grep -q 'idemkit/idem"' "$f" && echo "api-renames: $f calls a Flush: if it is an engine's, it is Shutdown now"
	done
	return 0
}

steps="aliases request outcomeerror reconcileall keyunknown stripeconsts flush"
[ $# -gt 0 ] && steps="$*"
for s in $steps; do
	echo "api-renames: $s"
	"step_$s"
done
