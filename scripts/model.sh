#!/usr/bin/env bash
# Checks model/idem.pml, the protocol of one key in Promela, with spin: an
# exhaustive search of every interleaving of three workers, an operator
# and the clock for a state that breaks an assertion (the properties are
# in the model's header). Compiles spin's verifier (pan) with COLLAPSE
# compression and a memory bound, in a temporary directory; exits non-zero
# on a violation (printing spin's trail) or on a search that did not
# complete. Installs spin with apt-get (as root) when it is missing.
#   scripts/model.sh            the model: one line of figures
#   scripts/model.sh mutants    each mutant of the model (below) must be caught
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
MEMLIM=${IDEM_MODEL_MEMLIM:-1024} # MB; the model needs about a third of it

if ! command -v spin >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "model: spin is not installed and this is not root: apt-get install spin" >&2
    exit 1
  fi
  echo "model: apt-get install spin (the Promela model checker)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq spin >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq spin >/dev/null; }
fi
command -v cc >/dev/null || { echo "model: spin's verifier needs a C compiler (cc)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/tally.sh
. scripts/tally.sh

# verify DIR: builds and runs pan on DIR/idem.pml; pan's report in DIR/pan.out.
verify() {
  (cd "$1" && spin -a idem.pml >/dev/null &&
    cc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM="$MEMLIM" -o pan pan.c &&
    ./pan -m100000 >pan.out 2>&1) || true
}
# field DIR PATTERN: the number in front of PATTERN in pan's report.
field() { grep -E "$2" "$1/pan.out" | head -1 | awk '{print $1}'; }

# Each mutant: its name, then a sed script for the model's line marked MUT(name).
mutants=(
  'complete-without-owner-check|s/&& owner == tok && fence == f ->/->/'
  'release-without-owner-check|s/:: owner == tok && fence == f \&\&/:: true \&\&/'
  'release-instead-of-unknown|s/-> out = O_UNK/-> out = O_STOP/'
  'release-after-failed-takeover|s/:: p != 0 -> goto unknown/:: p != 0 -> skip/'
  'takeover-keeps-fence|s/fence = lastfence; /if :: st != PROC -> fence = lastfence :: else -> skip fi; /'
  'takeover-without-dedup|s/:: p != 0 ->/:: false ->/'
  'release-drops-fence-counter|s/ok = true /ok = true; lastfence = 0 /'
  'resolve-overwrites-completed|s/(st == UNK || (st == PROC \&\& expired)) \&\&/(st == UNK || st == COMP || (st == PROC \&\& expired)) \&\&/'
  'resolve-without-fence-check|s/fence == cf \&\&/true \&\&/'
  'lookup-by-key-alone|s/#define LOOKUP_FLOOR delfence/#define LOOKUP_FLOOR 0/'
)

if [ "${1:-}" != mutants ]; then
  mkdir "$tmp/model"
  cp model/idem.pml "$tmp/model/"
  start=$SECONDS
  verify "$tmp/model"
  out=$tmp/model/pan.out
  if grep -q 'errors: 0' "$out" && ! grep -qE 'Search not completed|max search depth too small|out of memory' "$out"; then
    depth=$(grep -o 'depth reached [0-9]*' "$out" | awk '{print $3}')
    mem=$(grep 'total actual memory usage' "$out" | awk '{print $1}')
    echo "model: no violation in $(field "$tmp/model" 'states, stored') states," \
      "$(field "$tmp/model" 'transitions') transitions, depth $depth, ${mem} MB, $((SECONDS - start))s (model/idem.pml, spin $(spin -V | awk '{print $3}'))"
    exit 0
  fi
  echo "model: FAILED: spin's report:" >&2
  grep -v '^Depth=' "$out" >&2
  if [ -f "$tmp/model/idem.pml.trail" ]; then
    echo "model: the trail (spin -t -p):" >&2
    (cd "$tmp/model" && spin -t -p -g idem.pml | grep -v '^\s*$' | tail -n 80) >&2
  fi
  exit 1
fi

for m in "${mutants[@]}"; do
  name=${m%%|*}
  expr=${m#*|}
  d=$tmp/$name
  mkdir "$d"
  grep -n "MUT($name)" model/idem.pml | cut -d: -f1 | while read -r line; do echo "${line}${expr}"; done >"$d/sed"
  sed -f "$d/sed" model/idem.pml >"$d/idem.pml"
  if cmp -s model/idem.pml "$d/idem.pml"; then
    mutant_missed model "$name" "its sed script changed nothing"
    continue
  fi
  verify "$d"
  what=$(grep -m1 -oE 'assertion violated .*\(at depth [0-9]+\)|invalid end state \(at depth [0-9]+\)' "$d/pan.out" || true)
  if [ -n "$what" ]; then
    mutant_caught model "$name" "$what"
  else
    mutant_missed model "$name" "$(grep -E 'errors:|not completed' "$d/pan.out" | tr '\n' ' ')"
  fi
done
mutants_verdict model ${#mutants[@]} mutants
