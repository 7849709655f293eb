package main

// Shipyard's own steps of a phase (files into place, collect hooks, the artifacts packed), done
// by the runner itself: a bundle's `prepare.ops` (and the collect phase's `command.ops`) is one
// JSON object a line, each a step below. runner.sh runs the bundle's `prepare`/`command` shell
// instead, which does the same with the image's cp, mkdir, chmod, chown, rm, tar, su, timeout.

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type packItem struct {
	Source  string   `json:"source"`
	Exclude []string `json:"exclude,omitempty"`
}

// op is one step: mkdir (Paths, Mode), rm (Paths), copy (Src, Dst; Optional: skip a missing
// Src), chmod (Paths, Mode: octal or "+x"), chown (Paths relative to the folder, User:
// failures ignored), untar (Src tar, Dst folder; nothing when Src is missing or empty), hook
// (Command through `bash -lc`, as User, under Timeout: failures ignored), sh (Command through
// `sh -ec`, as root: an agent's install commands), pack (Items into Dst, a tar; never fails),
// healthcheck (Harbor's loop: Command through `sh -c` as User under Timeout, again every
// StartInterval s during StartPeriod s, then every Interval s until Retries failures in a row),
// fence (no task code before the pod's network policy is in force: each of Addrs, ip:port,
// refuses a connection or leaves it unanswered; after Timeout s the step fails with Command,
// its "{}" the address still reached).
type op struct {
	Op       string     `json:"op"`
	Paths    []string   `json:"paths,omitempty"`
	Mode     string     `json:"mode,omitempty"`
	Src      string     `json:"src,omitempty"`
	Dst      string     `json:"dst,omitempty"`
	Optional bool       `json:"optional,omitempty"`
	User     string     `json:"user,omitempty"`
	Command  string     `json:"command,omitempty"`
	Timeout  int        `json:"timeout,omitempty"`
	Items    []packItem `json:"items,omitempty"`
	Addrs    []string   `json:"addrs,omitempty"`

	StartPeriod   float64 `json:"start_period,omitempty"`
	StartInterval float64 `json:"start_interval,omitempty"`
	Interval      float64 `json:"interval,omitempty"`
	Retries       int     `json:"retries,omitempty"`
}

// runOps: the steps of FILE in order, `$SHIPYARD_PAYLOAD` in a path being the phase's payload;
// the first that fails ends them (an error naming it).
func runOps(file, payload string, environ []string, out *os.File) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var o op
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			return fmt.Errorf("%s line %d: %v", path.Base(file), n, err)
		}
		expand := func(p string) string { return strings.ReplaceAll(p, "$SHIPYARD_PAYLOAD", payload) }
		o.Src, o.Dst = expand(o.Src), expand(o.Dst)
		for i := range o.Paths {
			o.Paths[i] = expand(o.Paths[i])
		}
		if err := o.run(environ, out); err != nil {
			if errors.Is(err, errReported) {
				return err
			}
			return fmt.Errorf("%s %v", o.Op, err)
		}
	}
	return sc.Err()
}

func (o op) run(environ []string, out *os.File) error {
	switch o.Op {
	case "mkdir":
		mode, err := parseMode(o.Mode, 0o755)
		if err != nil {
			return err
		}
		for _, p := range o.Paths {
			if err := realDir(p); err != nil {
				return err
			}
			if err := chmodDir(p, mode); err != nil {
				return err
			}
		}
	case "rm":
		for _, p := range o.Paths {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
	case "copy":
		if _, err := os.Lstat(o.Src); err != nil && o.Optional {
			return nil
		}
		return copyTree(o.Src, o.Dst)
	case "chmod":
		for _, p := range o.Paths {
			st, err := os.Stat(p)
			if err != nil {
				return err
			}
			mode := st.Mode().Perm() | st.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
			if o.Mode == "+x" {
				mode |= 0o111
			} else if mode, err = parseMode(o.Mode, 0); err != nil {
				return err
			}
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		}
	case "chown":
		acct, err := lookupUser(o.User)
		if err != nil {
			fmt.Fprintf(out, "shipyard runner: chown: %v (ignored)\n", err)
			return nil
		}
		for _, p := range o.Paths {
			_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
				if err == nil {
					_ = os.Lchown(q, int(acct.uid), -1)
				}
				return nil
			})
		}
	case "untar":
		st, err := os.Stat(o.Src)
		if err != nil || st.Size() == 0 {
			return nil
		}
		f, err := os.Open(o.Src)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := os.MkdirAll(o.Dst, 0o700); err != nil {
			return err
		}
		return extract(f, o.Dst, true)
	case "hook":
		if err := runAs(o.User, []string{"bash", "-lc", o.Command}, o.Timeout, environ,
			out); err != nil {
			fmt.Fprintln(out, "collect hook failed (ignored)")
		}
	case "sh":
		return runAs("", []string{"/bin/sh", "-ec", o.Command}, 0, environ, out)
	case "healthcheck":
		return o.healthcheck(environ, out)
	case "fence":
		return fence(o.Addrs, time.Duration(o.Timeout)*time.Second, o.Command)
	case "pack":
		if err := pack(o.Dst, o.Items, out); err != nil {
			fmt.Fprintf(out, "shipyard runner: packing the artifacts: %v\n", err)
		}
	default:
		return fmt.Errorf("is not a step the runner knows")
	}
	return nil
}

