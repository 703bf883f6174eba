package node

import (
	"context"
	"net"
	"os"
	"sync"
	"time"
)

// HoldSocket is the name of the abstract Unix socket (unix(7): a name in
// the network namespace, no file) by which kwatch in a pod tells the pod's
// holder it runs: one per pod, by its namespace and name.
func HoldSocket(namespace, pod string) string {
	return "@kwatch-hold/" + namespace + "/" + pod
}

// Hold keeps kwatch's pod running while kwatch runs in it (each one
// connected to socket, Join), and returns once none has for idle (or none
// came within idle of the start: the kwatch that made the pod went away),
// or when ctx ends (SIGTERM: the pod's deletion). It is the pod's main
// process (kwatch node hold).
func Hold(ctx context.Context, socket string, idle time.Duration) error {
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	defer l.Close()
	var mu sync.Mutex
	joined := 0
	changed := make(chan struct{}, 1)
	note := func(d int) {
		mu.Lock()
		joined += d
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			note(1)
			go func() {
				buf := make([]byte, 1)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Close()
				note(-1)
			}()
		}
	}()
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			mu.Lock()
			n := joined
			mu.Unlock()
			if n > 0 {
				timer.Stop()
			} else {
				timer.Reset(idle)
			}
		case <-timer.C:
			return nil
		}
	}
}

// Join tells the holder of kwatch's pod, when kwatch runs in one (the
// pod's environment names it), that kwatch runs, until release is called
// or the process ends.
func Join() (release func()) {
	ns, pod := os.Getenv(EnvNamespace), os.Getenv(EnvPod)
	if pod == "" {
		return func() {}
	}
	c, err := net.Dial("unix", HoldSocket(ns, pod))
	if err != nil {
		return func() {}
	}
	return func() { c.Close() }
}
