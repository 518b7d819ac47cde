# Sourced, not run, by scripts/model.sh and scripts/mutate.sh: the tally of
# a campaign of mutants that must each be caught. Each call names the
# campaign first (model, mutate); mutants_verdict exits 1 when one was missed.
#   mutant_caught CAMPAIGN NAME WHAT     a mutant caught, and by what
#   mutant_missed CAMPAIGN NAME WHY      a mutant not caught (counted)
#   mutants_verdict CAMPAIGN TOTAL KIND  the last line: all caught, or how
#                                        many not (then exit 1)
mutants_missed=0
mutant_caught() { echo "$1: CAUGHT $2: $3"; }
mutant_missed() {
  echo "$1: MISSED $2: $3" >&2
  mutants_missed=$((mutants_missed + 1))
}
mutants_verdict() {
  if [ "$mutants_missed" -gt 0 ]; then
    echo "$1: $mutants_missed of $2 $3 not caught" >&2
    exit 1
  fi
  echo "$1: all $2 $3 caught"
}
