package wire_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

func gz(p []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(p)
	w.Close()
	return b.Bytes()
}

// decoyChunks is a server's first bytes captured inside a chunked body:
// chunk after chunk that looks like a gzip member's (its size line, 1f 8b
// 08, the CRLF where the size puts it) but inflates to no watch event.
func decoyChunks(n int) []byte {
	m := gz([]byte("not an event, not JSON"))
	var b bytes.Buffer
	b.WriteString("xx\r\n")
	for range n {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(m), m)
	}
	return b.Bytes()
}

// TestGzipJoinDecoys: the decoys, whole and byte by byte, take time in
// proportion to their bytes, not to their square.
func TestGzipJoinDecoys(t *testing.T) {
	for _, n := range []int{500, 1400} {
		p := decoyChunks(n)
		for _, step := range []int{0, 1} {
			sink, lines := testutil.RecordLines(t)
			c := wire.New(&record.Conn{ID: 1}, sink, wire.Options{MidStream: true})
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			start := time.Now()
			testutil.Feed([]testutil.Piece{{Client: false, P: p}}, step, now, c.ClientData, c.ServerData)
			c.CloseServer(exchange.EndFIN, now)
			d := time.Since(start)
			t.Logf("%d decoys (%d bytes), step %d: %v, %q", n, len(p), step, d, *lines)
			// Before: 35 s and 4 min byte by byte (every decoy's member
			// inflated again at each byte).
			if d > 5*time.Second {
				t.Errorf("%d decoys, step %d: %v", n, step, d)
			}
		}
	}
}

// TestGzipJoinNested: a chunk's gzip member whose data (a stored deflate
// block: the bytes as they are) hold a chunk of their own, whose member
// starts another event: the join is at the first chunk however the
// bytes were split, not at the inner one when it is whole first.
func TestGzipJoinNested(t *testing.T) {
	ev := func(rv int) string {
		return fmt.Sprintf(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns","resourceVersion":"%d"}}}`+"\n", rv)
	}
	inner := gz([]byte(ev(2)))
	var content bytes.Buffer
	content.WriteString(ev(1))
	fmt.Fprintf(&content, "\r\n%x\r\n%s\r\n", len(inner), inner)
	var outer bytes.Buffer
	w, _ := gzip.NewWriterLevel(&outer, gzip.NoCompression)
	w.Write(content.Bytes())
	w.Close()
	p := []byte("xx\r\n" + fmt.Sprintf("%x\r\n%s\r\n", outer.Len(), outer.Bytes()))
	m := gz([]byte(ev(3)))
	p = append(p, fmt.Sprintf("%x\r\n%s\r\n", len(m), m)...)
	var want []string
	for _, step := range []int{0, 1, 7} {
		sink, lines := testutil.RecordLines(t)
		c := wire.New(&record.Conn{ID: 1}, sink, wire.Options{MidStream: true})
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		testutil.Feed([]testutil.Piece{{Client: false, P: p}}, step, now, c.ClientData, c.ServerData)
		c.CloseServer(exchange.EndFIN, now)
		if step == 0 {
			want = *lines
			continue
		}
		if i, x, y, ok := testutil.FirstDiff(want, *lines); ok {
			t.Errorf("step %d: line %d: %q, whole: %q", step, i, y, x)
		}
	}
}

// TestGzipJoinBomb: the member the join is made at starts an event, then
// inflates to an endless string (a gzip bomb): bounded by the event's and
// the member's bounds, and the next member's event is still read.
func TestGzipJoinBomb(t *testing.T) {
	var bomb bytes.Buffer
	w, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	w.Write([]byte(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{"k":"`))
	zeros := bytes.Repeat([]byte("a"), 1<<20)
	for range 512 { // 512 MiB inflated
		w.Write(zeros)
	}
	w.Close()
	var p bytes.Buffer
	p.WriteString("xx\r\n")
	// The first chunk holds the member's start (within the join's 64 KiB),
	// the next ones the rest.
	z := bomb.Bytes()
	for len(z) > 0 {
		n := min(len(z), 16<<10)
		fmt.Fprintf(&p, "%x\r\n%s\r\n", n, z[:n])
		z = z[n:]
	}
	m := gz([]byte(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b","resourceVersion":"9"}}}` + "\n"))
	fmt.Fprintf(&p, "%x\r\n%s\r\n", len(m), m)
	var lines *[]string
	start := time.Now()
	peak := testutil.HeapPeak(func(probe func()) {
		var sink record.Sink
		sink, lines = testutil.RecordLines(t)
		c := wire.New(&record.Conn{ID: 1}, sink, wire.Options{MidStream: true})
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b := p.Bytes()
		for i := 0; i < len(b); i += 64 << 10 {
			c.ServerData(b[i:min(i+64<<10, len(b))], now)
			if i%(1<<20) == 0 {
				probe()
			}
		}
		c.CloseServer(exchange.EndFIN, now)
	})
	t.Logf("%d compressed bytes: %v, heap peak %d MiB", p.Len(), time.Since(start), peak>>20)
	if peak > 160<<20 {
		t.Errorf("heap peak %d MiB", peak>>20)
	}
	if testutil.Count(*lines, `"ResourceVersion":"9"`) != 1 || testutil.Count(*lines, "watch event larger than the limit") != 1 {
		t.Errorf("the event after the bomb is not read, or the bomb not said: %q", *lines)
	}
}
