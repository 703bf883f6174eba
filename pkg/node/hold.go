package node

import (
	"context"
	"fmt"
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

// The first byte a connection to the holder writes says what it is:
// holdJoin a kwatch that runs in the pod (Join), until it closes;
// holdAsk a question (Ask), answered with the number of kwatch processes
// joined, as a decimal line, and closed.
const (
	holdJoin = 'j'
	holdAsk  = '?'
)

// Hold keeps kwatch's pod running while kwatch runs in it (each one
// connected to socket, Join), and returns once none has for idle (or none
// came within idle of the start: the kwatch that made the pod went away),
// or when ctx ends (SIGTERM: the pod's deletion). It answers Ask. It is the
// pod's main process (kwatch node hold).
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
			go func() {
				defer c.Close()
				buf := make([]byte, 1)
				if _, err := c.Read(buf); err != nil {
					return
				}
				if buf[0] == holdAsk {
					mu.Lock()
					n := joined
					mu.Unlock()
					_ = c.SetWriteDeadline(time.Now().Add(time.Second))
					fmt.Fprintf(c, "%d\n", n)
					return
				}
				note(1)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
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
	if _, err := c.Write([]byte{holdJoin}); err != nil {
		c.Close()
		return func() {}
	}
	return func() { c.Close() }
}

// Ask asks the holder on socket how many kwatch processes run in its pod
// now (kwatch node hold --ask, run in the pod by kwatch node clean). The
// error says that no holder answered within 5 s (the pod's main process
// ended, or is of a kwatch before Ask).
func Ask(socket string) (int, error) {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{holdAsk}); err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Fscanln(c, &n); err != nil {
		return 0, fmt.Errorf("the holder's answer: %w", err)
	}
	return n, nil
}
