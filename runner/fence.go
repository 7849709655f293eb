package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"
)

// fenceDial: how long a connect may take before the address counts as unanswered (a policy
// that drops; one that rejects, as kube-router's, answers at once).
const fenceDial = 200 * time.Millisecond

// fence: the `fence` step. A CNI may program a new pod's NetworkPolicy a moment after its
// containers start, and one that ignores NetworkPolicy never does: until every address
// (the apiserver's, which every policy of Shipyard blocks) fails to connect, nothing of the
// task runs. Fails after `limit` with `message`, its "{}" the address still reached.
func fence(addrs []string, limit time.Duration, message string) error {
	deadline := time.Now().Add(limit)
	for {
		open := reached(addrs)
		if open == "" {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%s", strings.ReplaceAll(message, "{}", open))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reached: the first of `addrs` that accepts a TCP connection (all tried at once), or "".
func reached(addrs []string) string {
	found := make(chan string, len(addrs))
	for _, a := range addrs {
		go func(a string) {
			if connects(a, fenceDial) {
				found <- a
			} else {
				found <- ""
			}
		}(a)
	}
	open := ""
	for range addrs {
		if a := <-found; a != "" && open == "" {
			open = a
		}
	}
	return open
}

// connects: whether a TCP connect to ip:port completes within `wait` (system calls only: the
// net package would add 400 KB to a runner every pod mounts). An address that cannot be
// parsed never connects.
func connects(addr string, wait time.Duration) bool {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return false
	}
	var sa syscall.Sockaddr
	family := syscall.AF_INET
	if ip := ap.Addr().Unmap(); ip.Is4() {
		sa = &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ip.As4()}
	} else {
		family = syscall.AF_INET6
		sa = &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	if fd >= 64*len(syscall.FdSet{}.Bits) { // beyond select's set (the runner holds a few)
		return false
	}
	switch err := syscall.Connect(fd, sa); err {
	case nil:
		return true
	case syscall.EINPROGRESS:
	default:
		return false
	}
	end := time.Now().Add(wait)
	for {
		left := time.Until(end)
		if left <= 0 {
			return false
		}
		tv := syscall.NsecToTimeval(left.Nanoseconds())
		var w syscall.FdSet
		w.Bits[fd/64] |= 1 << (uint(fd) % 64)
		n, err := syscall.Select(fd+1, nil, &w, nil, &tv)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
		soerr, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
		return err == nil && soerr == 0
	}
}

// splitCommand: the fence's addresses, and the command after `--` (none: nothing).
func splitCommand(args []string) ([]string, []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return args, nil
}

// execCommand replaces the runner with `argv` as a container runtime starts a container's
// command: a name without a slash is looked up on the container's PATH (its image's). Exits
// 127 (as a shell does) when there is no such program.
func execCommand(argv []string) {
	path, err := lookPath(argv[0], os.Getenv("PATH"))
	if err == nil {
		err = syscall.Exec(path, argv, os.Environ())
	}
	die(127, "shipyard runner: cannot start %q: %v", argv[0], err)
}

// defaultPath: a container runtime's PATH when the image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func lookPath(name, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	if pathEnv == "" {
		pathEnv = defaultPath
	}
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		candidate := dir + "/" + name
		if st, err := os.Stat(candidate); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("executable file not found in $PATH")
}
