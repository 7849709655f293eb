#!/bin/sh
# Shipyard's in-pod phase runner (POSIX sh; works with busybox and dash).
#
# The operator never holds a connection for long. It uploads a phase and starts it with one
# short exec (`launch`); this runner supervises it detached, enforces its timeout by killing the
# whole process group, and records the exit code and times in files. A phase that ends within
# the launch's grace comes back with the launch. A longer one is waited for in one of two ways.
# In a pod with a `probe` container (busybox httpd serving /shipyard/probe; trials with long
# phases) the kubelet's probe is an HTTP GET of /busy, which the runner writes when it launches
# a phase and removes when the phase is done: the operator's pod watch sees that container's
# readiness change and reads the result (`result`); probes fail (each failure is a kubelet
# Event) only in the short gaps between phases. In a pod without one (no readiness probe at
# all: trials whose phases are short) the operator asks for the result with a wait (`result ID
# LIMIT WAIT`), which returns once the phase is done or WAIT seconds have passed: one exec per
# wait instead of an exec probe every period. `ready` serves pods of older operators, whose
# exec probe runs it (the main container Ready while no phase runs).
#
# Phase directory /shipyard/phases/ID (uploaded as a tar by `launch`):
#   spec      shell assignments: USER_NAME, TIMEOUT (seconds, empty = none), CWD, SECRETS (0|1),
#             OWN (0|1: Shipyard's own phase), KEEP (0|1: processes are left running, see
#             `sweep_holders`)
#   env       `export K='v'` lines for the phase command
#   prepare   optional; run first as root with no timeout (copies payload/ into place)
#   command   the phase itself, run as USER_NAME in CWD under TIMEOUT
#   collect   optional; absolute paths whose contents `result` returns (truncated)
#   payload/  optional; files `prepare` puts in place; deleted before `command` starts
# State directory /shipyard/state/ID: started, pid, rc, finished, timed_out, output, done.
#
# Phase isolation: when a phase's command ends (or is killed at its timeout) the supervisor
# sweeps the pod's shared PID namespace (`sweep`) before it records the phase done, and every
# `launch` sweeps again before it unpacks the next phase: whatever the phase started, detached
# (setsid, double fork, nohup) or not, is stopped and killed. Kept are pause (PID 1), the
# processes that existed before the first phase (the image's own, e.g. from its ENTRYPOINT; not
# the processes they started since), and exec sessions (the operator's runner calls, probes)
# and their children.
# "Before the first phase" is a clock tick (the base): the pod's first launch takes its own
# start and prints it (`base=N`); the operator keeps it and passes it to each later launch,
# which hands it to its supervisor. A root agent can write the copy kept in the state folder
# (a base far ahead would spare its processes), so that copy is only a fallback for a launch
# that is given none.
#
# Secrets: the agent's Secret files are mounted only into the `secrets` container of the pod,
# which holds a capability no other container holds, so no process of main or of a sidecar can
# read them through /proc. Before a phase that needs them the operator runs `put-secrets ID` there,
# which copies them into the phase's drop (/shipyard/secret-drops/ID); the supervisor turns
# them into the command's environment and the drop is deleted by the next `launch`: a verifier
# never finds them.
set -u
# In a trial pod (PID 1 is its pause, the runner mounted) the settings are the defaults, never
# the environment: that is the container's, which the task's image and task.toml set (the
# variables serve the runner's tests).
if [ "$(cat /proc/1/comm 2>/dev/null)" = pause ] && [ -f /shipyard/bin/runner ]; then
  unset SHIPYARD_ROOT SHIPYARD_LAUNCH_GRACE SHIPYARD_SCRUB_DIRS SHIPYARD_SCRUB_ROOT
  SHIPYARD_SECRETS_SRC=/run/shipyard-secrets
fi
ROOT=${SHIPYARD_ROOT:-/shipyard}
PHASES=$ROOT/phases
STATE=$ROOT/state
SECRETS_SRC=${SHIPYARD_SECRETS_SRC:-$ROOT/secrets}
DROPS=$ROOT/secret-drops
BASELINE=$STATE/baseline
PROBE=$ROOT/probe
GRACE=${SHIPYARD_LAUNCH_GRACE:-3}
KILL_AFTER=5
OUTPUT_LIMIT=65536
SCRUB_DIRS=${SHIPYARD_SCRUB_DIRS:-/logs/agent /logs/artifacts}
SCRUB_ROOT=${SHIPYARD_SCRUB_ROOT:-/}
BASE="" NEWBASE="" TASKCODE=0

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