// errReported: a step that failed and said why in the phase's output itself.
var errReported = errors.New("reported")

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (o op) healthcheck(environ []string, out *os.File) error {
	start, failures := time.Now(), 0
	for {
		if runAs(o.User, []string{"/bin/sh", "-c", o.Command}, o.Timeout, environ, out) == nil {
			return nil
		}
		if time.Since(start) < seconds(o.StartPeriod) {
			time.Sleep(seconds(o.StartInterval))
			continue
		}
		failures++
		if failures >= o.Retries {
			fmt.Fprintf(out, "Healthcheck failed after %d consecutive retries: %s\n", o.Retries,
				o.Command)
			return errReported
		}
		time.Sleep(seconds(o.Interval))
	}
}

func parseMode(text string, def fs.FileMode) (fs.FileMode, error) {
	if text == "" {
		return def, nil
	}
	v, err := strconv.ParseUint(text, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("mode %q", text)
	}
	m := fs.FileMode(v & 0o777)
	if v&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	if v&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if v&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	return m, nil
}

// chmodDir: a folder's mode, never through a link put in its place.
func chmodDir(p string, mode fs.FileMode) error {
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a link", p)
	}
	return os.Chmod(p, mode)
}

// realDir: P made a folder (its parents as `mkdir -p` makes them); anything else at P itself
// (a file, a link) is replaced, so nothing is written through a link planted there.
func realDir(p string) error {
	if st, err := os.Lstat(p); err == nil {
		if st.IsDir() {
			return nil
		}
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return nil
}

// copyTree: `cp -a`: a folder's contents merged into DST (made a folder), a file replacing
// DST; modes and times kept, owned by root. Links are copied as links; what DST holds is
// replaced, never written through.
func copyTree(src, dst string) error {
	st, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case st.IsDir():
		if err := realDir(dst); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyTree(src+"/"+e.Name(), dst+"/"+e.Name()); err != nil {
				return err
			}
		}
		if err := os.Chmod(dst, st.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetgid)); err != nil {
			return err
		}
	case st.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := replaceable(dst); err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case st.Mode().IsRegular():
		if err := replaceable(dst); err != nil {
			return err
		}
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		if err := writeNew(dst, in, st.Mode().Perm()); err != nil {
			return err
		}
		if err := os.Chmod(dst, st.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
			return err
		}
	default:
		return nil // devices, FIFOs, sockets: never in a payload
	}
	t := st.ModTime()
	return os.Chtimes(dst, t, t)
}

// replaceable: DST's parent made, and whatever DST is removed (a folder too, as `rm -rf`).
func replaceable(dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.RemoveAll(dst)
}

func writeNew(dst string, in io.Reader, mode fs.FileMode) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, in)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// extract: a tar of regular files and folders under DIR (names relative, no `..`); with
// keepMode, each entry's permission bits and time as the tar says (`tar -x --no-same-owner`).
func extract(r io.Reader, dir string, keepMode bool) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if strings.HasPrefix(name, "/") || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%q lies outside", h.Name)
		}
		target := dir + "/" + name
		mode := os.FileMode(h.Mode) & 0o777
		switch h.Typeflag {
		case tar.TypeDir:
			if err := realDir(target); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := replaceable(target); err != nil {
				return err
			}
			if err := writeNew(target, tr, mode); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%q is not a regular file", h.Name)
		}
		if keepMode {
			_ = os.Chmod(target, mode)
			_ = os.Chtimes(target, h.ModTime, h.ModTime)
		}
	}
}

