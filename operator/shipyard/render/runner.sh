#!/bin/sh
# Shipyard's in-pod phase runner (POSIX sh; works with busybox and dash).
#
# The operator never holds a connection for the length of a phase. It uploads a phase and starts
# it with one short exec (`launch`); this runner supervises it detached, enforces its timeout by
# killing the whole process group, and records the exit code and times in files. The pod's
# readiness probe (`ready`) is false while a phase runs, so the kubelet does the polling and the
# operator's pod watch wakes it when the phase ends; it then reads the result (`result`).
#
# Phase directory /shipyard/phases/ID (uploaded as a tar by `launch`):
#   spec      shell assignments: USER_NAME, TIMEOUT (seconds, empty = none), CWD, SECRETS (0|1)
#   env       `export K='v'` lines for the phase command
#   prepare   optional; run first as root with no timeout (copies payload/ into place)
#   command   the phase itself, run as USER_NAME in CWD under TIMEOUT
#   collect   optional; absolute paths whose contents `result` returns (truncated)
#   payload/  optional; files `prepare` puts in place; deleted before `command` starts
# State directory /shipyard/state/ID: started, pid, rc, finished, timed_out, output, done.
set -u
ROOT=${SHIPYARD_ROOT:-/shipyard}
PHASES=$ROOT/phases
STATE=$ROOT/state
SECRETS_DIR=$ROOT/secrets
GRACE=${SHIPYARD_LAUNCH_GRACE:-3}
KILL_AFTER=5
OUTPUT_LIMIT=65536

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

status() {
  s=$STATE/$1
  if [ ! -d "$s" ]; then echo "state=none"; return; fi
  if [ -f "$s/done" ]; then
    echo "state=done rc=$(cat "$s/rc") timed_out=$(cat "$s/timed_out" 2>/dev/null || echo 0)" \
      "started=$(cat "$s/started") finished=$(cat "$s/finished")"
  elif supervisor_lost "$s"; then
    finish "$1" 125 0 "shipyard runner: the supervisor of phase $1 disappeared"
    status "$1"
  else
    echo "state=running started=$(cat "$s/started" 2>/dev/null)"
  fi
}

# A zombie (not yet reaped by PID 1) is not alive.
alive() { [ -d "/proc/$1" ] && ! grep -q "^State:.*Z" "/proc/$1/status" 2>/dev/null; }

# A launch that died before its supervisor started, or a supervisor that was killed, would
# otherwise leave the phase "running" forever.
supervisor_lost() {
  if [ -f "$1/supervisor" ]; then
    ! alive "$(cat "$1/supervisor")" && [ ! -f "$1/done" ]
  else
    [ $(($(date +%s) - $(cat "$1/started_epoch" 2>/dev/null || echo 0))) -gt 60 ]
  fi
}

# launch ID SIZE [LIMIT]: read SIZE bytes of tar from stdin into the phase dir and start it,
# once. Prints what `result ID LIMIT` prints: a phase that ends within GRACE seconds costs the
# operator this one exec, its result included.
launch() {
  id=$1 size=$2 limit=${3:-262144}
  mkdir -p "$PHASES" "$STATE" && chmod 711 "$PHASES" && chmod 700 "$STATE"
  if ! mkdir "$STATE/$id" 2>/dev/null; then
    head -c "$size" >/dev/null  # already launched: the operator retried; never run twice
    result "$id" "$limit"
    return 0
  fi
  now >"$STATE/$id/started"
  date +%s >"$STATE/$id/started_epoch"
  rm -rf "${PHASES:?}/$id" && mkdir -p "$PHASES/$id"
  if ! head -c "$size" | tar -x -f - -C "$PHASES/$id"; then
    finish "$id" 126 0 "shipyard runner: could not unpack phase $id"
    result "$id" "$limit"
    return 0
  fi
  echo "$id" >"$STATE/running"
  setsid sh "$0" supervise "$id" </dev/null >/dev/null 2>&1 &
  echo $! >"$STATE/$id/supervisor"
  wait_done "$STATE/$id" "$GRACE"
  result "$id" "$limit"
}