status() {
  s=$STATE/$1
  if [ ! -d "$s" ]; then echo "state=none"; return; fi
  if [ -f "$s/done" ]; then
    echo "state=done rc=$(value "$s/rc") timed_out=$(value "$s/timed_out" 0)" \
      "oom_killed=$(value "$s/oom_killed" 0)" \
      "started=$(value "$s/started") finished=$(value "$s/finished")${NEWBASE:+ base=$NEWBASE}"
  elif supervisor_lost "$s"; then
    finish "$1" 125 0 "shipyard runner: the supervisor of phase $1 disappeared"
    status "$1"
  else
    echo "state=running started=$(value "$s/started")${NEWBASE:+ base=$NEWBASE}"
  fi
}

# value FILE [DEFAULT]: the file's first line (DEFAULT when it is missing or empty). A shell
# builtin, not `cat`: the runner's calls are many, and each program run costs the pod a fork.
value() {
  v=""
  { read -r v || :; } <"$1" 2>/dev/null
  printf '%s' "${v:-${2:-}}"
}

# A zombie (not yet reaped by PID 1) is not alive.
alive() { [ -d "/proc/$1" ] && ! grep -q "^State:.*Z" "/proc/$1/status" 2>/dev/null; }

# A launch that died before its supervisor started, or a supervisor that was killed, would
# otherwise leave the phase "running" forever.
supervisor_lost() {
  if [ -f "$1/supervisor" ]; then
    ! alive "$(value "$1/supervisor")" && [ ! -f "$1/done" ]
  else
    [ $(($(date +%s) - $(value "$1/started_epoch" 0))) -gt 60 ]
  fi
}

# launch ID SIZE [LIMIT [KEY [BASE]]]: read SIZE bytes of tar from stdin into the phase dir and
# start it, once. Prints what `result ID LIMIT` prints: a phase that ends within GRACE seconds costs
# the operator this one exec, its result included. KEY (the operator's, per phase) is kept
# with the phase's state: a launch that finds the state there but not its key did not make it
# (an earlier phase's code did, as root it can write here: a verifier's `done` and reward
# forged ahead of it) and starts the phase afresh.
launch() {
  # The whole bundle first: an operator killed mid-upload must leave the phase unlaunched (its
  # next launch starts it), never launched from a truncated tar.
  [ -d "$STATE" ] || make_dirs
  bundle=$STATE/bundle.$$
  head -c "$2" >"$bundle"
  got=$(wc -c <"$bundle")
  if [ "$got" -ne "$2" ]; then
    rm -f "$bundle"
    echo "shipyard runner: phase $1: received $((got)) of $2 bytes; not launched" >&2
    return 3
  fi
  launch_file "$1" "$bundle" "${3:-262144}" "${4:-}" "${5:-}"
}

