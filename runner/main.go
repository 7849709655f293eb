// Command runner is Shipyard's in-pod phase runner: the same protocol as render/runner.sh
// (docs/runner-protocol.md), as one static binary that never runs a program of the task image
// for its own work. It reads /proc itself (one process at a time, the PID from the folder's
// name), signals whole thread groups, switches users with system calls from the image's
// /etc/passwd and /etc/group as parsed here, unpacks its bundles with archive/tar and redacts
// secrets itself. Only the phase's own scripts (prepare, command) run with the image's /bin/sh.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const usage = "usage: runner launch ID SIZE [LIMIT [KEY [BASE [ARTIFACTS]]]] | " +
	"chain LIMIT SIZE [artifacts=N] ID[:KEY|:-]... | status ID | result ID [LIMIT [WAIT [ARTIFACTS]]] | " +
	"stop ID [LIMIT] | ready | artifacts LIMIT [ITEMS] | sweep | " +
	"put-secrets ID | take-secret INDEX KEY SIZE | install DEST | idle | fence TIMEOUT MESSAGE ADDR... [-- COMMAND [ARG...]]"

const (
	killAfter    = 5       // seconds between TERM and KILL
	outputLimit  = 65536   // the phase output's tail kept
	outputCap    = 4 << 20 // the phase output file's size past which its head is dropped
	defaultLimit = 262144
	maxBundle    = 1 << 30
)

// paths are the runner's folders (SHIPYARD_ROOT, default /shipyard).
type paths struct {
	root, phases, state, secretsSrc, drops, baseline, probe, scrubRoot string
	scrubDirs                                                          []string
	grace                                                              int
}

var P paths

// Per process: the base this launch uses, the base it took (printed once), whether task code
// was launched by this process (a chain), the artifacts limit of a `launch`/`result` that asks
// for the packed artifacts with a finished phase's result (0: not asked).
var (
	base      int64 = -1
	newBase   int64 = -1
	taskCode        = false
	artsLimit int64 = 0
	woken           = make(chan os.Signal, 1)
)

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// secretsMount: where the `secrets` container mounts the agent's Secrets
// (render.pod.SECRETS_MOUNT).
const secretsMount = "/run/shipyard-secrets"

// setup reads the runner's settings. In a trial pod they are its defaults, never its
// environment: that is the container's, which the task's image (ENV) and task.toml
// ([environment.env]) set, and a task that moved the scrubbed folders or the secrets' source
// would have the agent's Secrets reach its verifier. The variables serve the runner's tests.
func setup() {
	setting, secretsDefault := env, ""
	if inTrialPod() {
		setting, secretsDefault = func(_, def string) string { return def }, secretsMount
	}
	root := setting("SHIPYARD_ROOT", "/shipyard")
	if secretsDefault == "" {
		secretsDefault = root + "/secrets"
	}
	P = paths{
		root:       root,
		phases:     root + "/phases",
		state:      root + "/state",
		secretsSrc: setting("SHIPYARD_SECRETS_SRC", secretsDefault),
		drops:      root + "/secret-drops",
		baseline:   root + "/state/baseline",
		probe:      root + "/probe",
		scrubDirs:  strings.Fields(setting("SHIPYARD_SCRUB_DIRS", "/logs/agent /logs/artifacts")),
		scrubRoot:  setting("SHIPYARD_SCRUB_ROOT", "/"),
		grace:      3,
	}
	if g, err := strconv.Atoi(setting("SHIPYARD_LAUNCH_GRACE", "3")); err == nil && g >= 0 {
		P.grace = g
	}
}

// inTrialPod: PID 1 is the pod's pause (the pod shares one PID namespace) and the runner's
// read-only mount is there, neither of which a container of the pod can change (the runner's
// tests run it in PID namespaces of their own, whose PID 1 is also called pause).
func inTrialPod() bool {
	return value("/proc/1/comm", "") == "pause" && isFile(runnerPath)
}

// runnerPath: where a trial pod mounts the runner (conventions.RUNNER_PATH).
const runnerPath = "/shipyard/bin/runner"

func die(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(code)
}

func intArg(args []string, i int, def int64) int64 {
	if i >= len(args) || args[i] == "" {
		return def
	}
	v, err := strconv.ParseInt(args[i], 10, 64)
	if err != nil {
		die(2, "shipyard runner: %q is not a number", args[i])
	}
	return v
}

func strArg(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

func main() {
	// Not dumpable: task code (root, without CAP_SYS_PTRACE) cannot read this process's memory,
	// environment or open files through /proc or ptrace, e.g. a chain's upload held for a
	// phase after the agent's (docs/runner-protocol.md, "chain"). Every runner process does
	// this first; an exec'd child (task code) is dumpable again from its own execve.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
	setup()
	syscall.Umask(0o022)
	signal.Notify(woken, syscall.SIGUSR1)
	if len(os.Args) < 2 {
		die(2, usage)
	}
	cmd, args := os.Args[1], os.Args[2:]
	need := func(n int) {
		if len(args) < n {
			die(2, usage)
		}
	}
	switch cmd {
	case "launch":
		need(2)
		artsLimit = intArg(args, 5, 0)
		os.Exit(launch(args[0], intArg(args, 1, 0), intArg(args, 2, defaultLimit), strArg(args, 3),
			intArg(args, 4, -1)))
	case "chain":
		need(3)
		os.Exit(chain(intArg(args, 0, defaultLimit), intArg(args, 1, 0), args[2:]))
	case "supervise":
		need(1)
		b, _ := strconv.ParseInt(os.Getenv("SHIPYARD_BASE"), 10, 64)
		if os.Getenv("SHIPYARD_BASE") != "" {
			base = b
		}
		os.Unsetenv("SHIPYARD_BASE")
		supervise(args[0])
	case "status":
		need(1)
		fmt.Println(status(args[0]))
	case "result":
		need(1)
		artsLimit = intArg(args, 3, 0)
		result(args[0], intArg(args, 1, defaultLimit), intArg(args, 2, 0))
	case "stop":
		need(1)
		stop(args[0], intArg(args, 1, defaultLimit))
	case "ready":
		if value(P.state+"/running", "") != "" {
			os.Exit(1)
		}
	case "artifacts":
		need(1)
		os.Exit(artifacts(intArg(args, 0, 0), strArg(args, 1)))
	case "sweep":
		sweep()
	case "put-secrets":
		need(1)
		putSecrets(args[0])
	case "install":
		need(1)
		install(args[0])
	case "take-secret":
		need(3)
		takeSecret(args[0], args[1], intArg(args, 2, -1))
	case "idle":
		// The `secrets` container's command: it runs nothing of the task's image (whose
		// `sleep` a task may replace), and ends with the pod (SIGTERM's default action).
		for {
			time.Sleep(time.Hour)
		}
	case "fence":
		// No program of the task's image starts before the pod's policy is in force: as the
		// pod's `fence` init container (nothing after it), or as a container's command, which
		// then becomes the image's ENTRYPOINT and the container's arguments (after `--`). Its
		// failure is the container's termination message, which the operator reports.
		need(3)
		addrs, then := splitCommand(args[2:])
		if err := fence(addrs, time.Duration(intArg(args, 0, 0))*time.Second, args[1]); err != nil {
			_ = os.WriteFile("/dev/termination-log", []byte(err.Error()), 0o644)
			die(1, "%s", err.Error())
		}
		if len(then) > 0 {
			markStarted()
			execCommand(then)
		}
	default:
		die(2, usage)
	}
}
