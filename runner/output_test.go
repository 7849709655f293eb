package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// capped: an output file opened as the supervisor opens it, with capOutput watching it every
// period; the returned stop ends the watch and waits for its last word.
func capped(t *testing.T, limit int64, period time.Duration) (*os.File, string, func()) {
	path := filepath.Join(t.TempDir(), "output")
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		capOutput("agent", out, path, limit, period, stop)
		close(done)
	}()
	return out, path, func() {
		close(stop)
		<-done
	}
}

// A command that writes far more than the cap to its output keeps the file near the cap, and
// the file ends with what it wrote last.
func TestAChattyCommandsOutputFileStaysNearItsCap(t *testing.T) {
	const limit = 1 << 20
	out, path, stop := capped(t, limit, 10*time.Millisecond)
	// 64 MiB in 1 MiB chunks with a pause between, then a last line.
	cmd := exec.Command("/bin/sh", "-c",
		`i=0; while [ $i -lt 64 ]; do head -c 1048576 /dev/zero | tr '\0' y; sleep 0.02; i=$((i+1)); done; echo; printf the-end`)
	cmd.Stdout, cmd.Stderr = out, out
	largest := int64(0)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for running := true; running; {
		select {
		case err := <-waited:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		case <-time.After(5 * time.Millisecond):
		}
		if st, err := os.Stat(path); err == nil && st.Size() > largest {
			largest = st.Size()
		}
	}
	time.Sleep(50 * time.Millisecond)
	stop()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) > limit+outputLimit+(8<<20) || largest > 32<<20 {
		t.Fatalf("the output file grew to %d bytes (now %d) against a cap of %d", largest, len(data), limit)
	}
	text := string(data)
	// The marker heads the kept tail, unless the writer appended between the truncation and it.
	if !regexp.MustCompile(`\[\.\.\. \d+ bytes of this output dropped \.\.\.\]\n`).MatchString(text) {
		t.Fatalf("no line says what was dropped: %q", text[:min(len(text), 80)])
	}
	head, last, _ := strings.Cut(text, "\nthe-end\n")
	if !strings.HasSuffix(head, "yyyy") ||
		!regexp.MustCompile(`^shipyard runner: phase agent: \d+ bytes of its output dropped \(past 1048576 bytes, its tail kept\)\n$`).MatchString(last) {
		t.Fatalf("the tail and then the runner's line were not kept: %q", text[max(0, len(text)-160):])
	}
}

// Output under the cap is left as written.
func TestOutputUnderItsCapIsUntouched(t *testing.T) {
	out, path, stop := capped(t, 1<<20, 5*time.Millisecond)
	want := strings.Repeat("line\n", 1000)
	_, _ = out.WriteString(want)
	time.Sleep(50 * time.Millisecond)
	stop()
	if data, _ := os.ReadFile(path); string(data) != want {
		t.Fatalf("output under the cap changed: %d bytes, want %d", len(data), len(want))
	}
}