# launch_file ID BUNDLE LIMIT KEY BASE: `launch` of a bundle received whole (its supervisor
# deletes it).
launch_file() {
  id=$1 bundle=$2 limit=$3 key=$4
  # The base (see the header): the operator's, else the one this pod's first launch (this
  # one, when there is none yet: printed for the operator to keep) recorded.
  if [ -n "$5" ]; then
    BASE=$5
  elif [ -z "$BASE" ]; then
    if [ ! -f "$BASELINE" ]; then start_ticks $$; echo "$TICKS" >"$BASELINE"; NEWBASE=$TICKS; fi
    BASE=$(value "$BASELINE" 0)
  fi
  if [ -n "$key" ] && [ -d "$STATE/$id" ] && [ "$(value "$STATE/$id/key")" != "$key" ]; then
    # Not ours (a launch of ours writes its key right after making the folder, before the
    # phase can start): whatever made it is swept first, then the phase starts afresh.
    sweep
    rm -rf "${STATE:?}/$id"
    forged=1
  fi
  if ! mkdir "$STATE/$id" 2>/dev/null; then
    [ "$bundle" != "$STATE/bundle.$$" ] || rm -f "$bundle"  # already launched: the operator
    # retried; never run twice (a chain's bundles go with its staging folder)
    result "$id" "$limit"
    return 0
  fi
  [ -z "$key" ] || echo "$key" >"$STATE/$id/key"
  if [ "${forged:-0}" = 1 ]; then
    echo "shipyard runner: phase $id: a state made before its launch (not by it) was discarded" \
      >>"$STATE/$id/output"
    forged=0
  fi
  # Nothing to sweep while no task code ran since the base was taken (this exec's own, the
  # first in the pod, launched only phases of Shipyard's own: OWN=1 in their spec). A phase
  # of a trial that keeps the agent's processes (KEEP=1, read from the bundle before it is
  # unpacked) ends only those holding a secret.
  case "$(tar -x -O -f "$bundle" spec 2>/dev/null)" in
    *KEEP=1*) sweep_holders ;;
    *) [ -n "$NEWBASE" ] && [ "$TASKCODE" = 0 ] || sweep ;;
  esac
  for d in "$DROPS"/*; do [ ! -e "$d" ] || [ "$d" = "$DROPS/$id" ] || rm -rf "$d"; done 2>/dev/null
  # One `date` for both: the time as recorded and in seconds (for `supervisor_lost`).
  set -- $(date -u "+%Y-%m-%dT%H:%M:%SZ %s")
  echo "$1" >"$STATE/$id/started"
  echo "$2" >"$STATE/$id/started_epoch"
  if [ -e "$PHASES/$id" ]; then rm -rf "${PHASES:?}/$id"; fi
  mkdir -p "$PHASES/$id"
  if ! tar -x -f "$bundle" -C "$PHASES/$id"; then
    rm -f "$bundle"
    finish "$id" 126 0 "shipyard runner: could not unpack phase $id"
    result "$id" "$limit"
    return 0
  fi
  own "$PHASES/$id/spec" || TASKCODE=1
  echo "$id" >"$STATE/running"
  busy
  waiter "$STATE/$id"  # before the supervisor exists: its `finish` cannot miss us
  SHIPYARD_BASE=$BASE SHIPYARD_BUNDLE=$bundle setsid sh "$0" supervise "$id" </dev/null \
    >/dev/null 2>&1 &
  echo $! >"$STATE/$id/supervisor"
  wait_done "$STATE/$id" "$GRACE"
  result "$id" "$limit"
}

# chain LIMIT SIZE ID[:KEY]...: SIZE bytes of tar on stdin hold one phase bundle per ID (ID.tar);
# launch them one after the other, as `launch` would, while each ends within GRACE with exit
# code 0 (the next is never unpacked before the previous one ended). For each phase launched
# prints `=== ID` and what `launch` prints. The operator chains only its own preparation
# phases (environment) with the phase that follows: one exec instead of two.
chain() {
  limit=$1 size=$2
  shift 2
  staging=$ROOT/staging.$$
  [ ! -e "$staging" ] || rm -rf "$staging"
  mkdir -m 700 "$staging"
  head -c "$size" >"$staging/chain.tar"
  got=$(wc -c <"$staging/chain.tar")
  if [ "$got" -ne "$size" ] || ! tar -x -f "$staging/chain.tar" -C "$staging"; then
    rm -rf "$staging"
    echo "shipyard runner: received $((got)) of $size bytes of the chained phases; none" \
      "launched" >&2
    return 1
  fi
  [ -d "$STATE" ] || make_dirs
  for phase in "$@"; do
    id=${phase%%:*} key=""
    [ "$id" = "$phase" ] || key=${phase#*:}
    echo "=== $id"
    launch_file "$id" "$staging/$id.tar" "$limit" "$key" ""
    if [ ! -f "$STATE/$id/done" ] || [ "$(value "$STATE/$id/rc")" != 0 ]; then
      break
    fi
  done
  rm -rf "$staging"
}

# make_dirs: the runner's folders, made by the pod's first launch. The pod's /shipyard (an emptyDir,
# world-writable as the kubelet makes it) becomes root's alone: task code running as another
# user can neither swap what the runner keeps there nor plant a folder of its own.
make_dirs() {
  mkdir -p -m 711 "$PHASES"
  mkdir -p -m 700 "$STATE"
  chmod 755 "$ROOT" 2>/dev/null
}

finish() {
  id=$1 rc=$2 timed_out=$3
  s=$STATE/$id
  if [ -n "${4:-}" ]; then echo "$4" >>"$s/output"; fi
  echo "$rc" >"$s/rc"
  echo "$timed_out" >"$s/timed_out"
  now >"$s/finished"
  : >"$s/done"
  # Only then ready (an older exec probe) or not busy (the probe container): the readiness flip
  # wakes the operator, whose `result` must find it done (else it would wait, with no further
  # pod event, until the phase's deadline). A waiting `result` or launch is woken.
  if [ "$(value "$STATE/running")" = "$id" ]; then : >"$STATE/running"; idle; fi
  wake "$s"
}

# own SPEC: the phase is one of Shipyard's own (OWN=1: no task code runs in it).
own() {
  while IFS= read -r l; do [ "$l" != OWN=1 ] || return 0; done <"$1" 2>/dev/null
  return 1
}

# Waiting without polling: a runner that waits for a phase (`wait_done`, `wait_result`) adds
# itself to the phase's waiters (`waiter`: its PID and start tick, so that a PID reused since
# is never signalled) and sleeps; the phase's `finish` sends each waiter SIGUSR1, which ends
# the wait at once. One `sleep` per wait instead of one every tenth of a second.
trap 'WOKEN=1' USR1
WOKEN=0
waiter() { WOKEN=0; start_ticks $$; echo "$$ $TICKS" >>"$1/waiters"; }
wake() {
  [ -f "$1/waiters" ] || return 0
  while read -r pid ticks; do
    start_ticks "$pid" 2>/dev/null && [ "$TICKS" = "$ticks" ] && kill -USR1 "$pid" 2>/dev/null
  done <"$1/waiters"
  return 0
}

# nap SECONDS: sleep, until woken (SIGUSR1) if sooner.
nap() {
  [ "$WOKEN" = 1 ] && return 0
  sleep "$1" &
  napper=$!
  [ "$WOKEN" = 1 ] || wait "$napper"
  kill "$napper" 2>/dev/null
  return 0
}

# What the probe container serves (world-readable: it runs as nobody): /busy while a phase runs.
# The folder is there only in a pod with a probe container (the kubelet makes its subPath).
busy() { [ ! -d "$PROBE" ] || (umask 022 && : >"$PROBE/busy") 2>/dev/null || true; }
idle() { [ ! -e "$PROBE/busy" ] || rm -f "$PROBE/busy"; }

# The environment of a phase command given secrets: the phase env, then the mounted secrets.
write_env() {
  p=$1
  while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done <"$p/env" 2>/dev/null
  if [ -d "$DROPS/$2" ]; then
    for f in "$DROPS/$2"/*/*; do
      [ -f "$f" ] || continue
      key=$(basename "$f")
      case $key in *[!A-Za-z0-9_]* | [0-9]*) continue ;; esac
      printf "export %s='" "$key"
      sed "s/'/'\\\\''/g" "$f"
      printf "'\n"
    done
  fi
}

