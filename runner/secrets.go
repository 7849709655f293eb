package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

const redactedMark = "[REDACTED]"

// putSecrets ID (run in the `secrets` container): the mounted Secret files copied into the
// drop of phase ID, with their base64 forms in DROP/.encoded; prints `secrets=ok` or
// `secrets=missing missing=I,J` (volumes that are empty: their Secrets do not exist).
func putSecrets(id string) {
	d := P.drops + "/" + id
	_ = os.MkdirAll(P.drops, 0o711)
	_ = os.Chmod(P.drops, 0o711)
	_ = os.RemoveAll(d)
	if err := os.MkdirAll(d, 0o700); err != nil {
		die(1, "shipyard runner: %v", err)
	}
	var missing []string
	var encoded bytes.Buffer
	for _, name := range children(P.secretsSrc) {
		dir := P.secretsSrc + "/" + name
		if !isDir(dir) {
			continue
		}
		keys := children(dir)
		if len(keys) == 0 {
			missing = append(missing, name)
		}
		_ = os.MkdirAll(d+"/"+name, 0o700)
		for _, key := range keys {
			if !isFile(dir + "/" + key) {
				continue
			}
			data, err := os.ReadFile(dir + "/" + key)
			if err != nil {
				continue
			}
			_ = os.WriteFile(d+"/"+name+"/"+key, data, 0o600)
			for _, form := range encodedForms(data) {
				encoded.WriteString(form + "\n")
			}
		}
	}
	_ = os.WriteFile(d+"/.encoded", encoded.Bytes(), 0o600)
	if len(missing) > 0 {
		fmt.Printf("secrets=missing missing=%s\n", strings.Join(missing, ","))
	} else {
		fmt.Println("secrets=ok")
	}
}

// encodedForms: a value's base64 forms (as is, with a newline, and the core that a longer
// base64 text holds at each of the other two alignments).
func encodedForms(data []byte) []string {
	var forms []string
	for _, nl := range []string{"", "\n"} {
		for _, pad := range []string{"", "x", "xx"} {
			text := base64.RawStdEncoding.EncodeToString(append(append([]byte(pad), data...), nl...))
			if pad == "" {
				forms = append(forms, text)
			} else if len(text) > 8 {
				forms = append(forms, text[4:len(text)-4])
			}
		}
	}
	return forms
}

// secretPatterns: every line of at least 4 bytes of the files in a folder (all drops, or one),
// longest first.
func secretPatterns(dir string) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, l := range bytes.Split(data, []byte("\n")) {
			if len(l) >= 4 && !seen[string(l)] {
				seen[string(l)] = true
				out = append(out, l)
			}
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// redact: each pattern replaced by the mark, never inside a mark already there (a value such
// as "REDACTED" ends, and a file scrubbed once reads the same when returned redacted).
func redact(data []byte, patterns [][]byte) []byte {
	mark := []byte(redactedMark)
	parts := bytes.Split(data, mark)
	for i, part := range parts {
		for _, p := range patterns {
			if bytes.Contains(part, p) {
				part = bytes.ReplaceAll(part, p, mark)
			}
		}
		parts[i] = part
	}
	return bytes.Join(parts, mark)
}

func containsAny(data []byte, patterns [][]byte) bool {
	for _, p := range patterns {
		if bytes.Contains(data, p) {
			return true
		}
	}
	return false
}

// secretEnv: the phase's secrets as environment entries (keys that are shell names only).
func secretEnv(id string) []string {
	var out []string
	drop := P.drops + "/" + id
	for _, vol := range children(drop) {
		if !isDir(drop + "/" + vol) {
			continue
		}
		for _, key := range children(drop + "/" + vol) {
			if !shellName(key) || !isFile(drop+"/"+vol+"/"+key) {
				continue
			}
			data, err := os.ReadFile(drop + "/" + vol + "/" + key)
			if err == nil {
				out = append(out, key+"="+string(data))
			}
		}
	}
	return out
}

func shellName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// scrub DROP: once a phase given secrets has ended (its processes swept), its values are
// redacted in the regular files under the scrub folders (links are not followed), in place.
func scrub(drop string) {
	if !isDir(drop) {
		return
	}
	patterns := secretPatterns(drop)
	if len(patterns) == 0 {
		return
	}
	for _, dir := range P.scrubDirs {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			scrubFile(path, patterns)
			return nil
		})
	}
}

