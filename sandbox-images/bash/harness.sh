# Runs a Bash program, and optionally its test, for the codegen runner (exec mode):
#
#   bash /opt/codegen/harness.sh MAIN [TEST]        (cwd /work, uid 10002, fd 3 = report)
#
# First `bash -n` on MAIN (and TEST): a syntax error is printed as bash prints it and
# reported on fd 3 as {"exception": {"type": "SyntaxError", "kind": "syntax", ...},
# "phase": "code"|"test", "test_finished": false}, exit status 1.
# Without TEST: exactly `bash MAIN` (exec'd, fd 3 closed, exit status preserved).
# With TEST: one shell ($0 = MAIN) sources MAIN, then TEST; only after both returned it
# writes {"test_finished": true} and exits with the status of the test's last command. An
# `exit` (or errexit) in either ends it early: the EXIT trap reports test_finished false
# and the phase it stopped in (a program that replaces the trap leaves no report, which
# the runner counts as not finished).
#   bash /opt/codegen/harness.sh --wait             (the same, MAIN and TEST read from fd 4)
#
# --wait: started by the runner before the request exists, while the container is idle; it
# blocks on fd 4 until the runner writes the program's path, then the test's (or an empty
# line). End of input without a path: nothing to run, exit 0. The program's syntax check
# (`bash -n`, reading it from a pipe) is started then too, and without a test the program
# runs in this shell (`source`, $0 = MAIN, no arguments, fd 3 closed, the harness's own
# names unset) instead of an exec'd `bash MAIN`: a run then costs the program alone.
# Differences from `bash MAIN`: a top-level `return` ends the program (status 0) instead of
# being an error, and BASH_SOURCE has this harness below MAIN.
waiting=
if [ "${1-}" = --wait ]; then
  waiting=1
  coproc __codegen_check { exec /bin/bash -n /dev/stdin 2>&1; }
  # Copies: bash closes a coprocess's descriptors and unsets its names once it is reaped.
  check_pid=$__codegen_check_PID
  exec {check_r}<&"${__codegen_check[0]}" {check_w}>&"${__codegen_check[1]}"
  builtin eval "exec ${__codegen_check[0]}<&- ${__codegen_check[1]}>&-"
  IFS= read -r main <&4 || exit 0
  IFS= read -r test <&4 || test=
  exec 4<&-
  [ -n "$main" ] || exit 0
else
  main=$1
  test=${2-}
fi

json_string() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//[$'\001'-$'\037']/ }
  printf '"%s"' "$s"
}

syntax_check() {
  local err
  if ! err=$(/bin/bash -n "$1" 2>&1); then
    printf '%s\n' "$err" >&2
    printf '{"exception": {"type": "SyntaxError", "module": "", "message": %s, "kind": "syntax"}, "phase": "%s", "test_finished": false}\n' \
      "$(json_string "${err%%$'\n'*}")" "$2" >&3 2>/dev/null
    exit 1
  fi
}

# MAIN's syntax, by the checker started while waiting: what `bash -n MAIN` says.
prechecked() {
  local src= err= status
  IFS= read -r -d '' src <"$main"
  builtin printf '%s' "$src" >&"$check_w"
  exec {check_w}>&-
  IFS= read -r -d '' err <&"$check_r"
  exec {check_r}<&-
  wait "$check_pid"
  status=$?
  if [ "$status" -ne 0 ]; then
    err=${err//\/dev\/stdin:/$main:}
    err=${err%$'\n'}
    printf '%s\n' "$err" >&2
    printf '{"exception": {"type": "SyntaxError", "module": "", "message": %s, "kind": "syntax"}, "phase": "code", "test_finished": false}\n' \
      "$(json_string "${err%%$'\n'*}")" >&3 2>/dev/null
    exit 1
  fi
}

if [ -n "$waiting" ]; then
  prechecked
  if [ -z "$test" ]; then
    exec 3>&-
    BASH_ARGV0=$main
    unset -v main test waiting check_pid check_r check_w
    unset -f json_string syntax_check prechecked
    set --
    builtin source "$0"
    builtin exit
  fi
else
  syntax_check "$main" code
fi
if [ -z "$test" ]; then
  exec 3>&-
  exec /bin/bash "$main"
fi
syntax_check "$test" test

# The report fd moves above 9: programs use 3..9 for their own redirections.
# shellcheck disable=SC2016  # expanded by the program's shell
exec /bin/bash -c '
exec {__codegen_fd}>&3 3>&-
__codegen_phase=code
builtin trap '\''[[ $__codegen_phase == done ]] || builtin printf "{\"test_finished\": false, \"phase\": \"%s\"}\n" "$__codegen_phase" >&"$__codegen_fd" 2>/dev/null'\'' EXIT
builtin source '"$(printf '%q' "$main")"'
__codegen_phase=test
builtin source '"$(printf '%q' "$test")"'
__codegen_status=$?
__codegen_phase=done
builtin printf "{\"test_finished\": true}\n" >&"$__codegen_fd" 2>/dev/null
builtin exit "$__codegen_status"
' "$main"