# quoted TEXT: TEXT as one single-quoted shell word.
quoted() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

supervise() {
  id=$1
  p=$PHASES/$id s=$STATE/$id
  USER_NAME="" TIMEOUT="" CWD="" SECRETS=0 OWN=0 KEEP=0
  . "$p/spec"
  # prepare in a subshell of this one (a fork, no new shell to start)
  if [ -f "$p/prepare" ] && ! (SHIPYARD_PAYLOAD="$p/payload"; . "$p/prepare") >>"$s/output" 2>&1
  then
    finish "$id" 126 0 "shipyard runner: preparing phase $id failed"
    return
  fi
  rm -rf "$p/payload" ${BUNDLE:+"$BUNDLE"}
  if [ "$SECRETS" = 1 ]; then
    umask 077
    write_env "$p" "$id" >"$p/env.sh"
    umask 022
    inner=". '$p/env.sh'; rm -f '$p/env.sh'; exec sh '$p/command'"
  else
    inner=". '$p/env'; exec sh '$p/command'"
  fi
  if [ -n "$CWD" ]; then mkdir -p "$CWD" 2>/dev/null; inner="cd '$CWD' && $inner"; fi
  if [ -n "$USER_NAME" ] && [ "$USER_NAME" != root ] && [ "$USER_NAME" != 0 ]; then
    name=$USER_NAME
    case $name in *[!0-9]*) ;; *) name=$(awk -F: -v u="$name" '$3 == u {print $1; exit}' /etc/passwd) ;; esac
    home=$(awk -F: -v u="$name" '$1 == u {print $6; exit}' /etc/passwd)
    envfile=$p/env
    [ "$SECRETS" != 1 ] || envfile=$p/env.sh
    chown "$name" "$envfile" "$p" 2>/dev/null
    chmod 711 "$p"
    # Quoted: /etc/passwd is the image's, and an agent running as root could write a home
    # that closes the quote and runs code as the next phase's user.
    qhome=$(quoted "${home:-/}") qname=$(quoted "$name")
    set -- su -s /bin/sh "$name" -c "export HOME=$qhome USER=$qname LOGNAME=$qname; $inner"
  else
    set -- sh -c "$inner"
  fi
  oom_before=$(oom_kills)
  if [ "$SECRETS" = 1 ]; then
    # The scrub's "changed since"; and a second early for a `find` that counts whole seconds
    # (busybox's).
    : >"$s/scrub.since"
    touch -d "@$(($(date +%s) - 1))" "$s/scrub.since.s" 2>/dev/null || : >"$s/scrub.since.s"
  fi
  setsid "$@" >>"$s/output" 2>&1 </dev/null &
  child=$!
  echo "$child" >"$s/pid"
  watchdog=""
  if [ -n "$TIMEOUT" ]; then
    # Its sleep ends with it (TERM): no process of ours is left for the sweep to find.
    (
      trap 'kill "$napper" 2>/dev/null; exit 0' TERM
      sleep "$TIMEOUT" & napper=$!; wait "$napper"
      echo 1 >"$s/timed_out.pending"
      kill -TERM -"$child" 2>/dev/null
      sleep "$KILL_AFTER" & napper=$!; wait "$napper"
      kill -KILL -"$child" 2>/dev/null
    ) &
    watchdog=$!
  fi
  wait "$child"
  rc=$?
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
  # Its environment (a verifier's [verifier.env] values, e.g. a judge's key) is not left on
  # disk for the phases after it.
  rm -f "$p/env" "$p/env.sh"
  # Shipyard's own phase (no task code) leaves nothing to end. What a phase of task code left
  # running is ended and named in its output (a task whose tests expect a service the agent
  # started scores 0 so: the trial's verifier.agentProcesses Keep is Harbor's behaviour).
  if [ "$OWN" = 1 ]; then :
  elif [ "$KEEP" = 1 ]; then sweep_holders
  else SWEEP_REPORT=$s/output sweep
  fi
  [ "$SECRETS" != 1 ] || scrub "$DROPS/$id" "$s/scrub.since"
  echo $(($(oom_kills) - oom_before)) >"$s/oom_killed"
  timed_out=0
  [ -f "$s/timed_out.pending" ] && timed_out=1
  finish "$id" "$rc" "$timed_out"
}

