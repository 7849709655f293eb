package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// shellWords: the words of a file of shell assignments as render/phase_bundle.py writes them
// (`K=V`, `export K=V`, values quoted by shlex.quote: bare, '...', "'" joined), unquoted.
func shellWords(text string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '\'':
			inWord = true
			j := strings.IndexByte(text[i+1:], '\'')
			if j < 0 {
				cur.WriteString(text[i+1:])
				i = len(text)
			} else {
				cur.WriteString(text[i+1 : i+1+j])
				i += j + 1
			}
		case c == '"':
			inWord = true
			for i++; i < len(text) && text[i] != '"'; i++ {
				if text[i] == '\\' && i+1 < len(text) && strings.IndexByte("$`\"\\\n", text[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(text[i])
			}
		case c == '\\' && i+1 < len(text):
			inWord = true
			i++
			if text[i] != '\n' {
				cur.WriteByte(text[i])
			}
		case c == ' ' || c == '\t' || c == '\n' || c == ';':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// assignments: K -> V of a spec or env file, in order (`export` words skipped).
func assignments(path string) ([]string, map[string]string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, map[string]string{}
	}
	var keys []string
	values := map[string]string{}
	for _, w := range shellWords(string(data)) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || !shellName(k) {
			continue
		}
		if _, seen := values[k]; !seen {
			keys = append(keys, k)
		}
		values[k] = v
	}
	return keys, values
}

type account struct {
	name      string
	uid, gid  uint32
	home      string
	groups    []uint32
	switching bool
}

// lookupUser: USER_NAME (a name or a uid) from the image's /etc/passwd and /etc/group, parsed
// here (no `su`, no shell string). A uid without an entry runs with gid 0 and HOME=/.
func lookupUser(user string) (account, error) {
	if user == "" || user == "root" || user == "0" {
		return account{name: "root"}, nil
	}
	data, _ := os.ReadFile("/etc/passwd")
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Split(l, ":")
		if len(f) < 7 {
			continue
		}
		if f[0] != user && f[2] != user {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		a := account{name: f[0], uid: uint32(uid), gid: uint32(gid), home: f[5], switching: true}
		if a.home == "" {
			a.home = "/"
		}
		a.groups = groupsOf(a.name, a.gid)
		return a, nil
	}
	if numeric(user) {
		uid, err := strconv.ParseUint(user, 10, 32)
		if err == nil {
			return account{name: user, uid: uint32(uid), home: "/", groups: []uint32{0},
				switching: true}, nil
		}
	}
	return account{}, fmt.Errorf("user %q does not exist in /etc/passwd", user)
}

func groupsOf(name string, primary uint32) []uint32 {
	groups := []uint32{primary}
	data, _ := os.ReadFile("/etc/group")
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Split(l, ":")
		if len(f) < 4 {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == name {
				if g, err := strconv.ParseUint(f[2], 10, 32); err == nil && uint32(g) != primary {
					groups = append(groups, uint32(g))
				}
			}
		}
	}
	return groups
}

// process is how a program runs as the account: a session of its own, the account's
// credentials (no su, no shell string) and its login variables when switching users.
func (a account) process(environ []string) (*syscall.SysProcAttr, []string) {
	attr := &syscall.SysProcAttr{Setsid: true}
	if a.switching {
		attr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
		environ = withEnv(environ, "HOME", a.home)
		environ = withEnv(environ, "USER", a.name)
		environ = withEnv(environ, "LOGNAME", a.name)
		environ = withEnv(environ, "SHELL", "/bin/sh")
	}
	return attr, environ
}