// scrubChanged DROP SINCE: the values in DROP redacted in every regular file of the container
// (SHIPYARD_SCRUB_ROOT, default /) changed since SINCE (its ctime, which task code cannot set
// back), so that secrets an agent wrote anywhere never reach a shared verifier. Not followed:
// links, /proc, /sys, /dev, the drops, the runner's own binary; read-only files are left.
func scrubChanged(drop string, since time.Time) {
	if !isDir(drop) {
		return
	}
	patterns := secretPatterns(drop)
	if len(patterns) == 0 {
		return
	}
	root := P.scrubRoot
	skip := map[string]bool{"/proc": true, "/sys": true, "/dev": true, P.drops: true,
		P.root + "/bin": true}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if skip[path] {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok &&
			!time.Unix(st.Ctim.Sec, st.Ctim.Nsec).Before(since) {
			scrubFile(path, patterns)
		}
		return nil
	})
}

const scrubInMemory = 64 << 20

func scrubFile(path string, patterns [][]byte) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return
	}
	if st.Size() > scrubInMemory {
		scrubLarge(f, patterns)
		return
	}
	data, err := io.ReadAll(f)
	if err != nil || !containsAny(data, patterns) {
		return
	}
	clean := redact(data, patterns)
	if err := f.Truncate(0); err != nil {
		return
	}
	_, _ = f.WriteAt(clean, 0)
}

// scrubLarge: a file too large to hold redacted through a root-only scratch file, chunk by
// chunk (a value is never cut: the longest value's length less one byte is carried over).
func scrubLarge(f *os.File, patterns [][]byte) {
	longest := len(patterns[0])
	tmp, err := os.CreateTemp(P.state, "scrub.")
	if err != nil {
		return
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	found := false
	buf := make([]byte, 0, (1<<20)+longest)
	chunk := make([]byte, 1<<20)
	for eof := false; !eof; {
		n, err := f.Read(chunk)
		buf = append(buf, chunk[:n]...)
		eof = err != nil
		cut := len(buf) - (longest - 1)
		if eof || cut < 0 {
			cut = max(cut, 0)
			if eof {
				cut = len(buf)
			}
		}
		pos := 0
		for pos < cut {
			start, size := -1, 0
			for _, p := range patterns {
				if i := bytes.Index(buf[pos:], p); i >= 0 && (start < 0 || pos+i < start) {
					start, size = pos+i, len(p)
				}
			}
			if start < 0 || start >= cut {
				break
			}
			found = true
			_, _ = tmp.Write(buf[pos:start])
			_, _ = tmp.WriteString(redactedMark)
			pos = start + size
		}
		if pos < cut {
			_, _ = tmp.Write(buf[pos:cut])
			pos = cut
		}
		buf = append(buf[:0], buf[pos:]...)
	}
	if !found {
		return
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil || f.Truncate(0) != nil {
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err == nil {
		_, _ = io.Copy(f, tmp)
	}
}

// takeSecret INDEX KEY SIZE: a warm pod's Secret file, SIZE bytes on stdin, written where a
// mounted Secret would be (P.secretsSrc/INDEX/KEY, folders 0700, the file 0600), by the runner
// itself: no program of the task's image (the `secrets` container's) sees the value. The
// exec's stdin is not closed after the value, so exactly SIZE bytes are read.
func takeSecret(index, key string, size int64) {
	for _, part := range []string{index, key} {
		if part == "" || part == "." || part == ".." || strings.Contains(part, "/") {
			die(2, "shipyard runner: take-secret: %q is not a file name", part)
		}
	}
	if size < 0 || size > maxBundle {
		die(2, "shipyard runner: take-secret: size %d", size)
	}
	dir := P.secretsSrc + "/" + index
	if err := os.MkdirAll(dir, 0o700); err != nil {
		die(1, "shipyard runner: %v", err)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(os.Stdin, data); err != nil {
		die(1, "shipyard runner: take-secret: %d bytes expected on stdin: %v", size, err)
	}
	if err := os.WriteFile(dir+"/"+key, data, 0o600); err != nil {
		die(1, "shipyard runner: %v", err)
	}
}