# result ID LIMIT [WAIT]: the status line, then each collected file as `== PATH SIZE` + base64
# body; with WAIT, once the phase is done or WAIT seconds have passed (a launched phase only).
# Values of secrets mounted in the pod are redacted from everything returned, whichever phase
# wrote it (an agent may leave a key in a file that a later phase prints).
# A finished phase's status line ends with `result=1`: its files follow.
result() {
  id=$1 limit=${2:-262144}
  if [ "${3:-0}" -gt 0 ] 2>/dev/null && [ -d "$STATE/$id" ]; then
    wait_result "$STATE/$id" "$3"
  fi
  line=$(status "$id")
  case $line in
    state=done*) echo "$line result=1 end=1" ;;
    *) echo "$line"; return 0 ;;
  esac
  # The phase's output, then its collected files: one `wc` sizes them all.
  set -- "$STATE/$id/output"
  if [ -f "$PHASES/$id/collect" ]; then
    while IFS= read -r path; do
      [ -n "$path" ] && [ -f "$path" ] && set -- "$@" "$path"
    done <"$PHASES/$id/collect"
  fi
  [ -f "$1" ] || shift
  if [ $# -gt 0 ]; then
    wc -c -- "$@" 2>/dev/null | while read -r size path; do
      if [ "$path" = "$STATE/$id/output" ]; then
        # Its last OUTPUT_LIMIT bytes are kept (and the result's limit applies).
        tail=$limit
        [ "$limit" -le "$OUTPUT_LIMIT" ] || tail=$OUTPUT_LIMIT
        kept=$size
        [ "$size" -le "$OUTPUT_LIMIT" ] || kept=$OUTPUT_LIMIT
        emit output "$path" "$kept" "$size" "$tail"
      elif [ "$path" != total ]; then
        emit "$path" "$path" "$size" "$size" "$limit"
      fi
    done
  fi
  # The operator takes a result only with this last line: an exec cut short on its way (a
  # kubelet restarting mid-stream) must not pass for a phase that wrote nothing.
  echo "%%end"
}

