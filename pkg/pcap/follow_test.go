package pcap_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestFollow reads a capture while it is being written, as tcpdump -w does:
// events in the first part are decoded before the rest exists, the rest
// after it is appended, and cancelling ends the read with the summary.
func TestFollow(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(captureDir, "watch-timeout-any.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "growing.pcap")
	if err := os.WriteFile(path, src[:3000], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mu sync.Mutex
	var events []string
	summary := false
	sink := record.SinkFunc(func(r record.Record) {
		mu.Lock()
		defer mu.Unlock()
		switch v := r.(type) {
		case *record.Event:
			events = append(events, v.Type+" "+v.ResourceVersion)
		case *record.Summary:
			summary = true
		}
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(events) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := pcap.Read(ctx, pcap.Follow(ctx, f), pcap.Options{Name: path}, sink)
		done <- err
	}()
	waitFor := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d events, want %d", count(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(1) // the first 3000 bytes hold the ADDED event
	w, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(src[3000:]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	waitFor(4)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := len(events); got != 4 || events[3] != "DELETED 154" || !summary {
		t.Errorf("events %v, summary %v", events, summary)
	}
}

// TestFollowTruncated: a followed file that shrinks (tcpdump restarted on
// it) ends the read with a problem instead of waiting silently.
func TestFollowTruncated(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(captureDir, "watch-timeout-any.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "restarted.pcap")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var problems []string
	done := make(chan error, 1)
	decoding, seen := make(chan struct{}), false
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		_, err := pcap.Read(ctx, pcap.Follow(ctx, f), pcap.Options{Name: path}, record.SinkFunc(func(r record.Record) {
			switch v := r.(type) {
			case *record.Problem:
				problems = append(problems, v.Kind+": "+v.Detail)
			case *record.Event:
				if !seen {
					seen = true
					close(decoding)
				}
			}
		}))
		done <- err
	}()
	<-decoding // the follower has read past the first event, far beyond byte 100
	// One truncate, not WriteFile's truncate-to-0-then-write, which the
	// follower may catch in between.
	if err := os.Truncate(path, 100); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "the file shrank to 100 bytes") {
		t.Errorf("problems %v", problems)
	}
}
