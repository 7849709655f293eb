package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFencePassesWhenNothingAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused from now on, as under a rejecting policy
	began := time.Now()
	if err := fence([]string{addr}, 5*time.Second, "open: {}"); err != nil {
		t.Fatalf("fence failed: %v", err)
	}
	if time.Since(began) > time.Second {
		t.Fatalf("a refused address took %v", time.Since(began))
	}
}

func TestFenceWaitsThenFailsNamingTheAddressStillReached(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	began := time.Now()
	err = fence([]string{"127.0.0.1:1", l.Addr().String()}, time.Second, "still reached {}")
	if err == nil || !strings.Contains(err.Error(), "still reached "+l.Addr().String()) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(began); d < time.Second {
		t.Fatalf("gave up after %v, before its time", d)
	}
}

func TestFenceGoesOnOnceTheAddressCloses(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	time.AfterFunc(400*time.Millisecond, func() { l.Close() }) // the policy comes into force
	if err := fence([]string{addr}, 10*time.Second, "open: {}"); err != nil {
		t.Fatalf("fence failed: %v", err)
	}
}

func TestSplitCommandTakesWhatFollowsTheDashes(t *testing.T) {
	addrs, then := splitCommand([]string{"1.2.3.4:443", "--", "/entry", "--", "sleep"})
	if strings.Join(addrs, ",") != "1.2.3.4:443" || strings.Join(then, " ") != "/entry -- sleep" {
		t.Fatalf("addrs %v, command %v", addrs, then)
	}
	if _, then := splitCommand([]string{"1.2.3.4:443"}); then != nil {
		t.Fatalf("no command expected, got %v", then)
	}
}

func TestLookPathFollowsTheContainersPath(t *testing.T) {
	dir := t.TempDir()
	prog := dir + "/entry"
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/data", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := lookPath("entry", "/nonexistent:"+dir); err != nil || got != prog {
		t.Fatalf("lookPath: %q, %v", got, err)
	}
	if _, err := lookPath("data", dir); err == nil {
		t.Fatal("a file that is not executable was found")
	}
	if got, _ := lookPath("/abs/prog", ""); got != "/abs/prog" {
		t.Fatalf("a path with a slash is taken as it is, got %q", got)
	}
}

// The runner as a container's command: the fence first, then the image's ENTRYPOINT with the
// container's arguments, in the runner's place (same PID); nothing of it when the fence fails.
func TestFenceThenExecsTheCommandOnlyOnceThePolicyHolds(t *testing.T) {
	runner := runnerBinary(t)
	refused := closedAddr(t)
	out, err := exec.Command(runner, "fence", "5", "open: {}", refused, "--",
		"sh", "-c", `echo "ran as $0 $1"`, "entry", "arg").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ran as entry arg" {
		t.Fatalf("fence then exec: %v, %q", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	marker := filepath.Join(t.TempDir(), "ran")
	out, err = exec.Command(runner, "fence", "1", "still open: {}", l.Addr().String(), "--",
		"sh", "-c", "touch "+marker).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "still open: "+l.Addr().String()) {
		t.Fatalf("an open address must fail the fence: %v, %q", err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the fence failed")
	}
	out, err = exec.Command(runner, "fence", "5", "open: {}", refused, "--",
		"no-such-program").CombinedOutput()
	if code := exitStatus(err); code != 127 || !strings.Contains(string(out), "no-such-program") {
		t.Fatalf("a missing program: exit %d, %q", code, out)
	}
}

func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func exitStatus(err error) int {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode()
	}
	return 0
}

// The pod's first launch takes its base only once a start fence has let the image's
// ENTRYPOINT start (and its moment to start its daemons): at once without a start fence.
func TestTheFirstBaseWaitsForTheImagesEntrypointToStart(t *testing.T) {
	P.root = t.TempDir()
	if got := awaitStart(); got != 0 {
		t.Fatalf("no start fence in sight: %d", got)
	}
	began := nowTicks()
	markStarted()
	got := awaitStart()
	if got < began+int64(startSettle/(10*time.Millisecond)) {
		t.Fatalf("the base %d is not past the marker %d and its settle", got, began)
	}
	if err := os.WriteFile(startMarker(), []byte("99999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	awaitStart()
	if waited := time.Since(start); waited > startSettle+2*time.Second {
		t.Fatalf("a marker from the future held the launch %v", waited)
	}
}

var (
	built     string
	buildOnce sync.Once
	buildErr  error
)

// runnerBinary: this package built once, for the tests that run it as a process.
func runnerBinary(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "runner-test")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "runner")
		if out, err := exec.Command("go", "build", "-o", built, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// A warm pod's Secret file is written by the runner from stdin (no program of the image sees
// it): exactly SIZE bytes, 0600 in a 0700 folder; a name that climbs out is refused.
func TestTakeSecretWritesExactlyTheValueGiven(t *testing.T) {
	src := t.TempDir()
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(runnerBinary(t), append([]string{"take-secret"}, args...)...)
		cmd.Env = append(os.Environ(), "SHIPYARD_SECRETS_SRC="+src, "SHIPYARD_ROOT="+t.TempDir())
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("sk-value-and-more", "0", "KEY", "8"); err != nil {
		t.Fatalf("take-secret: %v %s", err, out)
	}
	data, err := os.ReadFile(src + "/0/KEY")
	if err != nil || string(data) != "sk-value" {
		t.Fatalf("written %q, %v", data, err)
	}
	if st, _ := os.Stat(src + "/0/KEY"); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if st, _ := os.Stat(src + "/0"); st.Mode().Perm() != 0o700 {
		t.Fatalf("folder mode %v", st.Mode())
	}
	for _, bad := range [][]string{{"..", "KEY", "1"}, {"0", "../x", "1"}, {"0", "", "1"}} {
		if out, err := run("x", bad...); err == nil {
			t.Fatalf("%v accepted: %s", bad, out)
		}
	}
	if out, err := run("short", "0", "K2", "100"); err == nil {
		t.Fatalf("a short value accepted: %s", out)
	}
}
