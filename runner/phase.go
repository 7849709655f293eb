package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func stateDir(id string) string { return P.state + "/" + id }
func phaseDir(id string) string { return P.phases + "/" + id }

// validID: a phase id is one path element (the operator's ids are DNS-label-like).
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00\n")
}

// makeDirs: the runner's folders, made by the pod's first launch; /shipyard becomes root's
// alone (task code of another user can neither swap what the runner keeps nor plant a folder).
func makeDirs() {
	_ = os.MkdirAll(P.phases, 0o711)
	_ = os.MkdirAll(P.state, 0o700)
	_ = os.Chmod(P.root, 0o755)
}

// readExactly: n bytes of stdin (an upload cut short is not launched).
func readExactly(n int64) ([]byte, int64, error) {
	if n < 0 || n > maxBundle {
		return nil, 0, fmt.Errorf("a bundle of %d bytes", n)
	}
	buf := make([]byte, n)
	got, err := io.ReadFull(os.Stdin, buf)
	return buf, int64(got), err
}

// launch ID SIZE LIMIT KEY BASE (docs/runner-protocol.md).
func launch(id string, size, limit int64, key string, givenBase int64) int {
	if !validID(id) {
		die(2, "shipyard runner: %q is not a phase id", id)
	}
	if !isDir(P.state) {
		makeDirs()
	}
	bundle, got, err := readExactly(size)
	if err != nil {
		fmt.Fprintf(os.Stderr, "shipyard runner: phase %s: received %d of %d bytes; not launched\n",
			id, got, size)
		return 3
	}
	launchBundle(id, bundle, limit, key, givenBase)
	return 0
}

// chain LIMIT SIZE [artifacts=N] ID[:KEY]...: one tar of ID.tar bundles, launched one after
// the other while each ends within the grace with exit code 0. A key given as `-` is the tar's
// `ID.key` (not on the command line, which every process of the pod can read: a phase chained
// after task code keeps its key from that code). With artifacts=N the last phase's answer, once
// done, carries the packed artifacts tar (as `result ID LIMIT 0 N`).
func chain(limit, size int64, args []string) int {
	var arts int64
	var phases []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "artifacts="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				die(2, "shipyard runner: %q is not a number", v)
			}
			arts = n
		} else {
			phases = append(phases, a)
		}
	}
	data, got, err := readExactly(size)
	var bundles map[string][]byte
	if err == nil {
		bundles, err = readChain(data)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "shipyard runner: received %d of %d bytes of the chained phases; "+
			"none launched\n", got, size)
		return 1
	}
	if !isDir(P.state) {
		makeDirs()
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for i, phase := range phases {
		id, key, _ := strings.Cut(phase, ":")
		if !validID(id) {
			break
		}
		if key == "-" {
			key = strings.TrimSpace(string(bundles[id+".key"]))
			if key == "" { // a hidden key is never empty: not launched without it
				fmt.Fprintf(os.Stderr, "shipyard runner: no key of phase %s in the chain\n", id)
				break
			}
		}
		if i == len(phases)-1 {
			artsLimit = arts
		}
		fmt.Fprintf(out, "=== %s\n", id)
		out.Flush()
		launchBundle(id, bundles[id+".tar"], limit, key, -1)
		s := stateDir(id)
		if !exists(s+"/done") || value(s+"/rc", "") != "0" {
			break
		}
		settled(id)
	}
	return 0
}