# emit NAME PATH SIZE REAL LIMIT: the last LIMIT bytes of the file (REAL bytes long), base64,
# under `== NAME SIZE` (its size as kept).
emit() {
  echo "== $1 $3"
  if [ -d "$DROPS" ]; then
    tail -c "$5" "$2" | redact | base64
  elif [ "$4" -le "$5" ]; then
    base64 <"$2"
  else
    tail -c "$5" "$2" | base64
  fi
}

# scrub DROP [SINCE]: once a phase given secrets has ended (its processes swept), the values in
# DROP are redacted inside the files it left under /logs/agent and /logs/artifacts (an agent
# that ran `printenv` into a file) and, with SINCE, in every other file it changed (an
# artifact under /app), so that neither a verifier in this pod nor an export reads them.
scrub() {
  [ -d "$1" ] || return 0
  patterns=$STATE/scrub.$$
  (umask 077 && find "$1" -type f -exec cat {} + 2>/dev/null |
    awk 'length($0) >= 4' >"$patterns")
  if [ -s "$patterns" ]; then
    # shellcheck disable=SC2086
    { grep -rlF -f "$patterns" $SCRUB_DIRS 2>/dev/null
      [ -z "${2:-}" ] || changed_holding "$2" "$patterns"; } |
      while IFS= read -r f; do
        [ -f "$f" ] && [ ! -L "$f" ] || continue
        redact <"$f" >"$patterns.out" && cat "$patterns.out" >"$f"
      done
  fi
  rm -f "$patterns" "$patterns.out"
}

# changed_holding SINCE PATTERNS: the regular files under SCRUB_ROOT changed since SINCE that
# hold one of PATTERNS, as the Go runner's scrub (not /proc, /sys, /dev, the drops, the runner's
# bin, this scrub's own files): by ctime, which task code cannot set back, where `find` knows
# -cnewer (GNU); by mtime with busybox's, so a file whose time the agent set back is missed.
changed_holding() {
  set -- -cnewer "$1" "$2"
  find "$2" -maxdepth 0 -cnewer "$2" >/dev/null 2>&1 || set -- -newer "$2.s" "$3"
  find "$SCRUB_ROOT" \( -path /proc -o -path /sys -o -path /dev -o -path "$DROPS" \
    -o -path "$ROOT/bin" -o -path "$STATE/scrub.*" \) -prune -o \
    -type f "$1" "$2" -exec grep -lF -f "$3" {} + 2>/dev/null
}

redact() {
  awk -v dir="$DROPS" '
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
    waiter "$s"
    kill -TERM -"$child" 2>/dev/null
    wait_done "$s" "$KILL_AFTER"
    kill -KILL -"$child" 2>/dev/null
    wait_done "$s" 2
  fi
  result "$@"
}

# wait_done STATE_DIR SECONDS: until the phase is recorded done, or SECONDS have passed (the
# caller is among its waiters).
wait_done() { [ -f "$1/done" ] || nap "$2"; }

# wait_result STATE_DIR SECONDS: as wait_done, and not past a supervisor found gone (looked
# for every 10 s; `status` then records it).
wait_result() {
  waiter "$1"
  left=$2
  while [ ! -f "$1/done" ] && [ "$left" -gt 0 ] && [ "$WOKEN" = 0 ]; do
    if [ "$left" -lt 10 ]; then nap "$left"; return 0; fi
    nap 10
    left=$((left - 10))
    if supervisor_lost "$1"; then return 0; fi
  done
}

ready() { [ ! -s "$STATE/running" ]; }

# artifacts LIMIT: the tar the collect phase packed (in the root-only state folder), as is, when
# it is at most LIMIT bytes; else exit 5 saying how large it is (the operator reads no more).
artifacts() {
  f=$STATE/artifacts.tar
  [ -f "$f" ] || { echo "shipyard runner: no artifacts were packed" >&2; return 4; }
  size=$(wc -c <"$f")
  if [ "$size" -gt "$1" ]; then
    echo "shipyard runner: the artifacts tar is $((size)) bytes, over the limit of $1" >&2
    return 5
  fi
  exec cat -- "$f"
}

# How many processes the kernel has OOM-killed in this container (cgroup v2, else v1).
oom_kills() {
  for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
    [ -r "$f" ] || continue
    while read -r key count; do
      if [ "$key" = oom_kill ]; then echo "$count"; return; fi
    done <"$f"
    break
  done
  echo 0
}

