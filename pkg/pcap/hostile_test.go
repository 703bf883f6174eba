package pcap_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/pcapgen"
	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// probing returns sink, and has probe called on pcap.Read's decoder
// goroutine after every 8th batch it decodes, so that the heap is measured
// as Read goes, where no decoding is half done (the printer stage runs on a
// goroutine of its own: a probe from the sink would catch the decoder at any
// point, with a buffer half copied or dead pointers still in its registers).
// The hook is removed when the test ends.
func probing(t *testing.T, sink record.Sink, probe func()) record.Sink {
	n := 0
	t.Cleanup(pcap.SetDecodedHook(func() {
		if n++; n%8 == 0 {
			probe()
		}
	}))
	return sink
}

// collector keeps what the tests assert on and no more, so that it does
// not weigh on the heap they measure: problem kinds and notes counted,
// events and the last end by connection.
type collector struct {
	kinds   map[string]int
	first   map[string]*record.Problem // the first problem of each kind
	notes   map[string]int             // note messages, counted
	events  map[int][]string           // connection ID -> "TYPE name"
	ends    map[int]string             // connection ID -> the last End's How: Detail
	summary *record.Summary
	cuts    int // watches cut short by the server (record.KindCut)
}

func newCollector() *collector {
	return &collector{kinds: map[string]int{}, first: map[string]*record.Problem{}, notes: map[string]int{},
		events: map[int][]string{}, ends: map[int]string{}}
}

func (c *collector) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.Event:
		c.events[v.Conn.ID] = append(c.events[v.Conn.ID], v.Type+" "+v.Name)
	case *record.Problem:
		if v.Kind == record.KindCut {
			// The generated servers close watches without their last
			// chunk: a warning of its own (cut_test.go), not what these
			// tests look at.
			c.cuts++
			break
		}
		if c.kinds[v.Kind] == 0 {
			c.first[v.Kind] = v
		}
		c.kinds[v.Kind]++
	case *record.ConnNote:
		c.notes[v.Kind+": "+v.Message]++
	case *record.End:
		c.ends[v.Conn.ID] = v.How
		if v.Detail != "" {
			c.ends[v.Conn.ID] += ": " + v.Detail
		}
	case *record.Summary:
		c.summary = v
	}
}

// halfOpen makes a capture of n connections that are opened and never
// answered: each sends a SYN and, with data, one request.
func halfOpen(t *testing.T, n int, data bool) []byte {
	t.Helper()
	cp := &pcapgen.Capture{Step: time.Microsecond}
	for i := 0; i < n; i++ {
		c := floodConn(i)
		c.SYN()
		if data {
			c.Send(pcapgen.Client, request(watchTarget, "application/json"))
		}
		if err := cp.Add(c, 0); err != nil {
			t.Fatal(err)
		}
	}
	b, err := cp.Encode(pcapgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// floodConn is connection number i of a flood, from its own address.
func floodConn(i int) *pcapgen.Conn {
	client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 16), byte(i >> 8)}), uint16(10000+i%50000))
	return pcapgen.NewConn(client, netip.AddrPortFrom(serverIP, 8001))
}

const MiB = 1 << 20

// TestHalfOpenConnections reads 100000 connections that are never closed
// (a SYN flood, or clients that send one request and wait): the
// connections followed at once stay under DefaultMaxConnections, so the
// live heap stays bounded, and dropping them is reported.
func TestHalfOpenConnections(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  bool
		bound uint64
	}{
		// Measured: 16 and 36 MiB, with 10000 connections followed at
		// 1.6 and 3.6 KiB each; before the bound, 137 MiB and 2 GiB
		// (a 16 KiB overlap window per connection that sent data).
		// Since ends are dated by their own packets (a FIN and a RST
		// time per direction), syn-only measures 21-25 MiB, and up to
		// 33 MiB on a loaded machine (what the pipeline holds between
		// its stages when the probe runs varies): the bounds are the
		// order of magnitude, far under the unbounded figures.
		{"syn-only", false, 40 * MiB},
		{"syn-and-request", true, 48 * MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.data {
				t.Skip("100000 connections with data")
			}
			const n = 100_000
			capture := halfOpen(t, n, tc.data)
			col := newCollector()
			peak := testutil.HeapPeak(func(probe func()) {
				if _, err := pcap.Read(context.Background(), bytes.NewReader(capture), pcap.Options{}, probing(t, col, probe)); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%d half-open connections, %.1f MiB of capture: live heap peak %.1f MiB; %d \"too many connections\" problems",
				n, float64(len(capture))/MiB, float64(peak)/MiB, col.kinds["too many connections"])
			if peak > tc.bound {
				t.Errorf("live heap grew by %.1f MiB; want under %d MiB", float64(peak)/MiB, tc.bound/MiB)
			}
			// Past 10000, each eighth of them (1250) is dropped at once:
			// (100000-10000)/1250 = 72 times.
			if got := col.kinds["too many connections"]; got != 72 || len(col.kinds) != 1 {
				t.Errorf("problems %v; want 72 \"too many connections\" and no other", col.kinds)
			}
			p := col.first["too many connections"]
			if want := "more than 10000 TCP connections open at once; the 1251 idle the longest are no longer followed"; p.Detail != want || p.Warning {
				t.Errorf("problem detail %q (warning %v); want %q", p.Detail, p.Warning, want)
			}
		})
	}
}