// settled: until the supervisor of a phase that is done has also left it (`finish` writes
// `done`, then clears `running` and the probe's busy file), at most 2 s. The next phase of a
// chain starts only then: started in between, its `running` and busy file could be cleared
// by the previous phase's `finish` (the probe then never turns idle at its end and the
// operator waits for its deadline) or its busy file left for good.
func settled(id string) {
	for i := 0; i < 200; i++ {
		if value(P.state+"/running", "") != id && !exists(P.probe+"/busy") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readChain(data []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(io.LimitReader(tr, maxBundle))
		if err != nil {
			return nil, err
		}
		out[h.Name] = body
	}
}

// launchBundle: `launch` of a bundle received whole.
func launchBundle(id string, bundle []byte, limit int64, key string, givenBase int64) {
	if givenBase >= 0 {
		base = givenBase
	} else if base < 0 {
		if !exists(P.baseline) {
			t := startTicks(os.Getpid())
			if started := awaitStart(); started > t {
				t = started
			}
			writeFile(P.baseline, fmt.Sprintf("%d\n", t))
			newBase = t
		}
		base = sweepBase()
	}
	s, p := stateDir(id), phaseDir(id)
	forged := false
	if key != "" && isDir(s) && value(s+"/key", "") != key {
		// Not ours (a launch writes its key right after making the folder): whatever made it
		// is swept first, then the phase starts afresh.
		sweep()
		_ = os.RemoveAll(s)
		forged = true
	}
	if err := os.Mkdir(s, 0o755); err != nil {
		result(id, limit, 0) // already launched: the operator retried; never run twice
		return
	}
	if key != "" {
		writeFile(s+"/key", key+"\n")
	}
	if forged {
		appendFile(s+"/output", fmt.Sprintf("shipyard runner: phase %s: a state made before its "+
			"launch (not by it) was discarded\n", id))
	}
	// Nothing to sweep while no task code ran since the base was taken (this process's own
	// first launches, of Shipyard's own phases). A phase of a trial that keeps the agent's
	// processes (KEEP=1, read from the bundle before it is unpacked) ends only those holding
	// a secret.
	if bundleKeeps(bundle) {
		sweepHolders()
	} else if newBase < 0 || taskCode {
		sweep()
	}
	for _, d := range children(P.drops) {
		if d != id {
			_ = os.RemoveAll(P.drops + "/" + d)
		}
	}
	t := time.Now()
	writeFile(s+"/started", t.UTC().Format("2006-01-02T15:04:05Z")+"\n")
	writeFile(s+"/started_epoch", fmt.Sprintf("%d\n", t.Unix()))
	_ = os.RemoveAll(p)
	_ = os.MkdirAll(p, 0o755)
	if err := unpack(bundle, p); err != nil {
		finish(id, 126, 0, fmt.Sprintf("shipyard runner: could not unpack phase %s: %v", id, err))
		result(id, limit, 0)
		return
	}
	if !own(p + "/spec") {
		taskCode = true
	}
	writeFile(P.state+"/running", id+"\n")
	busy()
	addWaiter(s) // before the supervisor exists: its `finish` cannot miss us
	if err := startSupervisor(id); err != nil {
		finish(id, 126, 0, fmt.Sprintf("shipyard runner: could not start the supervisor of "+
			"phase %s: %v", id, err))
	}
	waitDone(s, P.grace)
	result(id, limit, 0)
}

func startSupervisor(id string) error {
	devnull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()
	env := append(os.Environ(), fmt.Sprintf("SHIPYARD_BASE=%d", base))
	proc, err := os.StartProcess("/proc/self/exe", []string{"runner", "supervise", id},
		&os.ProcAttr{Env: env, Files: []*os.File{devnull, devnull, devnull},
			Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		return err
	}
	writeAtomic(stateDir(id)+"/supervisor", fmt.Sprintf("%d\n", proc.Pid))
	return proc.Release()
}

// unpack: the phase bundle into its folder: regular files and folders only, each under it.
func unpack(bundle []byte, dir string) error {
	tr := tar.NewReader(bytes.NewReader(bundle))
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			if n == 0 {
				return errors.New("an empty bundle")
			}
			return nil
		}
		if err != nil {
			return err
		}
		n++
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || strings.HasPrefix(name, "/") || name == ".." ||
			strings.HasPrefix(name, "../") {
			return fmt.Errorf("%q lies outside the phase", h.Name)
		}
		target := dir + "/" + name
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(path.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW,
				os.FileMode(h.Mode)&0o755)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			_ = os.Chmod(target, os.FileMode(h.Mode)&0o755)
		default:
			return fmt.Errorf("%q is not a regular file", h.Name)
		}
	}
}

