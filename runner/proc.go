package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procStat: state, parent, process group and start tick (fields 3, 4, 5 and 22) of a /proc
// stat file. The command name, which may hold spaces, parentheses and newlines, is skipped
// through the file's last ") ". gone: the file cannot be read (the process ended); ok false:
// it does not parse.
type procStat struct {
	state string
	ppid  int64
	pgrp  int64
	start int64
}

func readStat(path string) (st procStat, gone bool, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return st, true, false
	}
	i := bytes.LastIndex(data, []byte(") "))
	if i < 0 {
		return st, false, false
	}
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 20 {
		return st, false, false
	}
	ppid, err1 := strconv.ParseInt(f[1], 10, 64)
	start, err2 := strconv.ParseInt(f[19], 10, 64)
	pgrp, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return st, false, false
	}
	return procStat{f[0], ppid, pgrp, start}, false, true
}

// startTicks: the start time of a process, in clock ticks since boot (-1 when unknown).
func startTicks(pid int) int64 {
	st, _, ok := readStat(fmt.Sprintf("/proc/%d/stat", pid))
	if !ok {
		return -1
	}
	return st.start
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	st, gone, ok := readStat(fmt.Sprintf("/proc/%d/stat", pid))
	if gone {
		return false
	}
	return !ok || (st.state != "Z" && st.state != "X")
}

// liveThreads: a process has a thread that is not a zombie (a thread-group leader that ended
// with pthread_exit is a zombie while its other threads run on).
func liveThreads(dir string) bool {
	tasks, _ := os.ReadDir(dir + "/task")
	for _, t := range tasks {
		st, _, ok := readStat(dir + "/task/" + t.Name() + "/stat")
		if ok && st.state != "Z" && st.state != "X" {
			return true
		}
	}
	return false
}

func numeric(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// sweepTargets: the processes a sweep ends (docs/runner-protocol.md, "The sweep"). Each is read
// from its own /proc/PID; a process is looked at with its ancestors, nearest first: this
// process keeps it; an exec session (PPid 0, started since the base) keeps it; a process from
// before the base is kept itself but not what it started since; PID 1, or an ancestor that
// cannot be read, ends it. A stat that does not parse is ended (fail closed), and so is a
// zombie leader whose threads live on.
func sweepTargets(b int64) []int {
	self := os.Getpid()
	type rec struct{ ppid, start int64 }
	procs := map[int]rec{}
	var order, targets []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if !numeric(e.Name()) {
			continue
		}
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		st, gone, ok := readStat(dir + "/stat")
		if gone {
			continue
		}
		if !ok {
			if pid != 1 && pid != self {
				targets = append(targets, pid)
			}
			continue
		}
		if (st.state == "Z" || st.state == "X") && !liveThreads(dir) {
			continue
		}
		procs[pid] = rec{st.ppid, st.start}
		order = append(order, pid)
	}
	for _, pid := range order {
		a, hops, keep := pid, 0, false
	walk:
		for {
			switch {
			case a == self:
				keep = true
				break walk
			case a == 1 || hops >= 4096:
				break walk
			}
			r, ok := procs[a]
			switch {
			case !ok:
				break walk // an ancestor gone: an orphan of pause soon
			case r.start < b:
				keep = a == pid
				break walk
			case r.ppid == 0:
				keep = true
				break walk
			}
			a, hops = int(r.ppid), hops+1
		}
		if !keep && pid != 1 {
			targets = append(targets, pid)
		}
	}
	return targets
}

// sweepBase: the base this process uses (the operator's, else the pod's first launch's).
func sweepBase() int64 {
	if base >= 0 {
		return base
	}
	b, err := strconv.ParseInt(value(P.baseline, "0"), 10, 64)
	if err != nil {
		return 0
	}
	return b
}

// sweep: stop, then kill, every target until none is left (STOP first: a forking loop cannot
// outrun it). Only in a trial pod, whose PID 1 is the sandbox's pause (shareProcessNamespace).
func sweep() { sweepReporting("", 0) }