# proc_stat FILE: P_STATE, P_PPID and P_START (fields 3, 4 and 22) of a /proc stat file, read
# whole with builtins: the command name, which may hold spaces, parentheses and newlines (a
# process names itself), is skipped through the file's last ") ". 1 when the file cannot be
# read (the process is gone), 2 when it does not parse.
proc_stat() {
  P_STATE="" P_PPID="" P_START="" all=""
  { while IFS= read -r l || [ -n "$l" ]; do all="$all$l "; done <"$1"; } 2>/dev/null ||
    return 1
  case $all in *") "*) ;; *) return 2 ;; esac
  # shellcheck disable=SC2086
  set -- ${all##*) }
  [ $# -ge 20 ] || return 2
  P_STATE=$1 P_PPID=$2
  shift 19
  P_START=$1
  case $P_PPID$P_START in *[!0-9]*) return 2 ;; esac
}

# start_ticks PID: TICKS=the start time of a process, in clock ticks since boot.
start_ticks() {
  TICKS=""
  proc_stat "/proc/$1/stat" || return 1
  TICKS=$P_START
}

# live_threads DIR: the process at /proc/PID has a thread that is not a zombie (a thread-group
# leader that ended with pthread_exit is a zombie while its other threads run on).
live_threads() {
  for t in "$1"/task/[0-9]*; do
    proc_stat "$t/stat" || continue
    case $P_STATE in Z | X) ;; *) return 0 ;; esac
  done
  return 1
}

# sweep_targets: the processes a sweep ends (see the header), one PID a line. Each process is
# read from its own /proc/PID (the PID from the folder's name, never from parsed text) and
# looked at with its ancestors, nearest first: the caller itself ($$) keeps it; an exec session
# (parent outside the namespace, PPid 0, started since the base) keeps it; a process from
# before the base (the image's own, e.g. its ENTRYPOINT's daemon or the probe's httpd) is kept
# itself, but a process it started since (a CGI script, a cron job the agent asked for) is
# not; reaching PID 1 (pause, the parent of every orphan), or an ancestor that cannot be read,
# ends it. A process whose stat cannot be parsed is ended (fail closed), and so is a zombie
# leader whose threads live on (its PID signals the whole thread group).
sweep_targets() {
  base=${BASE:-$(value "$BASELINE" 0)}  # see the header
  self=$$ pids=""
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    case $pid in "" | *[!0-9]*) continue ;; esac
    proc_stat "$d/stat"
    case $? in
      1) continue ;;  # gone
      2) [ "$pid" = 1 ] || [ "$pid" = "$self" ] || echo "$pid"; continue ;;
    esac
    case $P_STATE in Z | X) live_threads "$d" || continue ;; esac
    eval "pp_$pid=$P_PPID st_$pid=$P_START"
    pids="$pids $pid"
  done
  for pid in $pids; do
    a=$pid verdict="" hops=0
    while [ -z "$verdict" ]; do
      if [ "$a" = "$self" ]; then verdict=keep
      elif [ "$a" = 1 ] || [ "$hops" -ge 4096 ]; then verdict=kill
      else
        eval "pp=\${pp_$a:-} st=\${st_$a:-}"
        if [ -z "$pp" ]; then verdict=kill  # an ancestor gone: an orphan of pause soon
        elif [ "$st" -lt "$base" ]; then
          if [ "$a" = "$pid" ]; then verdict=keep; else verdict=kill; fi
        elif [ "$pp" = 0 ]; then verdict=keep
        else a=$pp hops=$((hops + 1))
        fi
      fi
    done
    [ "$verdict" = keep ] || [ "$pid" = 1 ] || echo "$pid"
  done
}