// runAs: ARGV as USER (the image's /etc/passwd as parsed by the runner; empty: root) in its
// own session, output to OUT, its whole process group ended after TIMEOUT seconds (0: none).
func runAs(user string, argv []string, timeout int, environ []string, out *os.File) error {
	acct, err := lookupUser(user)
	if err != nil {
		fmt.Fprintf(out, "shipyard runner: %v\n", err)
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	devnull, _ := os.Open("/dev/null")
	if devnull != nil {
		defer devnull.Close()
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, out, out
	attr, environ := acct.process(environ)
	cmd.SysProcAttr, cmd.Env = attr, environ
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(out, "shipyard runner: %s: %v\n", argv[0], err)
		return err
	}
	if timeout > 0 {
		child := cmd.Process.Pid
		timer := time.AfterFunc(time.Duration(timeout)*time.Second, func() {
			_ = syscall.Kill(-child, syscall.SIGTERM)
			time.AfterFunc(killAfter*time.Second, func() { _ = syscall.Kill(-child, syscall.SIGKILL) })
		})
		defer timer.Stop()
	}
	return cmd.Wait()
}

// pack: the artifacts into the tar DST (written whole, then renamed into place): a folder's
// contents under its own path less what its `exclude` patterns name (as `tar --exclude`), a
// file as itself; an artifact with a link on its path is left out, said in OUT. Links, FIFOs
// and devices are entries without contents; the operator keeps only files and folders under
// the declared paths (shipyard.render.artifact_bundle).
func pack(dst string, items []packItem, out io.Writer) error {
	tmp := dst + ".partial"
	_ = os.Remove(dst)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	seen := map[string]bool{}
	entries := 0
	for _, it := range items {
		rel := strings.Trim(path.Clean("/"+it.Source), "/")
		if rel == "" || seen[rel] {
			continue
		}
		seen[rel] = true
		src := "/" + rel
		st, err := os.Stat(src)
		if err != nil {
			continue
		}
		// A link anywhere on the path (say, the agent's /app/out -> /root) is not followed.
		if real, err := filepath.EvalSymlinks(src); err != nil || real != src {
			fmt.Fprintf(out, "artifact /%s: a link on its path, not collected\n", rel)
			continue
		}
		entries++
		if !st.IsDir() {
			_ = packEntry(tw, src, rel)
			continue
		}
		_ = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			sub := strings.TrimPrefix(strings.TrimPrefix(p, src), "/")
			if sub != "" && excluded(sub, it.Exclude) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			name := rel
			if sub != "" {
				name += "/" + sub
			}
			_ = packEntry(tw, p, name)
			return nil
		})
	}
	err = tw.Close()
	if entries == 0 && err == nil { // none packed: an empty file (no artifacts to read)
		err = f.Truncate(0)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

func packEntry(tw *tar.Writer, p, name string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	if st.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	// FIFOs and devices go in as entries without contents (the operator names what it leaves
	// out, as for tar's); a socket cannot be packed.
	h, err := tar.FileInfoHeader(st, link)
	if err != nil {
		return err
	}
	h.Name, h.Uname, h.Gname = name, "", ""
	if st.IsDir() {
		h.Name += "/"
		return tw.WriteHeader(h)
	}
	if !st.Mode().IsRegular() {
		return tw.WriteHeader(h)
	}
	in, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer in.Close()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// A file that shrank meanwhile is padded, one that grew cut: the header's size holds.
	n, _ := io.Copy(tw, io.LimitReader(in, h.Size))
	if n < h.Size {
		_, err = io.CopyN(tw, zeros{}, h.Size-n)
	}
	return err
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// excluded: GNU tar's `--exclude` defaults (wildcards, `*` matching `/`, not anchored): a
// pattern matches the name as tar sees it (`./SUB`) or any of its tails after a `/`.
func excluded(sub string, patterns []string) bool {
	name := "./" + sub
	for _, pat := range patterns {
		if fnmatch(pat, name) {
			return true
		}
		for i := 0; i < len(name); i++ {
			if name[i] == '/' && fnmatch(pat, name[i+1:]) {
				return true
			}
		}
	}
	return false
}

// fnmatch: `*`, `?`, `[...]` (with `!`/`^` and ranges) and `\` escapes; `*` and `?` match `/`.
func fnmatch(pat, s string) bool {
	for len(pat) > 0 {
		switch pat[0] {
		case '*':
			for len(pat) > 0 && pat[0] == '*' {
				pat = pat[1:]
			}
			if pat == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if fnmatch(pat, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			pat, s = pat[1:], s[1:]
		case '[':
			if s == "" {
				return false
			}
			ok, rest, valid := matchClass(pat, s[0])
			if !valid { // an unclosed `[` is itself
				if s[0] != '[' {
					return false
				}
				pat, s = pat[1:], s[1:]
				continue
			}
			if !ok {
				return false
			}
			pat, s = rest, s[1:]
		default:
			c := pat[0]
			if c == '\\' && len(pat) > 1 {
				pat = pat[1:]
				c = pat[0]
			}
			if s == "" || s[0] != c {
				return false
			}
			pat, s = pat[1:], s[1:]
		}
	}
	return s == ""
}

func matchClass(pat string, c byte) (matched bool, rest string, valid bool) {
	i := 1
	negate := i < len(pat) && (pat[i] == '!' || pat[i] == '^')
	if negate {
		i++
	}
	for first := true; i < len(pat); first = false {
		if pat[i] == ']' && !first {
			return matched != negate, pat[i+1:], true
		}
		lo := pat[i]
		if lo == '\\' && i+1 < len(pat) {
			i++
			lo = pat[i]
		}
		hi := lo
		if i+2 < len(pat) && pat[i+1] == '-' && pat[i+2] != ']' {
			hi = pat[i+2]
			i += 2
		}
		if lo <= c && c <= hi {
			matched = true
		}
		i++
	}
	return false, "", false
}
