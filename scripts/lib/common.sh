# shellcheck shell=bash
# shellcheck disable=SC2153 # STATE, ROOT, LOGS come from scripts/cluster
# Shared helpers for scripts/cluster: output, pid files, process checks,
# port and HTTP probes. Sourced, never executed; expects $STATE to be set.

say() { printf '%s\n' "$*"; }
warn() { printf '%s\n' "$*" >&2; }
die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Path relative to the repo root, for short messages.
rel() { printf '%s' "${1#"$ROOT"/}"; }

now() { printf '%s' "$EPOCHREALTIME"; }
# elapsed START -> "1.2s"
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }

# Print the last lines of a log file, indented, to stderr.
log_tail() {
  local file=$1 lines=${2:-20}
  if [[ -s $file ]]; then
    warn "--- last $lines lines of $(rel "$file") ---"
    tail -n "$lines" "$file" | sed 's/^/  /' >&2
  else
    warn "--- $(rel "$file") is empty or missing ---"
  fi
}

# ---------------------------------------------------------------- processes

# pid_alive PID: the process exists and is not a zombie.
pid_alive() {
  local pid=$1 state
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  state=$(awk '/^State:/ { print $2; exit }' "/proc/$pid/status" 2>/dev/null) || return 1
  [[ -n $state && $state != Z && $state != X ]]
}

pid_cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null; }

# pid_matches PID WORD...: alive and its command line contains every WORD;
# a WORD of the form cwd=DIR instead requires the working directory DIR.
pid_matches() {
  local pid=$1 cmd word
  shift
  pid_alive "$pid" || return 1
  cmd=" $(pid_cmdline "$pid") "
  for word in "$@"; do
    if [[ $word == cwd=* ]]; then
      [[ $(readlink "/proc/$pid/cwd" 2>/dev/null) == "${word#cwd=}" ]] || return 1
    else
      [[ $cmd == *"$word"* ]] || return 1
    fi
  done
}

pidfile() { printf '%s/pids/%s.pid' "$STATE" "$1"; }
infofile() { printf '%s/pids/%s.info' "$STATE" "$1"; }

# read_pidfile NAME: print the recorded pid (or nothing).
read_pidfile() {
  local f
  f=$(pidfile "$1")
  [[ -f $f ]] || return 1
  local pid
  pid=$(head -n 1 "$f" 2>/dev/null | tr -dc '0-9')
  [[ -n $pid ]] || return 1
  printf '%s' "$pid"
}

# running_pid NAME WORD...: print the pid recorded for NAME if that process
# still runs and its command line contains every WORD. A pid file that points
# at a dead or different process is stale and removed.
running_pid() {
  local name=$1 pid
  shift
  pid=$(read_pidfile "$name") || return 1
  if pid_matches "$pid" "$@"; then
    printf '%s' "$pid"
    return 0
  fi
  rm -f "$(pidfile "$name")" "$(infofile "$name")"
  return 1
}

# info_get NAME KEY: value recorded at start (key=value lines).
info_get() {
  local f
  f=$(infofile "$1")
  [[ -f $f ]] || return 0
  sed -n "s/^$2=//p" "$f" | head -n 1
}

# wait_exit TIMEOUT PID...: wait until all PIDs are gone; print the ones left.
wait_exit() {
  local timeout=$1 deadline pid left
  shift
  deadline=$((SECONDS + timeout))
  while :; do
    left=()
    for pid in "$@"; do
      pid_alive "$pid" && left+=("$pid")
    done
    ((${#left[@]} == 0)) && return 0
    ((SECONDS >= deadline)) && break
    sleep 0.2
  done
  printf '%s\n' "${left[@]}"
}

# stop_pids TIMEOUT NAME=PID...: SIGTERM all, wait up to TIMEOUT seconds,
# then SIGKILL what is left. Removes the pid files. Reports per process.
stop_pids() {
  local timeout=$1 item name pid t0 left
  shift
  (($# == 0)) && return 0
  t0=$(now)
  local -a pids=()
  for item in "$@"; do
    pid=${item#*=}
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
  done
  left=$(wait_exit "$timeout" "${pids[@]}")
  for item in "$@"; do
    name=${item%%=*}
    pid=${item#*=}
    if grep -qx "$pid" <<<"$left"; then
      kill -KILL "$pid" 2>/dev/null || true
      say "killed $name (pid $pid): no exit ${timeout}s after sigterm"
    else
      say "stopped $name (pid $pid) in $(elapsed "$t0")"
    fi
    rm -f "$(pidfile "$name")" "$(infofile "$name")"
  done
  # shellcheck disable=SC2086
  [[ -z $left ]] || wait_exit 5 $left >/dev/null || true
}

# ---------------------------------------------------------------- network

# port_open HOST PORT: something accepts TCP connections there.
port_open() {
  # shellcheck disable=SC2016
  timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# wait_port HOST PORT TIMEOUT
wait_port() {
  local deadline=$((SECONDS + $3))
  until port_open "$1" "$2"; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.1
  done
}

# http_get URL BODYFILE: print the HTTP status (000 when no answer).
http_get() {
  local code
  code=$(curl -s -o "$2" -w '%{http_code}' --max-time 2 "$1" 2>/dev/null) || true
  printf '%s' "${code:-000}"
}

# amqp_answers HOST PORT: the server answers an AMQP 0-9-1 protocol header
# with a frame (Connection.Start starts with frame type 1).
amqp_answers() {
  local first
  # shellcheck disable=SC2016
  first=$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf "AMQP\x00\x00\x09\x01" >&3
    head -c 1 <&3' _ "$1" "$2" 2>/dev/null | od -An -tx1 | tr -d ' \n') || true
  [[ $first == 01 ]]
}

redis_answers() {
  [[ $(timeout 3 redis-cli -h "$1" -p "$2" ping 2>/dev/null) == PONG ]]
}
