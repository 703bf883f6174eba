// Command churn is the busy node of the live benchmarks (bench/live.sh): a
// process that opens and closes TCP connections at a steady rate, as a
// node's probes, scrapes and short-lived clients do, each connection
// established (the three-way handshake) and closed at once by the client
// (FIN). It dials its addresses in turn, from up to 16 goroutines, keeping
// to RATE a second overall: when a dial takes longer, the next ones are
// made sooner, never more than a second's worth at once.
//
// Usage: churn [-rate 1000] [-addr 127.0.0.1:6443,127.0.0.1:8001]
//
// It runs until SIGINT or SIGTERM, then prints on stdout "N connections in
// S s (R/s), E failed" and exits 0; 1 when no connection could be made in
// the first second (nothing listens).
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	rate := flag.Int("rate", 1000, "connections a second, opened and closed")
	addrs := flag.String("addr", "127.0.0.1:6443,127.0.0.1:8001", "addresses to connect to, in turn (comma-separated)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("churn: ")
	targets := strings.Split(*addrs, ",")
	if *rate <= 0 || len(targets) == 0 {
		log.Fatal("-rate must be positive and -addr name an address")
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)

	var made, failed atomic.Int64
	work := make(chan string, *rate)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for addr := range work {
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				c.Close()
				made.Add(1)
			}
		})
	}
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent, next := int64(0), 0
	checked := false
loop:
	for {
		select {
		case <-stop:
			break loop
		case now := <-tick.C:
			due := int64(now.Sub(start).Seconds() * float64(*rate))
			if due-sent > int64(*rate) {
				sent = due - int64(*rate) // fallen behind by more than a second: let it go
			}
			for ; sent < due; sent++ {
				select {
				case work <- targets[next%len(targets)]:
					next++
				default: // every goroutine busy and the queue full
				}
			}
			if !checked && now.Sub(start) > time.Second {
				checked = true
				if made.Load() == 0 {
					log.Fatalf("no connection made to %s in the first second (%d failed): is something listening?", *addrs, failed.Load())
				}
			}
		}
	}
	close(work)
	wg.Wait()
	d := time.Since(start).Seconds()
	fmt.Printf("%d connections in %.1f s (%.0f/s), %d failed\n", made.Load(), d, float64(made.Load())/d, failed.Load())
}
