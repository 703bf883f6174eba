package pcap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/pcapgen"
	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestPipelineSlowPrinter: the output does not depend on how fast the
// printer stage takes records (a printer held up now and then lets the
// decoder run ahead until the queues are full).
func TestPipelineSlowPrinter(t *testing.T) {
	for _, name := range []string{"big-lo.pcap", "burst-any.pcap", "watch-lo.pcap"} {
		data, err := os.ReadFile(filepath.Join(captureDir, name))
		if err != nil {
			t.Fatal(err)
		}
		run := func(every int) []byte {
			var out bytes.Buffer
			p := printer.NewJSON(&out, printer.Options{})
			n := 0
			sink := record.SinkFunc(func(r record.Record) {
				n++
				if every > 0 && n%every == 0 {
					time.Sleep(2 * time.Millisecond)
				}
				p.Emit(r)
			})
			if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: name}, sink); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			return out.Bytes()
		}
		fast, slow := run(0), run(7)
		if !bytes.Equal(fast, slow) {
			t.Errorf("%s: the output with a slow printer differs (%d bytes against %d)", name, len(slow), len(fast))
		}
	}
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// heldPrinter reads capture with a printer that takes no event until the
// reading has stopped; it returns how many bytes were read by then, and
// how much the live heap had grown at its highest (testutil.HeapPeak,
// probed while all stages wait and at the end), then lets the printer go
// on and checks that events events came out.
func heldPrinter(t *testing.T, capture []byte, events int) (read int64, heap uint64) {
	t.Helper()
	var mu sync.Mutex
	got := 0
	heap = testutil.HeapPeak(func(probe func()) {
		in := &countingReader{r: bytes.NewReader(capture)}
		release := make(chan struct{})
		sink := record.SinkFunc(func(r record.Record) {
			if _, ok := r.(*record.Event); ok {
				<-release // closed: every later call goes on at once
				mu.Lock()
				got++
				mu.Unlock()
			}
		})
		done := make(chan error, 1)
		go func() {
			_, err := pcap.Read(context.Background(), in, pcap.Options{Name: "held.pcap"}, sink)
			done <- err
		}()
		// Wait until reading stops.
		read = -1
		for in.n.Load() != read {
			read = in.n.Load()
			time.Sleep(200 * time.Millisecond)
		}
		probe() // every stage waiting
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	if got != events {
		t.Errorf("%d events printed, want %d", got, events)
	}
	return read, heap
}

// TestPipelineBackPressure: while the printer does not take records (a
// terminal scrolled back, a full pipe), kwatch pcap stops reading the
// capture once its queues are full instead of holding the rest in memory;
// every event still comes out once the printer goes on.
func TestPipelineBackPressure(t *testing.T) {
	// 16 MiB: 4000 events of about 4 KiB in one watch.
	c := conn(40100)
	var events [][]byte
	pad := bytes.Repeat([]byte("x"), 4000)
	for i := range 4000 {
		events = append(events, jsonEvent(t, "MODIFIED", configMap("kube-system", fmt.Sprintf("cm-%d", i),
			fmt.Sprint(1000+i), map[string]string{"pad": string(pad)})))
	}
	simpleWatch(t, c, events...)
	data := pcapOf(t, c)
	if len(data) < 16<<20 {
		t.Fatalf("capture of %d bytes, want 16 MiB", len(data))
	}
	read, heap := heldPrinter(t, data, len(events))
	// What may be read ahead: the 64 KiB read buffer, the op queue
	// (8 x 64 KiB), the event being printed, the queued records (1 MiB)
	// and the batch being filled, the events the decoder holds, and
	// gopacket's pages: a few MiB, not the capture.
	t.Logf("read %d bytes of %d while the printer was held up; live heap grew by %.1f MiB", read, len(data), float64(heap)/MiB)
	if read > 4<<20 || heap > 8*MiB {
		t.Errorf("read %d bytes of %d and the live heap grew by %.1f MiB while the printer was held up, want at most 4 MiB and 8 MiB",
			read, len(data), float64(heap)/MiB)
	}
}

// TestPipelineBackPressureChunkLists: records that hold much more than
// their object (events sent one byte per chunk, each chunk-size line
// carrying a 500-byte chunk-ext, so that every event lists about 800
// chunks) count by all they hold in the printer's
// queue.
func TestPipelineBackPressureChunkLists(t *testing.T) {
	c := conn(40300)
	c.Handshake()
	c.Send(pcapgen.Client, request(watchTarget, "application/json"))
	c.Send(pcapgen.Server, response("200 OK", "application/json", chunkedTE))
	ext := ";x=" + strings.Repeat("a", 497)
	const n = 40
	for i := range n {
		ev := cmEvent(t, "MODIFIED", fmt.Sprintf("cm-%d", i), fmt.Sprint(1000+i))
		var body []byte
		for _, b := range ev {
			body = append(body, "1"+ext+"\r\n"...)
			body = append(body, b, '\r', '\n')
		}
		c.Send(pcapgen.Server, body)
	}
	c.Send(pcapgen.Server, []byte(lastChunk))
	c.Close(pcapgen.Server)
	c.Close(pcapgen.Client)
	data := pcapOf(t, c)
	read, heap := heldPrinter(t, data, n)
	// The queue holds one or two of these records; counting their
	// objects alone, all 40 would wait (the whole capture read, the live
	// heap 11 MiB larger).
	t.Logf("read %d bytes of %d while the printer was held up; live heap grew by %.1f MiB", read, len(data), float64(heap)/MiB)
	if read > 4<<20 || heap > 8*MiB {
		t.Errorf("read %d bytes of %d and the live heap grew by %.1f MiB while the printer was held up, want at most 4 MiB and 8 MiB",
			read, len(data), float64(heap)/MiB)
	}
}

// genNotAWatch: a chunked JSON response whose request was not captured
// looks like a watch until its first frame, a list, does not decode as a
// watch event.
func genNotAWatch(t *testing.T) []byte {
	c := conn(40200)
	c.Handshake()
	c.Send(pcapgen.Server, response("200 OK", "application/json", chunkedTE))
	c.Send(pcapgen.Server, chunk([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}`+"\n")))
	c.Send(pcapgen.Server, []byte(lastChunk))
	c.Close(pcapgen.Server)
	c.Close(pcapgen.Client)
	return pcapOf(t, c)
}

// TestRecordsUnchangedAfterEmit: no record changes after it was emitted
// (the printer stage reads it later, on its own goroutine; a sink may keep
// it). Each record the decoder makes is snapshot as JSON on its goroutine
// as it is made, and compared when Read has returned, for every test capture and a response that turns out not
// to be a watch.
func TestRecordsUnchangedAfterEmit(t *testing.T) {
	inputs := map[string][]byte{"not-a-watch.pcap": genNotAWatch(t)}
	for _, file := range captures(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(file)] = data
	}
	for name, data := range inputs {
		type snap struct {
			r    record.Record
			json string
		}
		var snaps []snap
		var failed error
		remove := pcap.SetEmitHook(func(r record.Record) {
			b, err := json.Marshal(r)
			if err != nil && failed == nil {
				failed = fmt.Errorf("%T: %v", r, err)
			}
			snaps = append(snaps, snap{r, string(b)})
		})
		_, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: name}, record.SinkFunc(func(record.Record) {}))
		remove()
		if err != nil || failed != nil {
			t.Fatalf("%s: %v %v", name, err, failed)
		}
		for i, s := range snaps {
			b, _ := json.Marshal(s.r)
			if string(b) != s.json {
				t.Errorf("%s: record %d (%T) changed after it was emitted:\n\twas %s\n\tnow %s", name, i, s.r, s.json, b)
			}
		}
	}
}

// TestFlushedConnectionsInOrder: when reassembly gives up waiting for lost
// segments of several connections in the same flush (gopacket visits them
// in map order), what they report comes connection by connection, the
// same in every run.
func TestFlushedConnectionsInOrder(t *testing.T) {
	data := genFlushOrder(t)
	var first []byte
	for run := range 10 {
		var out bytes.Buffer
		p := printer.NewJSON(&out, printer.Options{})
		var gaps []int
		sink := record.SinkFunc(func(r record.Record) {
			if pr, ok := r.(*record.Problem); ok && pr.Kind == exchange.KindMissing && pr.Conn != nil {
				gaps = append(gaps, pr.Conn.ID)
			}
			p.Emit(r)
		})
		if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: "gaps.pcap"}, sink); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(gaps) != "[1 2 3 4 5 6 7 8]" {
			t.Fatalf("run %d: gaps reported by connections %v, want 1 to 8 in order", run, gaps)
		}
		if run == 0 {
			first = out.Bytes()
		} else if !bytes.Equal(out.Bytes(), first) {
			t.Fatalf("run %d: the output differs from the first run's", run)
		}
	}
}

// genFlushOrder: 8 watches that each lose a segment at about the same
// time, then a ninth that goes on for 10 s, so that reassembly gives up on
// the 8 gaps in one flush while the capture runs, then the 8 end.
func genFlushOrder(t *testing.T) []byte {
	cp := &pcapgen.Capture{}
	add := func(c *pcapgen.Conn) {
		if err := cp.Add(c, 0); err != nil {
			t.Fatal(err)
		}
	}
	var conns []*pcapgen.Conn
	for i := range 8 {
		c := conn(uint16(40400 + i))
		c.Handshake()
		c.Send(pcapgen.Client, request(watchTarget, "application/json"))
		c.Send(pcapgen.Server, response("200 OK", "application/json", chunkedTE))
		segs := c.Send(pcapgen.Server, chunk(bigEvent(t, "102"))) // 3 segments
		c.Drop(segs[1])
		add(c)
		conns = append(conns, c)
	}
	keep := conn(40499)
	keep.Handshake()
	keep.Send(pcapgen.Client, request(watchTarget, "application/json"))
	keep.Send(pcapgen.Server, response("200 OK", "application/json", chunkedTE))
	for i := range 20 {
		keep.Wait(500 * time.Millisecond)
		keep.Send(pcapgen.Server, chunk(cmEvent(t, "MODIFIED", "cm-k", fmt.Sprint(200+i))))
	}
	add(keep)
	for _, c := range conns {
		c.Wait(10 * time.Second)
		c.Send(pcapgen.Server, chunk(cmEvent(t, "MODIFIED", "cm-a", "103")))
		c.Send(pcapgen.Server, []byte(lastChunk))
		c.Close(pcapgen.Server)
		c.Close(pcapgen.Client)
		add(c)
	}
	b, err := cp.Encode(pcapgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