# chain LIMIT SIZE ID...: SIZE bytes of tar on stdin hold one phase bundle per ID (ID.tar);
# launch them one after the other, as `launch` would, while each ends within GRACE with exit
# code 0 (the next is never unpacked before the previous one ended). For each phase launched
# prints `=== ID` and what `launch` prints. The operator chains only its own preparation
# phases (environment) with the phase that follows: one exec instead of two.
chain() {
  limit=$1 size=$2
  shift 2
  staging=$ROOT/staging.$$
  rm -rf "$staging" && mkdir -p "$staging" && chmod 700 "$staging"
  if ! head -c "$size" | tar -x -f - -C "$staging"; then
    rm -rf "$staging"
    echo "shipyard runner: could not unpack the chained phases" >&2
    return 1
  fi
  for id in "$@"; do
    echo "=== $id"
    launch "$id" "$(wc -c <"$staging/$id.tar" | tr -d ' ')" "$limit" <"$staging/$id.tar"
    if [ ! -f "$STATE/$id/done" ] || [ "$(cat "$STATE/$id/rc" 2>/dev/null)" != 0 ]; then
      break
    fi
  done
  rm -rf "$staging"
}

finish() {
  id=$1 rc=$2 timed_out=$3
  s=$STATE/$id
  if [ -n "${4:-}" ]; then echo "$4" >>"$s/output"; fi
  echo "$rc" >"$s/rc"
  echo "$timed_out" >"$s/timed_out"
  now >"$s/finished"
  rm -f "$STATE/running"
  : >"$s/done"
}

