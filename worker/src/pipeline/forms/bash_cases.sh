# The test script of generated Bash: sourced after the program in the same shell (the image's
# documented test form), rendered by worker/src/pipeline/forms/bash.rs, which appends one
# `__codegen_case FUNCTION CASE TIMEOUT_MS NAME ARGS...` line per case.
#
# Each case calls the function in a subshell with its inputs as arguments (stdin /dev/null),
# under its timeout (a watchdog kills the subshell); what it printed on stdout ("output"), or its
# non-zero status (names "error" and "status N", the first line of its stderr as the message),
# or the timeout, is written as one JSON line to the report file, which the worker reads back
# and judges (forms/judge.rs) against the expected value's shape.
set +e +u +C +o pipefail 2>/dev/null

__codegen_json() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/\\r}
  s=${s//[$'\001'-$'\037']/ }
  printf '"%s"' "$s"
}

# The linter's findings about the program ($0), when the worker asked for them (the file
# exists: proto::harness::LINT_FILE); without shellcheck the file goes, so the worker says the
# warnings were not measured rather than that there were none.
if [[ -e /work/.codegen-lint ]]; then
  if [[ -x /usr/bin/shellcheck ]]; then
    /usr/bin/shellcheck --shell=bash --format=gcc -- "$0" >/work/.codegen-lint 2>&1
  else
    rm -f /work/.codegen-lint
  fi
fi

__codegen_tmp=/tmp/.codegen-case-$BASHPID
exec {__codegen_out}>"$__codegen_report"
printf '{"nonce": %s}\n' "$(__codegen_json "$__codegen_nonce")" >&"$__codegen_out"

__codegen_case() {
  local function=$1 case=$2 ms=$3 name=$4 started pid watchdog status out='' err='' line
  shift 4
  if ! declare -F -- "$name" >/dev/null; then
    printf '{"function": %s, "missing": %s}\n' "$function" \
      "$(__codegen_json "$name is not a function the code defines")" >&"$__codegen_out"
    return
  fi
  rm -f "$__codegen_tmp".*
  started=${EPOCHREALTIME/[.,]/}
  ( "$name" "$@" ) >"$__codegen_tmp.out" 2>"$__codegen_tmp.err" </dev/null &
  pid=$!
  # The watchdog: sleep, mark, kill. Its own sleep is killed when the case ends first.
  (
    exec >/dev/null 2>&1
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    : >"$__codegen_tmp.timeout"
    kill -KILL "$pid"
  ) &
  watchdog=$!
  wait "$pid"
  status=$?
  kill -KILL "$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null
  local elapsed=$(( ${EPOCHREALTIME/[.,]/} - started ))
  local ms_taken
  ms_taken=$(printf '%d.%03d' $((elapsed / 1000)) $((elapsed % 1000)))
  line="{\"function\": $function, \"case\": $case, \"ms\": $ms_taken"
  if [[ -e $__codegen_tmp.timeout ]]; then
    line+=", \"timeout\": true}"
  elif ((status != 0)); then
    IFS= read -r err <"$__codegen_tmp.err"
    line+=", \"raised\": [\"error\", \"status $status\"], \"message\": $(__codegen_json "${err:0:2000}")}"
  else
    IFS= read -r -d '' out <"$__codegen_tmp.out"
    line+=", \"output\": $(__codegen_json "${out:0:100000}")}"
  fi
  printf '%s\n' "$line" >&"$__codegen_out"
}
