#!/usr/bin/env bash
# check_debug_info.sh ARCHIVE lines|full CONFIG BUILD_TYPE
# lines (-g1): every object has line tables and function entries, and no parameter or local variable entries;
# full (-g): it has those too. Builds without debug information (Release) print SKIPPED.
set -euo pipefail
archive=$1 mode=$2 config=${3:-} build_type=${4:-}
type=${config:-$build_type}
case $type in
  RelWithDebInfo|Debug) ;;
  *) echo "SKIPPED: a $type build carries no debug information"; exit 0 ;;
esac
command -v readelf >/dev/null || { echo "FAIL: readelf not found (binutils)"; exit 1; }
info=$(readelf --debug-dump=info "$archive")
count() { grep -c "$1" <<<"$info" || true; }
subprograms=$(count DW_TAG_subprogram)
params=$(count DW_TAG_formal_parameter)
locals=$(count "DW_TAG_variable")
line_rows=$(readelf --debug-dump=decodedline "$archive" | grep -c '\.cpp ' || true)
echo "$archive ($mode): $subprograms function entries, $params parameter entries, $locals variable entries," \
     "$line_rows line-table rows"
fail=0
[[ $subprograms -gt 0 ]] || { echo "FAIL: no function entries (a backtrace would show no names)"; fail=1; }
[[ $line_rows -gt 0 ]] || { echo "FAIL: no line tables (a backtrace would show no file:line)"; fail=1; }
case $mode in
  lines) [[ $params -eq 0 ]] || { echo "FAIL: DTRAIN_DEBUG_INFO=lines, yet parameters are described (-g, not -g1)"; fail=1; } ;;
  full) [[ $params -gt 0 ]] || { echo "FAIL: DTRAIN_DEBUG_INFO=full, yet no parameter is described (not -g)"; fail=1; } ;;
  *) echo "FAIL: unknown mode '$mode'"; fail=1 ;;
esac
[[ $fail -eq 0 ]] && echo "ok"
exit $fail