# The environment of the phase command: the phase env, then mounted secrets when asked for.
write_env() {
  p=$1
  cat "$p/env" 2>/dev/null
  if [ "${SECRETS:-0}" = 1 ] && [ -d "$SECRETS_DIR" ]; then
    for f in "$SECRETS_DIR"/*/*; do
      [ -f "$f" ] || continue
      key=$(basename "$f")
      case $key in *[!A-Za-z0-9_]* | [0-9]*) continue ;; esac
      printf "export %s='" "$key"
      sed "s/'/'\\\\''/g" "$f"
      printf "'\n"
    done
  fi
}

supervise() {
  id=$1
  p=$PHASES/$id s=$STATE/$id
  USER_NAME="" TIMEOUT="" CWD="" SECRETS=0
  . "$p/spec"
  if [ -f "$p/prepare" ] && ! SHIPYARD_PAYLOAD="$p/payload" sh "$p/prepare" >>"$s/output" 2>&1; then
    finish "$id" 126 0 "shipyard runner: preparing phase $id failed"
    return
  fi
  rm -rf "$p/payload"
  umask 077
  write_env "$p" >"$p/env.sh"
  umask 022
  inner=". '$p/env.sh'; rm -f '$p/env.sh'; exec sh '$p/command'"
  if [ -n "$CWD" ]; then mkdir -p "$CWD" 2>/dev/null; inner="cd '$CWD' && $inner"; fi
  if [ -n "$USER_NAME" ] && [ "$USER_NAME" != root ] && [ "$USER_NAME" != 0 ]; then
    name=$USER_NAME
    case $name in *[!0-9]*) ;; *) name=$(awk -F: -v u="$name" '$3 == u {print $1; exit}' /etc/passwd) ;; esac
    home=$(awk -F: -v u="$name" '$1 == u {print $6; exit}' /etc/passwd)
    chown "$name" "$p/env.sh" "$p" 2>/dev/null
    chmod 711 "$p"
    set -- su -s /bin/sh "$name" -c "export HOME='${home:-/}' USER='$name' LOGNAME='$name'; $inner"
  else
    set -- sh -c "$inner"
  fi
  setsid "$@" >>"$s/output" 2>&1 </dev/null &
  child=$!
  echo "$child" >"$s/pid"
  watchdog=""
  if [ -n "$TIMEOUT" ]; then
    (
      sleep "$TIMEOUT"
      echo 1 >"$s/timed_out.pending"
      kill -TERM -"$child" 2>/dev/null
      sleep "$KILL_AFTER"
      kill -KILL -"$child" 2>/dev/null
    ) &
    watchdog=$!
  fi
  wait "$child"
  rc=$?
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
  timed_out=0
  [ -f "$s/timed_out.pending" ] && timed_out=1
  tail -c "$OUTPUT_LIMIT" "$s/output" >"$s/output.tail" 2>/dev/null && mv "$s/output.tail" "$s/output"
  finish "$id" "$rc" "$timed_out"
}

# result ID LIMIT: the status line, then each collected file as `== PATH SIZE` + base64 body.
# Values of secrets mounted in the pod are redacted from everything returned, whichever phase
# wrote it (an agent may leave a key in a file that a later phase prints).
# A finished phase's status line ends with `result=1`: its files follow.
result() {
  id=$1 limit=${2:-262144}
  line=$(status "$id")
  case $line in
    state=done*) echo "$line result=1" ;;
    *) echo "$line"; return 0 ;;
  esac
  emit "output" "$STATE/$id/output" "$limit"
  if [ -f "$PHASES/$id/collect" ]; then
    while IFS= read -r path; do
      [ -n "$path" ] && emit "$path" "$path" "$limit"
    done <"$PHASES/$id/collect"
  fi
}

emit() {
  [ -f "$2" ] || return 0
  size=$(wc -c <"$2" | tr -d ' ')
  echo "== $1 $size"
  tail -c "$3" "$2" | redact | base64
}

redact() {
  if [ ! -d "$SECRETS_DIR" ]; then cat; return; fi
  awk -v dir="$SECRETS_DIR" '
    BEGIN {
      n = 0; list = "find " dir " -type f 2>/dev/null"
      while ((list | getline f) > 0) {
        while ((getline line < f) > 0) if (length(line) >= 4) secret[n++] = line
        close(f)
      }
      close(list)
    }
    {
      for (i = 0; i < n; i++) {
        out = ""; rest = $0
        while ((p = index(rest, secret[i])) > 0) {
          out = out substr(rest, 1, p - 1) "[REDACTED]"
          rest = substr(rest, p + length(secret[i]))
        }
        $0 = out rest
      }
      print
    }'
}

# stop ID LIMIT: end a running phase now (its trial was cancelled): TERM its process group,
# KILL after KILL_AFTER seconds, wait for the supervisor to record it, then print `result`.
stop() {
  id=$1 s=$STATE/$1
  child=$(cat "$s/pid" 2>/dev/null)
  if [ -n "$child" ] && [ ! -f "$s/done" ]; then
    kill -TERM -"$child" 2>/dev/null
    wait_done "$s" "$KILL_AFTER"
    kill -KILL -"$child" 2>/dev/null
    wait_done "$s" 2
  fi
  result "$@"
}

# wait_done STATE_DIR SECONDS: until the phase is recorded done, or SECONDS have passed.
wait_done() {
  waited=0
  while [ ! -f "$1/done" ] && [ "$waited" -lt "$(($2 * 10))" ]; do
    sleep 0.1 2>/dev/null || sleep 1
    waited=$((waited + 1))
  done
}

ready() { [ ! -f "$STATE/running" ]; }

cmd=${1:-}
shift 2>/dev/null
case $cmd in
  launch) launch "$@" ;;
  chain) chain "$@" ;;
  supervise) supervise "$@" ;;
  status) status "$@" ;;
  result) result "$@" ;;
  stop) stop "$@" ;;
  ready) ready ;;
  *) echo "usage: runner launch ID SIZE [LIMIT] | chain LIMIT SIZE ID... | status ID | result ID [LIMIT] | stop ID [LIMIT] | ready" >&2
     exit 2 ;;
esac
