# Sourced by the scripts that run THERE under a time budget, after they set
# BUDGET (seconds) and, for note, SUMMARY (a file). Gives:
#   START        when the script started (now)
#   left         seconds of the budget left
#   cap S [M]    S, or what is left less a margin M (default 5) if that is less; at least 1
#   note TEXT    TEXT to stdout and appended to $SUMMARY
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
cap() {
  local margin=${2:-5} l
  l=$(( $(left) - margin ))
  [ "$1" -lt "$l" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}
note() { echo "$*" | tee -a "$SUMMARY"; }