// TestDroppedConnections floods a capture with 20000 SYNs while two watches
// are open and MaxConnections is 1000: the watch that sends an event every
// 500 new connections is never the one idle the longest and decodes whole;
// the watch that stays quiet is dropped, says so, and what it sends later
// is a new connection without its start.
func TestDroppedConnections(t *testing.T) {
	cp := &pcapgen.Capture{Step: 10 * time.Microsecond}
	add := func(c *pcapgen.Conn) {
		if err := cp.Add(c, 0); err != nil {
			t.Fatal(err)
		}
	}
	active, quiet := conn(41001), conn(41002)
	for _, c := range []*pcapgen.Conn{active, quiet} {
		c.Handshake()
		c.Send(pcapgen.Client, request(watchTarget, "application/json"))
		c.Send(pcapgen.Server, response("200 OK", "application/json", chunkedTE))
		add(c)
	}
	quiet.Send(pcapgen.Server, chunk(cmEvent(t, "ADDED", "quiet-1", "100")))
	add(quiet)
	var want []string
	for i := 0; i < 40; i++ {
		for j := 0; j < 500; j++ {
			f := floodConn(i*500 + j)
			f.SYN()
			add(f)
		}
		name := fmt.Sprintf("cm-%d", i)
		active.Send(pcapgen.Server, chunk(cmEvent(t, "MODIFIED", name, fmt.Sprint(101+i))))
		add(active)
		want = append(want, "MODIFIED "+name)
	}
	active.Send(pcapgen.Server, []byte(lastChunk))
	quiet.Send(pcapgen.Server, chunk(cmEvent(t, "DELETED", "quiet-1", "200")))
	for _, c := range []*pcapgen.Conn{active, quiet} {
		c.Close(pcapgen.Server)
		c.Close(pcapgen.Client)
		add(c)
	}
	capture, err := cp.Encode(pcapgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	if _, err := pcap.Read(context.Background(), bytes.NewReader(capture), pcap.Options{MaxConnections: 1000}, col); err != nil {
		t.Fatal(err)
	}
	if got := col.events[1]; fmt.Sprint(got) != fmt.Sprint(want) || col.ends[1] != "last-chunk" {
		t.Errorf("active watch: events %q, end %q; want all 40 and last-chunk", got, col.ends[1])
	}
	if fmt.Sprint(col.events[2]) != "[ADDED quiet-1]" || col.ends[2] != "not decoded further: no longer followed: too many connections open at once" {
		t.Errorf("quiet watch: events %q, end %q", col.events[2], col.ends[2])
	}
	if col.notes["closed: no longer followed: more than 1000 connections were open at once, and this one was idle the longest"] != 1 {
		t.Errorf("notes %v; want the quiet watch's \"no longer followed\"", col.notes)
	}
	// Its last packets come back as connection 3, started mid-stream: the
	// decoder finds the next chunk and decodes the event in it.
	if fmt.Sprint(col.events[3]) != "[DELETED quiet-1]" || col.notes["no-syn: the capture starts after this connection opened (no SYN seen); decoding from the first byte captured"] != 1 ||
		col.notes["mid-stream: the capture starts inside a response (no status line captured): looking for chunk framing and watch events"] != 1 {
		t.Errorf("the quiet watch's later packets: events %q, notes %v", col.events[3], col.notes)
	}
	if n := col.kinds["too many connections"]; n == 0 || len(col.kinds) != 1 {
		t.Errorf("problems %v; want only \"too many connections\"", col.kinds)
	}
}

// TestHostileThenGood opens a good watch, then connections that each break
// a bound or a rule, then lets the good watch send its events: every
// hostile connection is reported for what it did, decodes what it can, and
// the good watch decodes whole.
func TestHostileThenGood(t *testing.T) {
	cp := &pcapgen.Capture{}
	add := func(c *pcapgen.Conn) {
		if err := cp.Add(c, 0); err != nil {
			t.Fatal(err)
		}
	}
	const protoCT = "application/vnd.kubernetes.protobuf;stream=watch"
	open := func(port uint16, accept, ct, framing string) *pcapgen.Conn {
		c := conn(port)
		c.Handshake()
		c.Send(pcapgen.Client, request(watchTarget, accept))
		if ct != "" {
			c.Send(pcapgen.Server, response("200 OK", ct, framing))
		}
		return c
	}
	hugeChunkEvents := cat(cmEvent(t, "ADDED", "in-huge-chunk", "7"), cmEvent(t, "MODIFIED", "in-huge-chunk", "8"))
	good := open(42000, "application/json", "application/json", chunkedTE)
	add(good)

	hostile := []struct {
		name string
		c    *pcapgen.Conn
	}{
		{"header never ends", func() *pcapgen.Conn {
			c := open(42001, "application/json", "", "")
			c.Send(pcapgen.Server, append([]byte("HTTP/1.1 200 OK\r\n"), bytes.Repeat([]byte("X-Filler: 0123456789abcdef\r\n"), 80_000)...))
			return c
		}()},
		{"1 GiB chunk", func() *pcapgen.Conn {
			c := open(42002, "application/json", "application/json", chunkedTE)
			c.Send(pcapgen.Server, cat([]byte("40000000\r\n"), hugeChunkEvents))
			return c
		}()},
		{"4 GiB protobuf prefix", func() *pcapgen.Conn {
			c := open(42003, protoCT, protoCT, chunkedTE)
			c.Send(pcapgen.Server, chunk(append([]byte{0xff, 0xff, 0xff, 0xff}, bytes.Repeat([]byte{0x0a}, 100_000)...)))
			return c
		}()},
		{"unclosed JSON event", func() *pcapgen.Conn {
			c := open(42004, "application/json", "application/json", chunkedTE)
			c.Send(pcapgen.Server, chunk(append([]byte(`{"type":"ADDED","object":{"data":"`), bytes.Repeat([]byte("x"), 100_000)...)))
			return c
		}()},
		{"1xx loop", func() *pcapgen.Conn {
			c := open(42005, "application/json", "", "")
			c.Send(pcapgen.Server, bytes.Repeat([]byte("HTTP/1.1 100 Continue\r\n\r\n"), 5000))
			c.Send(pcapgen.Server, cat(response("200 OK", "application/json", chunkedTE), chunk(cmEvent(t, "ADDED", "after-1xx", "9")), []byte(lastChunk)))
			return c
		}()},
		{"chunk-size overflow", func() *pcapgen.Conn {
			c := open(42006, "application/json", "application/json", chunkedTE)
			c.Send(pcapgen.Server, []byte("10000000000000000\r\n{}\r\n"))
			return c
		}()},
		{"not HTTP", func() *pcapgen.Conn {
			c := conn(42007)
			c.Handshake()
			c.Send(pcapgen.Client, bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 10_000))
			return c
		}()},
	}
	for _, h := range hostile {
		h.c.Close(pcapgen.Server)
		h.c.Close(pcapgen.Client)
		add(h.c)
	}
	good.Send(pcapgen.Server, chunk(cmEvent(t, "ADDED", "good", "10")))
	good.Send(pcapgen.Server, chunk(cmEvent(t, "DELETED", "good", "11")))
	good.Send(pcapgen.Server, []byte(lastChunk))
	good.Close(pcapgen.Server)
	good.Close(pcapgen.Client)
	add(good)
	capture, err := cp.Encode(pcapgen.Options{})
	if err != nil {
		t.Fatal(err)
	}

	col := newCollector()
	if _, err := pcap.Read(context.Background(), bytes.NewReader(capture), pcap.Options{}, col); err != nil {
		t.Fatal(err)
	}
	// Connection IDs follow the order connections first carried data:
	// the good watch is 1, the hostile ones 2 to 8.
	if fmt.Sprint(col.events[1]) != "[ADDED good DELETED good]" || col.ends[1] != "last-chunk" {
		t.Errorf("the good watch: events %q, end %q", col.events[1], col.ends[1])
	}
	if fmt.Sprint(col.events[3]) != "[ADDED in-huge-chunk MODIFIED in-huge-chunk]" ||
		col.ends[3] != fmt.Sprintf("closed without the last chunk: inside chunk 0: %d of 1073741824 data bytes", len(hugeChunkEvents)) {
		t.Errorf("1 GiB chunk: events %q, end %q", col.events[3], col.ends[3])
	}
	if fmt.Sprint(col.events[6]) != "[ADDED after-1xx]" || col.ends[6] != "last-chunk" {
		t.Errorf("1xx loop: events %q, end %q", col.events[6], col.ends[6])
	}
	wantKinds := map[string]int{
		"header section too large":          1, // connection 2
		"watch event larger than the limit": 1, // 4: the 4 GiB prefix
		"watch event cut short":             2, // 4, and 5 (the unclosed event)
		"chunk-size overflows 63 bits":      1, // 7
	}
	if fmt.Sprint(col.kinds) != fmt.Sprint(wantKinds) {
		t.Errorf("problems %v; want %v", col.kinds, wantKinds)
	}
	for kind, conn := range map[string]int{"header section too large": 2, "watch event larger than the limit": 4, "chunk-size overflows 63 bits": 7} {
		if p := col.first[kind]; p.Conn.ID != conn || p.Packet == 0 || p.File != "" {
			t.Errorf("%s: connection %d, packet %d; want connection %d and its packet", kind, p.Conn.ID, p.Packet, conn)
		}
	}
	if col.notes["not-http: client bytes do not start an HTTP/1.1 message (first bytes de ad be ef de ad be ef); the capture may start in the middle of the connection"] != 1 {
		t.Errorf("notes %v; want connection 8 named not HTTP", col.notes)
	}
}

