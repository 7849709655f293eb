package main

import (
	"net"
	"strings"
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
