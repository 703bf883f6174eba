package pcap_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
)

func gzipped(t *testing.T, parts ...[]byte) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, p := range parts {
		zw := gzip.NewWriter(&out)
		if _, err := zw.Write(p); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

func jsonOutput(t *testing.T, data []byte) string {
	t.Helper()
	var out bytes.Buffer
	p := printer.NewJSON(&out, printer.Options{})
	if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: "in"}, p); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestGzipMembers: a gzip file of several members (gzip -c a >> f; gzip -c b
// >> f, or a compressor that starts a member now and then) decodes as the
// capture they make together, wherever the members were cut.
func TestGzipMembers(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(captureDir, "watch-lo.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	want := jsonOutput(t, data)
	for _, cuts := range [][]int{{3000}, {24}, {1, 2, 3}, {100, 2000, 4000, 5900}} {
		var parts [][]byte
		prev := 0
		for _, c := range cuts {
			parts = append(parts, data[prev:c])
			prev = c
		}
		parts = append(parts, data[prev:])
		if got := jsonOutput(t, gzipped(t, parts...)); got != want {
			t.Errorf("members cut at %v: the output differs from the plain capture's:\n%s", cuts, got)
		}
	}
}

// TestGzipPipeStaysOpen: a gzip'd capture on a pipe whose writer keeps it
// open after the last gzip member shows every event before the pipe
// closes (gzip.Reader alone would wait for the next member's header).
func TestGzipPipeStaysOpen(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(captureDir, "watch-lo.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write(gzipped(t, data)) }()
	var mu sync.Mutex
	events := 0
	sink := record.SinkFunc(func(r record.Record) {
		if _, ok := r.(*record.Event); ok {
			mu.Lock()
			events++
			mu.Unlock()
		}
	})
	go func() { _, _ = pcap.Read(context.Background(), pr, pcap.Options{Name: "-"}, sink) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := events
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 events shown while the pipe stays open", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGzipWithoutTrailer: a .gz capture that stops between two records,
// before gzip's CRC and length, decodes every packet and says what is
// missing (a warning), where one cut inside a record is an error.
func TestGzipWithoutTrailer(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(captureDir, "watch-lo.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	gz := gzipped(t, data)
	for _, tc := range []struct {
		name    string
		in      []byte
		kind    string
		warning bool
		events  int
	}{
		{"no trailer", gz[:len(gz)-8], "capture file ends without its gzip trailer", true, 4},
		{"cut in a record", gz[:len(gz)/2], "capture file ends mid-record", false, -1},
	} {
		var probs []*record.Problem
		events := 0
		sink := record.SinkFunc(func(r record.Record) {
			switch v := r.(type) {
			case *record.Problem:
				probs = append(probs, v)
			case *record.Event:
				events++
			}
		})
		if _, err := pcap.Read(context.Background(), bytes.NewReader(tc.in), pcap.Options{Name: "w.pcap.gz"}, sink); err != nil {
			t.Fatal(err)
		}
		if len(probs) != 1 || probs[0].Kind != tc.kind || probs[0].Warning != tc.warning || (tc.events >= 0 && events != tc.events) {
			t.Errorf("%s: %d events, problems %+v; want one %q (warning %v)", tc.name, events, probs, tc.kind, tc.warning)
		}
	}
}
