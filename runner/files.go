package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// value: the file's first line, or def when it is missing or empty.
func value(path, def string) string {
	f, err := os.Open(path)
	if err != nil {
		return def
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 4096)).ReadString('\n')
	line = strings.TrimRight(line, "\n")
	if line == "" {
		return def
	}
	return line
}

func writeFile(path, content string) {
	_ = os.WriteFile(path, []byte(content), 0o644)
}

// writeAtomic: the file is never seen empty or half written (two processes write it).
func writeAtomic(path, content string) {
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	if os.WriteFile(tmp, []byte(content), 0o644) == nil {
		_ = os.Rename(tmp, path)
	}
}

func appendFile(path, content string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(content)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func now() string { return time.Now().UTC().Format("2006-01-02T15:04:05Z") }

// tail: the last n bytes of a file.
func tail(path string, n int64) ([]byte, int64, error) {
	return tailOpened(path, n, 0)
}

// tailRegular: `tail` of a regular file only, never through a link (one swapped in after the
// folder was listed is not followed): a collected folder's files.
func tailRegular(path string, n int64) ([]byte, int64, error) {
	return tailOpened(path, n, syscall.O_NOFOLLOW|syscall.O_NONBLOCK)
}

func tailOpened(path string, n int64, flags int) ([]byte, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|flags, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if flags != 0 && !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s: not a regular file", path)
	}
	size := st.Size()
	if n < 0 {
		n = 0
	}
	if size > n {
		if _, err := f.Seek(size-n, io.SeekStart); err != nil {
			return nil, size, err
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, n))
	return data, size, err
}

// lines: a file's lines (without their newline).
func lines(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	if len(data) == 0 {
		return nil
	}
	return strings.Split(string(data), "\n")
}

// children: the names in a folder, sorted, without hidden ones (as a shell glob `DIR/*`).
func children(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

// install DEST: this binary copied to DEST (the trial pod's init container), atomically.
func install(dest string) {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		die(1, "shipyard runner: %v", err)
	}
	defer self.Close()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		die(1, "shipyard runner: %v", err)
	}
	tmp := dest + ".partial"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		die(1, "shipyard runner: %v", err)
	}
	if _, err := io.Copy(out, self); err != nil {
		die(1, "shipyard runner: %v", err)
	}
	if err := out.Close(); err != nil {
		die(1, "shipyard runner: %v", err)
	}
	_ = os.Chmod(tmp, 0o755)
	if err := os.Rename(tmp, dest); err != nil {
		die(1, "shipyard runner: %v", err)
	}
}