// sweepReporting: a sweep; with report (a phase's output file) what it ends in its first round
// is named there, each name once (a task whose tests expect a service the agent started scores
// 0 so: the trial's verifier.agentProcesses Keep is Harbor's behaviour). With group (the
// phase's command, a session and process group of its own), what is left of that group is
// killed first, in one signal: the kernel lets no fork escape a group kill, so a fork bomb the
// command left behind ends at once, while the rounds below fight it for the pod's CPU and
// PIDs (in CI it outlived 50 of them into the verifier's phase).
func sweepReporting(report string, group int) {
	if value("/proc/1/comm", "") != "pause" {
		return
	}
	b := sweepBase()
	for round := 0; round < 50; round++ {
		targets := sweepTargets(b)
		if len(targets) == 0 {
			return
		}
		if round == 0 && report != "" {
			var names []string
			seen := map[string]bool{}
			for _, pid := range targets {
				name := value(fmt.Sprintf("/proc/%d/comm", pid), "")
				if name != "" && !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
			appendFile(report, fmt.Sprintf("shipyard runner: the phase left processes running, "+
				"now ended: %s (verifier.agentProcesses Keep keeps them, as Harbor does)\n",
				strings.Join(names, " ")))
		}
		if round == 0 && group > 1 && inGroup(targets, group) {
			// Only while a target is in it: a group with no member left frees its ID.
			_ = syscall.Kill(-group, syscall.SIGKILL)
			time.Sleep(20 * time.Millisecond)
			if targets = sweepTargets(b); len(targets) == 0 {
				return
			}
		}
		for _, pid := range stopAll(b, targets) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "shipyard runner: processes were still starting after 50 sweeps")
}

// inGroup: one of the targets is in process group `group`.
func inGroup(targets []int, group int) bool {
	for _, pid := range targets {
		if st, _, ok := readStat(fmt.Sprintf("/proc/%d/stat", pid)); ok && st.pgrp == int64(group) {
			return true
		}
	}
	return false
}

// stopAll: STOP the targets, listed again until a listing finds every one stopped, and only
// then the targets to kill. A stopped process cannot fork, and nothing is killed before all
// are stopped: a fork bomb at the pod's PID limit cannot refill the PIDs a kill frees with
// children of the bombers a listing missed (stopping and killing in one pass never caught up
// with it: it outlived 50 sweeps into the verifier's phase).
func stopAll(b int64, targets []int) []int {
	for pass := 0; pass < 200 && len(targets) > 0; pass++ {
		running := false
		for _, pid := range targets {
			st, gone, ok := readStat(fmt.Sprintf("/proc/%d/stat", pid))
			if gone || (ok && (st.state == "T" || st.state == "t")) {
				continue
			}
			// A zombie leader (its threads live on) or a stat that does not parse is stopped
			// too (the signal reaches its whole thread group), without a state to wait for.
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			running = running || (ok && st.state != "Z" && st.state != "X")
		}
		if !running {
			break
		}
		time.Sleep(2 * time.Millisecond)
		targets = sweepTargets(b)
	}
	return targets
}

// oomKills: how many processes the kernel has OOM-killed in this container (cgroup v2, else v1).
func oomKills() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.events",
		"/sys/fs/cgroup/memory/memory.oom_control"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			k, v, _ := strings.Cut(l, " ")
			if k == "oom_kill" {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		break
	}
	return 0
}

// sweepHolders: with KEEP=1 the sweep spares what the phases left running, but not a process
// whose environment holds a value of the agent's Secrets (any phase's drop still on disk): a
// secret never reaches the verifier, even through /proc/PID/environ.
func sweepHolders() {
	if value("/proc/1/comm", "") != "pause" || !isDir(P.drops) {
		return
	}
	patterns := secretPatterns(P.drops)
	if len(patterns) == 0 {
		return
	}
	for _, pid := range sweepTargets(sweepBase()) {
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err == nil && containsAny(environ, patterns) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