// bundleKeeps: the bundle's spec says KEEP=1.
func bundleKeeps(bundle []byte) bool {
	tr := tar.NewReader(bytes.NewReader(bundle))
	for {
		h, err := tr.Next()
		if err != nil {
			return false
		}
		if path.Clean(strings.TrimPrefix(h.Name, "./")) == "spec" {
			spec, _ := io.ReadAll(io.LimitReader(tr, 1<<16))
			for _, w := range shellWords(string(spec)) {
				if w == "KEEP=1" {
					return true
				}
			}
			return false
		}
	}
}

// own: the phase is one of Shipyard's own (OWN=1 in its spec: no task code runs in it).
func own(spec string) bool {
	for _, l := range lines(spec) {
		if l == "OWN=1" {
			return true
		}
	}
	return false
}

// Waiting without polling: a process that waits for a phase adds itself to the phase's
// waiters (its PID and start tick, so that a PID reused since is never signalled); the phase's
// `finish` sends each SIGUSR1.
var wasWoken = false

func addWaiter(s string) {
	wasWoken = false
	select {
	case <-woken: // a wake for an earlier phase of this process
	default:
	}
	appendFile(s+"/waiters", fmt.Sprintf("%d %d\n", os.Getpid(), startTicks(os.Getpid())))
}

func wake(s string) {
	for _, l := range lines(s + "/waiters") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid <= 1 {
			continue
		}
		if strconv.FormatInt(startTicks(pid), 10) == f[1] {
			_ = syscall.Kill(pid, syscall.SIGUSR1)
		}
	}
}

// nap: sleep, until woken if sooner.
func nap(seconds int64) {
	if wasWoken {
		return
	}
	t := time.NewTimer(time.Duration(seconds) * time.Second)
	defer t.Stop()
	select {
	case <-woken:
		wasWoken = true
	case <-t.C:
	}
}

func waitDone(s string, seconds int) {
	if !exists(s + "/done") {
		nap(int64(seconds))
	}
}

// waitResult: as waitDone, and not past a supervisor found gone (looked for every 10 s).
func waitResult(s string, seconds int64) {
	addWaiter(s)
	left := seconds
	for !exists(s+"/done") && left > 0 && !wasWoken {
		if left < 10 {
			nap(left)
			return
		}
		nap(10)
		left -= 10
		if supervisorLost(s) {
			return
		}
	}
}

// supervisorLost: a launch that died before its supervisor started, or a supervisor that was
// killed, would otherwise leave the phase running forever.
func supervisorLost(s string) bool {
	if exists(s + "/supervisor") {
		pid, _ := strconv.Atoi(value(s+"/supervisor", ""))
		return !alive(pid) && !exists(s+"/done")
	}
	started, _ := strconv.ParseInt(value(s+"/started_epoch", "0"), 10, 64)
	return time.Now().Unix()-started > 60
}

// What the probe container serves (world-readable): /busy while a phase runs.
func busy() {
	if isDir(P.probe) {
		_ = os.WriteFile(P.probe+"/busy", nil, 0o644)
		_ = os.Chmod(P.probe+"/busy", 0o644)
	}
}

func idle() { _ = os.Remove(P.probe + "/busy") }

func finish(id string, rc int, timedOut int, msg string) {
	s := stateDir(id)
	if msg != "" {
		appendFile(s+"/output", msg+"\n")
	}
	writeFile(s+"/rc", fmt.Sprintf("%d\n", rc))
	writeFile(s+"/timed_out", fmt.Sprintf("%d\n", timedOut))
	writeFile(s+"/finished", now()+"\n")
	writeFile(s+"/done", "")
	// Only then not busy: the readiness flip wakes the operator, whose `result` must find it
	// done. A waiting `result` or launch is woken.
	if value(P.state+"/running", "") == id {
		writeFile(P.state+"/running", "")
		idle()
	}
	wake(s)
}