# sweep: stop, then kill, every target until none is left (STOP first: a forking loop cannot
# outrun it).
sweep() {
  # Only in a trial pod, whose PID 1 is the sandbox's pause (shareProcessNamespace): run
  # anywhere else, e.g. on a host, it would end every process started since the first phase.
  [ "$(value /proc/1/comm)" = pause ] || return 0
  rounds=0
  while [ "$rounds" -lt 50 ]; do
    targets=$(sweep_targets)
    [ -n "$targets" ] || return 0
    # SWEEP_REPORT=FILE: what the phase left running is named there, each name once (a task
    # whose tests expect a service the agent started scores 0 so; the trial's
    # verifier.agentProcesses Keep is Harbor's behaviour).
    if [ "$rounds" = 0 ] && [ -n "${SWEEP_REPORT:-}" ]; then
      seen=" "
      for pid in $targets; do
        name=$(value "/proc/$pid/comm")
        case $seen in *" $name "*) ;; *) [ -z "$name" ] || seen="$seen$name " ;; esac
      done
      echo "shipyard runner: the phase left processes running, now ended:${seen% }" \
        "(verifier.agentProcesses Keep keeps them, as Harbor does)" >>"$SWEEP_REPORT"
    fi
    # shellcheck disable=SC2086
    kill -STOP $targets 2>/dev/null
    # shellcheck disable=SC2086
    kill -KILL $targets 2>/dev/null
    rounds=$((rounds + 1))
    sleep 0.05 2>/dev/null || sleep 1
  done
  echo "shipyard runner: processes were still starting after 50 sweeps" >&2
}

# sweep_holders: with KEEP=1 the sweep spares what the phases left running, but not a process
# whose environment holds a value of the agent's Secrets (any phase's drop still on disk):
# a secret never reaches the verifier, even through /proc/PID/environ.
sweep_holders() {
  [ "$(value /proc/1/comm)" = pause ] || return 0
  [ -d "$DROPS" ] || return 0
  patterns=$STATE/holders.$$
  (umask 077 && find "$DROPS" -type f -exec cat {} + 2>/dev/null |
    awk 'length($0) >= 4' >"$patterns")
  if [ -s "$patterns" ]; then
    for pid in $(sweep_targets); do
      # (NUL-separated: busybox's grep would stop at the first NUL)
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qF -f "$patterns" &&
        kill -KILL "$pid" 2>/dev/null
    done
  fi
  rm -f "$patterns"
  return 0
}

# put-secrets ID (run in the `secrets` container): the mounted Secret files, copied into the
# drop of phase ID for its supervisor (root only; the next launch deletes the drop). Prints
# `secrets=ok`, or `secrets=missing missing=I,J` naming the volumes (envFrom indexes) that are
# empty: their Secrets do not exist (the volumes are optional so that this is said at once).
put_secrets() {
  d=$DROPS/$1 missing=""
  mkdir -p "$DROPS" && chmod 711 "$DROPS" && rm -rf "$d" && (umask 077 && mkdir -p "$d")
  for dir in "$SECRETS_SRC"/*; do
    [ -d "$dir" ] || continue
    # An optional Secret volume of a Secret that does not exist is an empty folder.
    [ -n "$(ls "$dir" 2>/dev/null)" ] || missing="$missing${missing:+,}${dir##*/}"
    (umask 077 && mkdir -p "$d/${dir##*/}")
    for f in "$dir"/*; do
      [ -f "$f" ] || continue
      (umask 077 && cat "$f" >"$d/${dir##*/}/${f##*/}" && encoded "$f" >>"$d/.encoded")
    done
  done
  if [ -n "$missing" ]; then echo "secrets=missing missing=$missing"; else echo "secrets=ok"; fi
}

# encoded FILE: its content's base64 forms, redacted too (as is, with a newline, and the core
# that a longer base64 text holds at each of the other two alignments).
encoded() {
  for nl in "" "
"; do
    for pad in "" x xx; do
      { printf %s "$pad"; cat "$1"; printf %s "$nl"; } | base64 | tr -d '\n=' | awk -v pad="$pad" '
        { if (pad == "") print; else if (length($0) > 8) print substr($0, 5, length($0) - 8) }'
    done
  done
}

cmd=${1:-}
shift 2>/dev/null
case $cmd in
  launch) launch "$@" ;;
  chain) chain "$@" ;;
  supervise)
    BASE=${SHIPYARD_BASE:-} BUNDLE=${SHIPYARD_BUNDLE:-}
    unset SHIPYARD_BASE SHIPYARD_BUNDLE
    supervise "$@" ;;
  status) status "$@" ;;
  result) result "$@" ;;
  stop) stop "$@" ;;
  ready) ready ;;
  artifacts) artifacts "$@" ;;
  sweep) sweep ;;
  put-secrets) put_secrets "$@" ;;
  *) echo "usage: runner launch ID SIZE [LIMIT [KEY [BASE]]] | chain LIMIT SIZE ID[:KEY]... | status ID | result ID [LIMIT] | stop ID [LIMIT] | ready | artifacts LIMIT | sweep | put-secrets ID" >&2
     exit 2 ;;
esac