// TestRecordClaims2GiB ends a capture with a record header that claims a
// 2 GiB packet and 100 bytes after it: nothing is allocated for the claim,
// the events before it decode, and the record is reported where it starts.
func TestRecordClaims2GiB(t *testing.T) {
	c := conn(43001)
	simpleWatch(t, c, twoEvents(t)...)
	good := pcapOf(t, c)
	for _, tc := range []struct {
		name    string
		snaplen uint32 // in the file header
		kind    string
		detail  string
	}{
		// pcapgo refuses a record longer than the file's snaplen.
		{"snaplen-262144", 262144, "capture file unreadable",
			"capture length exceeds snap length: 2147483648 > 262144; the record starts at this offset"},
		// With a snaplen of 4 GiB it reads the record, growing its
		// buffer only with the bytes that are there.
		{"snaplen-4GiB", 0xffffffff, "capture file ends mid-record",
			"unexpected EOF; the record starts at this offset and the file ends 116 bytes into it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			capture := bytes.Clone(good)
			binary.LittleEndian.PutUint32(capture[16:], tc.snaplen)
			rec := binary.LittleEndian.AppendUint32(nil, 1767225600) // seconds
			rec = binary.LittleEndian.AppendUint32(rec, 0)
			rec = binary.LittleEndian.AppendUint32(rec, 1<<31) // captured length
			rec = binary.LittleEndian.AppendUint32(rec, 1<<31) // original length
			capture = append(append(capture, rec...), bytes.Repeat([]byte{0x45}, 100)...)
			col := newCollector()
			peak := testutil.HeapPeak(func(probe func()) {
				if _, err := pcap.Read(context.Background(), bytes.NewReader(capture), pcap.Options{Name: "big.pcap"}, probing(t, col, probe)); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("a record claiming 2 GiB: live heap peak %.2f MiB", float64(peak)/MiB)
			// Read's own buffers and pools come to about 1 MiB.
			if peak > 4*MiB {
				t.Errorf("live heap grew by %.1f MiB; want under 4 MiB", float64(peak)/MiB)
			}
			if fmt.Sprint(col.events[1]) != "[ADDED coredns MODIFIED coredns]" {
				t.Errorf("events %q", col.events[1])
			}
			p := col.first[tc.kind]
			if p == nil || len(col.kinds) != 1 || p.Offset != int64(len(good)) || p.Where != "file" || p.Detail != tc.detail {
				t.Fatalf("problems %v, first %+v; want %q at file offset %d: %s", col.kinds, p, tc.kind, len(good), tc.detail)
			}
			if packets := col.summary.Packets; p.Packet != packets+1 {
				t.Errorf("problem at packet %d; want %d, the record after the last packet read", p.Packet, packets+1)
			}
		})
	}
}

// TestBudgetManyLargeEvents reads 24 connections that each send 2 MiB of a
// watch event that never ends, then a good watch. Each connection alone is
// within --max-event-bytes; together they would hold 48 MiB. With a budget
// of 8 MiB the events that do not fit are reported and skipped, the live
// heap stays near the budget, the good watch decodes, and every byte
// reserved is released by the end.
func TestBudgetManyLargeEvents(t *testing.T) {
	const conns, eventBytes, budgetBytes = 24, 2 * MiB, 8 * MiB
	var all []*pcapgen.Conn
	for i := range conns {
		c := conn(uint16(44000 + i))
		c.Handshake()
		c.Send(pcapgen.Client, request(watchTarget, "application/json"))
		c.Send(pcapgen.Server, response("200 OK", "application/json", chunkedTE))
		open := append([]byte(`{"type":"ADDED","object":{"kind":"ConfigMap","data":{"k":"`), bytes.Repeat([]byte("x"), eventBytes)...)
		c.Send(pcapgen.Server, chunk(open))
		all = append(all, c)
	}
	good := conn(44999)
	simpleWatch(t, good, twoEvents(t)...)
	capture := pcapOf(t, append(all, good)...)

	budget := event.NewBudget(budgetBytes)
	col := newCollector()
	peak := testutil.HeapPeak(func(probe func()) {
		opt := pcap.Options{Name: "budget.pcap", HTTP: wire.Options{Limits: exchange.Limits{Budget: budget}}}
		if _, err := pcap.Read(context.Background(), bytes.NewReader(capture), opt, probing(t, col, probe)); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%d connections with a %d MiB event each, budget %d MiB: live heap peak %.1f MiB, %d events skipped",
		conns, eventBytes/MiB, budgetBytes/MiB, float64(peak)/MiB, col.kinds[event.KindBudget])
	// Reservations count bytes kept; append's spare capacity can double
	// them. Measured: about 14 MiB (48 MiB and more without the budget).
	if peak > 3*budgetBytes {
		t.Errorf("live heap grew by %.1f MiB; want under %d MiB", float64(peak)/MiB, 3*budgetBytes/MiB)
	}
	// 8 MiB hold three of the 2 MiB events (a fourth does not fit whole).
	if n := col.kinds[event.KindBudget]; n < conns-4 || n > conns-3 {
		t.Errorf("%d events skipped for the budget; want %d or %d", n, conns-4, conns-3)
	}
	p := col.first[event.KindBudget]
	if p == nil || p.Where != "data" || p.Packet == 0 || !strings.Contains(p.Hint, "raise --max-buffered-bytes-total") {
		t.Errorf("first budget problem %+v", p)
	}
	if got := fmt.Sprint(col.events[conns+1]); got != "[ADDED coredns MODIFIED coredns]" {
		t.Errorf("the good watch after them: events %s", got)
	}
	if h := budget.Held(); h != 0 {
		t.Errorf("%d bytes still reserved after the capture ended", h)
	}
}

// TestFlushHeldBounded: connections whose data waits behind a lost segment
// until the end of the capture are flushed together, and what they report
// is put in connection order. The reordering holds the flushed bytes, not
// the records decoding them makes: with events sent one byte per chunk a
// record costs 25 times its bytes (4 connections, 600 KB each: about 60 MiB
// of records).
func TestFlushHeldBounded(t *testing.T) {
	var conns []*pcapgen.Conn
	for i := range 4 {
		c := conn(uint16(45000 + i))
		c.Handshake()
		c.Send(pcapgen.Client, request(watchTarget, "application/json"))
		c.Send(pcapgen.Server, response("200 OK", "application/json", chunkedTE))
		segs := c.Send(pcapgen.Server, chunk(cmEvent(t, "ADDED", "lost", "2")))
		c.Drop(segs[0])
		var body []byte
		for k := 0; len(body) < 600_000; k++ {
			for _, b := range cmEvent(t, "MODIFIED", fmt.Sprintf("e%d", k), fmt.Sprint(3+k)) {
				body = append(body, '1', '\r', '\n', b, '\r', '\n')
			}
		}
		c.Send(pcapgen.Server, body)
		conns = append(conns, c)
	}
	capture := pcapOf(t, conns...)
	col := newCollector()
	peak := testutil.HeapPeak(func(probe func()) {
		if _, err := pcap.Read(context.Background(), bytes.NewReader(capture), pcap.Options{Name: "held.pcap"}, probing(t, col, probe)); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("4 connections of 600 KB in 1-byte chunks flushed at the end: live heap peak %.1f MiB", float64(peak)/MiB)
	if peak > 24*MiB {
		t.Errorf("live heap grew by %.1f MiB; want under 24 MiB", float64(peak)/MiB)
	}
	for i := 1; i <= 4; i++ {
		if n := len(col.events[i]); n < 100 {
			t.Errorf("connection %d: %d events decoded after the gap", i, n)
		}
	}
}