func status(id string) string {
	s := stateDir(id)
	nb := ""
	if newBase >= 0 {
		nb = fmt.Sprintf(" base=%d", newBase)
	}
	if !validID(id) || !isDir(s) {
		return "state=none"
	}
	if exists(s + "/done") {
		return fmt.Sprintf("state=done rc=%s timed_out=%s oom_killed=%s started=%s finished=%s%s",
			value(s+"/rc", ""), value(s+"/timed_out", "0"), value(s+"/oom_killed", "0"),
			value(s+"/started", ""), value(s+"/finished", ""), nb)
	}
	if supervisorLost(s) {
		finish(id, 125, 0, fmt.Sprintf("shipyard runner: the supervisor of phase %s disappeared", id))
		return status(id)
	}
	return fmt.Sprintf("state=running started=%s%s", value(s+"/started", ""), nb)
}

// result ID LIMIT [WAIT [ARTIFACTS]]: the status line, then (done) each collected file as
// `== NAME SIZE` and its base64 body, then `%%end`. With ARTIFACTS (a launch's too), a done
// phase's status line also says `artifacts=SIZE` (the packed tar's, `artifacts=none` when
// none was packed) and the tar follows the files as `== %artifacts SIZE` when it is at most
// ARTIFACTS bytes (over it: refused, as `artifacts` refuses it): the trial's end then needs no
// exec of its own to read it. No collected file has that name (theirs are absolute paths).
func result(id string, limit, wait int64) {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if wait > 0 && validID(id) && isDir(stateDir(id)) {
		waitResult(stateDir(id), wait)
	}
	line := status(id)
	if !strings.HasPrefix(line, "state=done") {
		fmt.Fprintln(out, line)
		return
	}
	var tarData []byte
	carried := false
	if artsLimit > 0 {
		data, size, code := packedArtifacts(artsLimit)
		switch code {
		case 0:
			line += fmt.Sprintf(" artifacts=%d", size)
			tarData, carried = data, true
		case artifactsOver:
			line += fmt.Sprintf(" artifacts=%d", size)
		default:
			line += " artifacts=none"
		}
	}
	fmt.Fprintln(out, line+" result=1 end=1")
	var patterns [][]byte
	redacting := isDir(P.drops)
	if redacting {
		patterns = secretPatterns(P.drops)
	}
	emit := func(name, file string, keep, limit int64, read func(string, int64) ([]byte, int64, error)) {
		data, size, err := read(file, limit)
		if err != nil {
			return
		}
		if keep >= 0 && size > keep {
			size = keep
		}
		if redacting {
			data = redact(data, patterns)
		}
		writeBase64(out, name, size, data)
	}
	output := stateDir(id) + "/output"
	if isFile(output) {
		emit("output", output, outputLimit, min(limit, outputLimit), tail)
	}
	collect := lines(phaseDir(id) + "/collect")
	named := map[string]bool{}
	for _, f := range collect {
		named[f] = true
	}
	for _, f := range collect {
		if strings.HasSuffix(f, "/") {
			// A folder: the rest of what the phase wrote there (Harbor keeps the verifier's
			// whole folder), bounded in number and size.
			for _, name := range folderFiles(f, named) {
				emit(f+name, f+name, -1, min(limit, folderFileLimit), tailRegular)
			}
		} else if f != "" && isFile(f) {
			emit(f, f, -1, limit, tail)
		}
	}
	if carried {
		writeBase64(out, "%artifacts", int64(len(tarData)), tarData)
	}
	out.WriteString("%%end\n")
}

