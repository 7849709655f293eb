package main

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// A container whose command is the runner's start fence (`fence ... -- ENTRYPOINT...`) runs
// its image's ENTRYPOINT only once the pod's policy is in force, which may be after the
// operator's first launch began. That launch takes the pod's base (what ran before it is the
// image's own, docs/runner-protocol.md "The sweep"), so it waits for the ENTRYPOINT's start
// first: else what the ENTRYPOINT starts in the background counts as the agent's.

// startSettle: the ENTRYPOINT's own moment to start its daemons, after its exec.
const startSettle = 300 * time.Millisecond

// startMarker: written by the start fence just before the exec (the uptime, in clock ticks).
func startMarker() string { return P.root + "/started" }

// markStarted: best effort (a read-only /shipyard is not Shipyard's pod); `awaitStart` copes
// without.
func markStarted() {
	_ = os.WriteFile(startMarker(), []byte(strconv.FormatInt(nowTicks(), 10)+"\n"), 0o644)
}

// awaitStart: the base for the pod's first launch once a start fence has let the image's
// ENTRYPOINT start (0: the pod has no start fence, the launch's own start tick serves).
func awaitStart() int64 {
	deadline, seen := time.Now().Add(10*time.Second), false
	for {
		// The fence's process first, then its marker: a fence that passes in between wrote the
		// marker before its exec, so it is found.
		limit, running := startFence()
		if t, err := strconv.ParseInt(strings.TrimSpace(value(startMarker(), "")), 10, 64); err == nil {
			settle := t + int64(startSettle/(10*time.Millisecond))
			until := time.Now().Add(startSettle + time.Second) // a marker from the future
			for nowTicks() < settle && time.Now().Before(until) {
				time.Sleep(20 * time.Millisecond)
			}
			return nowTicks()
		}
		switch {
		case !running && !seen:
			return 0
		case !running: // it passed (its marker unwritten) or failed
			time.Sleep(startSettle)
			return nowTicks()
		case !seen:
			seen, deadline = true, time.Now().Add(limit+5*time.Second)
		case time.Now().After(deadline):
			return nowTicks()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startFence: whether a process of the pod is a start fence still waiting, and its limit.
func startFence() (time.Duration, bool) {
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if !numeric(e.Name()) || e.Name() == self {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) < 4 || !strings.HasSuffix(args[0], "/runner") || args[1] != "fence" {
			continue
		}
		for _, a := range args[3:] {
			if a == "--" {
				secs, _ := strconv.Atoi(args[2])
				// At most 2 minutes: a process of the ENTRYPOINT may pose as a fence.
				return time.Duration(min(max(secs, 1), 120)) * time.Second, true
			}
		}
	}
	return 0, false
}

// nowTicks: the time since boot in clock ticks (USER_HZ, 100 on Linux), as /proc/PID/stat's
// start times.
func nowTicks() int64 {
	raw, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	secs, err := strconv.ParseFloat(strings.Fields(string(raw) + " 0")[0], 64)
	if err != nil {
		return 0
	}
	return int64(secs * 100)
}
