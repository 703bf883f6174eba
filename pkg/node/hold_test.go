package node

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestHoldAsk: the holder of kwatch's pod answers how many kwatch
// processes run in it (Join) — 0, 2, 1 as they come and go — and a
// question is not counted as one, nor keeps the pod.
func TestHoldAsk(t *testing.T) {
	ns, pod := "hold-test", fmt.Sprintf("p%d", time.Now().UnixNano())
	t.Setenv(EnvNamespace, ns)
	t.Setenv(EnvPod, pod)
	socket := HoldSocket(ns, pod)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Hold(ctx, socket, time.Hour) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// until waits for the holder to count want (Join's and its release's
	// news reach it through the socket, a moment later).
	until := func(want int) {
		t.Helper()
		var n int
		var err error
		for range 500 {
			if n, err = Ask(socket); err == nil && n == want {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the holder answers %d (%v), want %d", n, err, want)
	}
	until(0)
	a, b := Join(), Join()
	until(2)
	a()
	until(1)
	b()
	until(0)
}

// TestAskNoHolder: a question to a pod whose holder is gone is an error,
// not an answer.
func TestAskNoHolder(t *testing.T) {
	if n, err := Ask(HoldSocket("hold-test", fmt.Sprintf("gone%d", time.Now().UnixNano()))); err == nil {
		t.Errorf("Ask with no holder: %d, no error", n)
	}
}