// The most a collected folder gives a result: files, and the tail of each.
const (
	maxFolderFiles  = 32
	folderFileLimit = 65536
)

// folderFiles: the regular files directly in DIR (no links, folders or hidden files), sorted,
// except those `named` on their own, at most maxFolderFiles.
func folderFiles(dir string, named map[string]bool) []string {
	var files []string
	for _, name := range children(dir) {
		st, err := os.Lstat(dir + name)
		if err != nil || !st.Mode().IsRegular() || named[dir+name] || strings.Contains(name, "\n") {
			continue
		}
		if files = append(files, name); len(files) == maxFolderFiles {
			break
		}
	}
	return files
}

// writeBase64: `== NAME SIZE`, then DATA in base64 lines of 76.
func writeBase64(out *bufio.Writer, name string, size int64, data []byte) {
	fmt.Fprintf(out, "== %s %d\n", name, size)
	text := base64.StdEncoding.EncodeToString(data)
	for len(text) > 76 {
		out.WriteString(text[:76] + "\n")
		text = text[76:]
	}
	if text != "" {
		out.WriteString(text + "\n")
	}
}

// stop ID LIMIT: TERM the phase's process group, KILL after killAfter seconds, then `result`.
func stop(id string, limit int64) {
	s := stateDir(id)
	child, _ := strconv.Atoi(value(s+"/pid", ""))
	if validID(id) && child > 1 && !exists(s+"/done") {
		addWaiter(s)
		_ = syscall.Kill(-child, syscall.SIGTERM)
		waitDone(s, killAfter)
		_ = syscall.Kill(-child, syscall.SIGKILL)
		wasWoken = false
		waitDone(s, 2)
	}
	result(id, limit, 0)
}

// The exit codes of `artifacts`: none packed, or the tar over the limit.
const (
	artifactsNone = 4
	artifactsOver = 5
)

// artifacts LIMIT [ITEMS]: the tar the collect phase packed, when it is at most LIMIT bytes.
// With ITEMS (the pack step's items as base64 JSON) and none packed, they are packed first: a
// trial that ended before its verification (Harbor collects its artifacts best effort).
func artifacts(limit int64, items string) int {
	if items != "" && !exists(P.state+"/artifacts.tar") {
		var list []packItem
		raw, err := base64.StdEncoding.DecodeString(items)
		if err == nil {
			err = json.Unmarshal(raw, &list)
		}
		if err != nil {
			die(2, "shipyard runner: the artifacts to pack are not base64 JSON: %v", err)
		}
		if !isDir(P.state) {
			makeDirs()
		}
		if err := pack(P.state+"/artifacts.tar", list, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "shipyard runner: packing the artifacts: %v\n", err)
		}
	}
	data, size, code := packedArtifacts(limit)
	switch code {
	case artifactsNone:
		fmt.Fprintln(os.Stderr, "shipyard runner: no artifacts were packed")
	case artifactsOver:
		fmt.Fprintf(os.Stderr, "shipyard runner: the artifacts tar is %d bytes, over the limit "+
			"of %d\n", size, limit)
	}
	if code != 0 {
		return code
	}
	if _, err := os.Stdout.Write(data); err != nil {
		return 1
	}
	return 0
}

// packedArtifacts: the packed tar (a regular file in the runner's root-only state folder) and
// its size when it is at most LIMIT bytes; else its size and artifactsOver, or artifactsNone.
func packedArtifacts(limit int64) ([]byte, int64, int) {
	f, err := os.Open(P.state + "/artifacts.tar")
	if err != nil {
		return nil, 0, artifactsNone
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, 0, artifactsNone
	}
	if st.Size() > limit {
		return nil, st.Size(), artifactsOver
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, artifactsNone
	}
	if int64(len(data)) > limit { // grew since its size was read
		return nil, int64(len(data)), artifactsOver
	}
	return data, int64(len(data)), 0
}
