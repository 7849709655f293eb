package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
)

// resultOf: what `result ID` prints for a done phase, asked for the artifacts up to LIMIT (0:
// not asked), with TAR (nil: none) packed.
func resultOf(t *testing.T, tarData []byte, limit int64) string {
	t.Helper()
	t.Setenv("SHIPYARD_ROOT", t.TempDir())
	setup()
	s := stateDir("verifier")
	if err := os.MkdirAll(s, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"rc": "0\n", "timed_out": "0\n", "done": "",
		"output": "ok\n"} {
		writeFile(s+"/"+name, v)
	}
	if tarData != nil {
		if err := os.WriteFile(P.state+"/artifacts.tar", tarData, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	artsLimit = limit
	result("verifier", defaultLimit, 0)
	os.Stdout, artsLimit = stdout, 0
	w.Close()
	out, _ := io.ReadAll(r)
	return string(out)
}

func head(text string) string { return strings.SplitN(text, "\n", 2)[0] }

func TestAResultAskedForTheArtifactsCarriesTheTar(t *testing.T) {
	tarData := bytes.Repeat([]byte("artifact "), 20)
	text := resultOf(t, tarData, 1000)
	if !strings.Contains(head(text), " artifacts=180 ") {
		t.Fatalf("head: %q", head(text))
	}
	_, body, ok := strings.Cut(text, "== %artifacts 180\n")
	if !ok || !strings.HasSuffix(body, "%%end\n") {
		t.Fatalf("no tar in %q", text)
	}
	data, err := base64.StdEncoding.DecodeString(
		strings.ReplaceAll(strings.TrimSuffix(body, "%%end\n"), "\n", ""))
	if err != nil || !bytes.Equal(data, tarData) {
		t.Fatalf("the tar came back as %q (%v)", data, err)
	}
}

func TestATarOverTheLimitIsRefusedAndNoneIsSaid(t *testing.T) {
	text := resultOf(t, make([]byte, 2000), 1000)
	if !strings.Contains(head(text), " artifacts=2000 ") || strings.Contains(text, "%artifacts") {
		t.Fatalf("over the limit: %q", text)
	}
	text = resultOf(t, nil, 1000)
	if !strings.Contains(head(text), " artifacts=none ") || strings.Contains(text, "%artifacts") {
		t.Fatalf("none packed: %q", text)
	}
	text = resultOf(t, []byte{}, 1000) // none staged: an empty file, carried empty
	if !strings.Contains(text, " artifacts=0 ") || !strings.Contains(text, "== %artifacts 0\n%%end") {
		t.Fatalf("an empty tar: %q", text)
	}
}

func TestAResultNotAskedSaysNothingOfTheArtifacts(t *testing.T) {
	text := resultOf(t, []byte("tar"), 0)
	if strings.Contains(text, "artifacts") {
		t.Fatalf("not asked: %q", text)
	}
}

func TestAFolderInTheCollectListGivesItsOtherRegularFiles(t *testing.T) {
	t.Setenv("SHIPYARD_ROOT", t.TempDir())
	setup()
	dir := t.TempDir() + "/verifier/"
	if err := os.MkdirAll(dir+"sub", 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(dir+"test-stdout.txt", "named on its own\n")
	writeFile(dir+"sites.log", "PASS a\n")
	writeFile(dir+".hidden", "x")
	writeFile(dir+"sub/deep.txt", "x")
	writeFile(dir+"big.log", strings.Repeat("y", folderFileLimit+10))
	if err := os.Symlink("/etc/hostname", dir+"link.txt"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < maxFolderFiles+5; i++ {
		writeFile(dir+fmt.Sprintf("z%03d", i), "z")
	}
	if err := os.MkdirAll(phaseDir("verifier"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(phaseDir("verifier")+"/collect", dir+"test-stdout.txt\n"+dir+"\n")
	s := stateDir("verifier")
	if err := os.MkdirAll(s, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"rc": "0\n", "timed_out": "0\n", "done": ""} {
		writeFile(s+"/"+name, v)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan []byte)
	go func() { out, _ := io.ReadAll(r); read <- out }() // more than a pipe holds
	stdout := os.Stdout
	os.Stdout = w
	result("verifier", defaultLimit, 0)
	os.Stdout = stdout
	w.Close()
	out := <-read
	var headers []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "== ") {
			headers = append(headers, strings.TrimPrefix(line, "== "+dir))
		}
	}
	want := []string{"test-stdout.txt 17", fmt.Sprintf("big.log %d", folderFileLimit+10),
		"sites.log 7"}
	for i := 0; i < maxFolderFiles-2; i++ {
		want = append(want, fmt.Sprintf("z%03d 1", i))
	}
	if strings.Join(headers, ",") != strings.Join(want, ",") {
		t.Fatalf("files: %v\nwant %v", headers, want)
	}
}

func TestAFoldersFileIsReadOnlyAsARegularFileNeverThroughALinkOrAFifo(t *testing.T) {
	dir := t.TempDir()
	writeFile(dir+"/real", "secret\n")
	if err := os.Symlink(dir+"/real", dir+"/link"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(dir+"/fifo", 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link", "fifo"} {
		if data, _, err := tailRegular(dir+"/"+name, 100); err == nil {
			t.Fatalf("%s read: %q", name, data)
		}
	}
	if data, size, err := tailRegular(dir+"/real", 100); err != nil || string(data) != "secret\n" || size != 7 {
		t.Fatalf("a regular file: %q %d %v", data, size, err)
	}
}