func withEnv(environ []string, key, val string) []string {
	out := environ[:0:0]
	for _, e := range environ {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return append(out, key+"="+val)
}

// exitCode: as a shell's `wait` reports it (128+N for a signal).
func exitCode(err error, state *os.ProcessState) int {
	if state == nil {
		if err != nil {
			return 127
		}
		return 0
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

// capOutput keeps a running phase's output file (appended to by the phase's processes) small:
// only its last outputLimit bytes ever leave the pod, so past limit bytes it keeps that tail
// behind a line saying how much was dropped, checked every period until stop. A chatty or
// hostile command (`yes`) would otherwise fill the node's disk with it. At stop, what it
// dropped is said once more on the file's last line, which the operator keeps with the
// phase's log (its `shipyard runner:` lines).
func capOutput(id string, out *os.File, path string, limit int64, period time.Duration,
	stop <-chan struct{}) {
	var dropped int64
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			if dropped > 0 {
				// On a line of its own: the operator keeps the lines that start so.
				if last, _, _ := tail(path, 1); len(last) == 1 && last[0] != '\n' {
					_, _ = out.WriteString("\n")
				}
				fmt.Fprintf(out, "shipyard runner: phase %s: %d bytes of its output dropped "+
					"(past %d bytes, its tail kept)\n", id, dropped, limit)
			}
			return
		case <-ticker.C:
		}
		st, err := out.Stat()
		if err != nil || st.Size() <= limit {
			continue
		}
		data, size, err := tail(path, outputLimit)
		if err != nil {
			continue
		}
		// The writers append (O_APPEND): after the truncation they go on at the new end.
		if out.Truncate(0) != nil {
			continue
		}
		dropped += size - int64(len(data))
		fmt.Fprintf(out, "[... %d bytes of this output dropped ...]\n", dropped)
		_, _ = out.Write(data)
	}
}

func openOutput(s string) (*os.File, error) {
	return os.OpenFile(s+"/output", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
}

// supervise ID: the phase's prepare (root), then its command (as its user, in its folder, with
// its environment, under its timeout), the sweep, the scrub, and the record.
func supervise(id string) {
	// Files changed since (less the kernel's coarse timestamp granularity) are the phase's.
	began := time.Now().Add(-10 * time.Millisecond)
	p, s := phaseDir(id), stateDir(id)
	// Its own PID on record before anything of the phase runs (the launcher writes it too,
	// once this process exists): `status` finds a supervisor that was killed.
	writeAtomic(s+"/supervisor", fmt.Sprintf("%d\n", os.Getpid()))
	_, spec := assignments(p + "/spec")
	isOwn := spec["OWN"] == "1"
	secrets := spec["SECRETS"] == "1"
	out, err := openOutput(s)
	if err != nil {
		finish(id, 126, 0, fmt.Sprintf("shipyard runner: phase %s: %v", id, err))
		return
	}
	defer out.Close()
	devnull, _ := os.Open("/dev/null")
	inherited := os.Environ()
	if exists(p + "/prepare.ops") {
		// Shipyard's own steps, done by the runner (no program of the image runs them).
		env := append(inherited, "SHIPYARD_PAYLOAD="+p+"/payload")
		if err := runOps(p+"/prepare.ops", p+"/payload", env, out); err != nil {
			finish(id, 126, 0, fmt.Sprintf("shipyard runner: preparing phase %s failed: %v", id, err))
			return
		}
	} else if exists(p + "/prepare") {
		cmd := exec.Command("/bin/sh", p+"/prepare")
		cmd.Env = append(inherited, "SHIPYARD_PAYLOAD="+p+"/payload")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, out, out
		if err := cmd.Run(); err != nil {
			finish(id, 126, 0, fmt.Sprintf("shipyard runner: preparing phase %s failed", id))
			return
		}
	}
	_ = os.RemoveAll(p + "/payload")
	// The command's environment: the runner's, the phase's, its secrets (never written to disk
	// by the runner); the phase's env file is gone before the command starts.
	environ := inherited
	keys, vals := assignments(p + "/env")
	for _, k := range keys {
		environ = withEnv(environ, k, vals[k])
	}
	if secrets {
		for _, kv := range secretEnv(id) {
			k, v, _ := strings.Cut(kv, "=")
			environ = withEnv(environ, k, v)
		}
	}
	_ = os.Remove(p + "/env")
	_ = os.Remove(p + "/env.sh")
	acct, err := lookupUser(spec["USER_NAME"])
	if err != nil {
		finish(id, 126, 0, "shipyard runner: "+err.Error())
		return
	}
	cmd := exec.Command("/bin/sh", p+"/command")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, out, out
	attr, environ := acct.process(environ)
	if acct.switching {
		_ = os.Chmod(p, 0o711)
	}
	cmd.SysProcAttr = attr
	cmd.Env = environ
	if cwd := spec["CWD"]; cwd != "" {
		_ = os.MkdirAll(cwd, 0o755)
		cmd.Dir = cwd
	}
	oomBefore := oomKills()
	var timedOut atomic.Bool
	rc, child := 0, 0
	if exists(p + "/command.ops") {
		// The collect phase: Shipyard's own steps (its hooks are task code, run as their user).
		if err := runOps(p+"/command.ops", p+"/payload", environ, out); err != nil {
			if !errors.Is(err, errReported) {
				fmt.Fprintf(out, "shipyard runner: phase %s: %v\n", id, err)
			}
			rc = 1
		}
	} else if err := cmd.Start(); err != nil {
		// The runner's failure, not the phase's (no /bin/sh, an environment no process can
		// hold): 126 with its line, which fails the phase as the runner's, never as the
		// command's own exit code (an oracle's is recorded and the trial verified).
		fmt.Fprintf(out, "shipyard runner: phase %s could not start: %v\n", id, err)
		rc = 126
	} else {
		writeFile(s+"/pid", fmt.Sprintf("%d\n", cmd.Process.Pid))
		child = cmd.Process.Pid
		stopCap, capped := make(chan struct{}), make(chan struct{})
		go func() {
			capOutput(id, out, s+"/output", outputCap, 50*time.Millisecond, stopCap)
			close(capped)
		}()
		var timer *time.Timer
		if t, err := strconv.Atoi(spec["TIMEOUT"]); err == nil && t > 0 {
			timer = time.AfterFunc(time.Duration(t)*time.Second, func() {
				timedOut.Store(true)
				_ = syscall.Kill(-child, syscall.SIGTERM)
				time.AfterFunc(killAfter*time.Second, func() {
					_ = syscall.Kill(-child, syscall.SIGKILL)
				})
			})
		}
		err := cmd.Wait()
		close(stopCap)
		<-capped
		if timer != nil {
			timer.Stop()
		}
		rc = exitCode(err, cmd.ProcessState)
	}
	// Shipyard's own phase (no task code) leaves nothing to end; what a phase of task code
	// left running is ended and named in its output, unless the trial keeps it (KEEP=1: only
	// processes holding a secret are ended).
	switch {
	case isOwn:
	case spec["KEEP"] == "1":
		// A process between its fork and its exec still carries its parent's environment: a
		// moment for what the phase just started (e.g. through `env -i`) to become itself.
		time.Sleep(100 * time.Millisecond)
		sweepHolders()
	default:
		sweepReporting(s+"/output", child)
	}
	if secrets {
		scrub(P.drops + "/" + id)
		scrubChanged(P.drops+"/"+id, began)
	}
	writeFile(s+"/oom_killed", fmt.Sprintf("%d\n", oomKills()-oomBefore))
	t := 0
	if timedOut.Load() {
		t = 1
	}
	finish(id, rc, t, "")
}
