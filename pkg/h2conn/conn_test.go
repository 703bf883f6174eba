package h2conn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/carrier"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
)

// peer writes one direction of a conversation with x/net/http2's Framer
// and an HPACK encoder, as a real client or server would.
type peer struct {
	buf bytes.Buffer
	fr  *http2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
}

func newPeer(client bool) *peer {
	p := &peer{}
	if client {
		p.buf.WriteString(ClientPreface)
	}
	p.fr = http2.NewFramer(&p.buf, nil)
	p.enc = hpack.NewEncoder(&p.hb)
	return p
}

// headers encodes fields (name, value pairs) into one HEADERS frame, or a
// HEADERS frame and CONTINUATION frames of at most split bytes of block.
func (p *peer) headers(t testing.TB, stream uint32, end bool, split int, fields ...string) {
	t.Helper()
	p.hb.Reset()
	for i := 0; i < len(fields); i += 2 {
		if err := p.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}); err != nil {
			t.Fatal(err)
		}
	}
	block := p.hb.Bytes()
	if split <= 0 || split >= len(block) {
		if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block, EndStream: end, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block[:split], EndStream: end}); err != nil {
		t.Fatal(err)
	}
	for rest := block[split:]; len(rest) > 0; {
		k := min(split, len(rest))
		if err := p.fr.WriteContinuation(stream, k == len(rest), rest[:k]); err != nil {
			t.Fatal(err)
		}
		rest = rest[k:]
	}
}

func watchRequest(t testing.TB, c *peer, stream uint32) {
	c.headers(t, stream, true, 0, ":method", "GET", ":scheme", "http", ":authority", "127.0.0.1:8001",
		":path", fmt.Sprintf("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=100&s=%d", stream),
		"authorization", "Bearer secret-token", "accept", "application/json")
}

func watchResponse(t testing.TB, s *peer, stream uint32) {
	s.headers(t, stream, false, 0, ":status", "200", "content-type", "application/json")
}

func ev(typ, name, rv string) []byte {
	return []byte(fmt.Sprintf(`{"type":%q,"object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"default","resourceVersion":%q}}}`+"\n", typ, name, rv))
}

// piece is bytes one side sent; a conversation is both directions of a
// connection as pieces in the order they were sent.
type piece = testutil.Piece

// run feeds pieces to a new Conn, each cut into writes of at most step
// bytes (0: whole), and returns its records as JSON lines.
func run(t testing.TB, pieces []piece, step int, opt Options) []string {
	sink, out := testutil.RecordLines(t)
	c := New(&record.Conn{ID: 1}, sink, opt)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	testutil.Feed(pieces, step, t0, c.ClientData, c.ServerData)
	c.CloseServer(exchange.EndFIN, t0)
	c.CloseClient(exchange.EndFIN, t0)
	return *out
}

var count = testutil.Count

// TestTwoStreams: two watches interleaved on one connection, one event in
// two DATA frames (with padding), events sharing a frame; any split of the
// bytes gives the same records.
func TestTwoStreams(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	var pieces []piece
	flush := func() {
		if c.buf.Len() > 0 {
			pieces = append(pieces, piece{Client: true, P: append([]byte(nil), c.buf.Bytes()...)})
			c.buf.Reset()
		}
		if s.buf.Len() > 0 {
			pieces = append(pieces, piece{P: append([]byte(nil), s.buf.Bytes()...)})
			s.buf.Reset()
		}
	}
	_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 22})
	_ = s.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
	watchRequest(t, c, 1)
	watchRequest(t, c, 3)
	flush()
	watchResponse(t, s, 1)
	watchResponse(t, s, 3)
	big := ev("ADDED", "a", "101")
	_ = s.fr.WriteDataPadded(1, false, big[:50], make([]byte, 7))
	_ = s.fr.WriteData(3, false, append(ev("ADDED", "b", "102"), ev("MODIFIED", "b", "103")...))
	_ = s.fr.WriteData(1, false, big[50:])
	_ = c.fr.WritePing(false, [8]byte{1})
	flush()
	_ = s.fr.WritePing(true, [8]byte{1})
	_ = s.fr.WriteRSTStream(3, http2.ErrCodeCancel)
	_ = s.fr.WriteData(1, true, ev("DELETED", "a", "104"))
	flush()

	whole := run(t, pieces, 0, Options{})
	for _, step := range []int{1, 2, 9, 100} {
		if got := run(t, pieces, step, Options{}); strings.Join(got, "\n") != strings.Join(whole, "\n") {
			t.Fatalf("step %d differs:\n%s\nwhole:\n%s", step, strings.Join(got, "\n"), strings.Join(whole, "\n"))
		}
	}
	text := strings.Join(whole, "\n")
	for _, want := range []string{
		`"Exchange":1,"Seq":1,"Time":"2026-01-01T00:00:00Z","Type":"ADDED"`,
		`"Frames":[{"stream":1,"index":0,"length":58,"padded":true,"padding":7,"offset":`,
		`{"stream":1,"index":1,"length":`,
		`"Exchange":3,"Seq":2,`,
		`"events":2,"bytes":`,
		`reset by RST_STREAM","Detail":"CANCEL from the server"`,
		`"How":"end of stream"`,
		`PING from the client answered after 0s`,
		`Bearer REDACTED`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("records lack %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, "secret-token") {
		t.Error("the token was printed")
	}
}

// TestHeaderListBomb: a header block that decodes to more than the bound
// is dropped with a problem; the dynamic table stays in step, so the next
// stream's fields (indexed from it) decode.
func TestHeaderListBomb(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	fields := []string{":method", "GET", ":path", "/api/v1/configmaps?watch=1"}
	for i := 0; i < 40; i++ {
		fields = append(fields, fmt.Sprintf("x-big-%d", i), strings.Repeat("v", 100))
	}
	c.headers(t, 1, true, 64, fields...) // HEADERS and CONTINUATIONs
	watchRequest(t, c, 3)
	watchResponse(t, s, 3)
	_ = s.fr.WriteData(3, true, ev("ADDED", "a", "101"))
	out := run(t, []piece{{Client: true, P: c.buf.Bytes()}, {P: s.buf.Bytes()}}, 0, Options{MaxHeaderListBytes: 2048})
	text := strings.Join(out, "\n")
	if count(out, KindHeaderList) != 1 || count(out, "*record.Request") != 1 || count(out, `"Exchange":3,"Seq":1,`) != 1 {
		t.Fatalf("want one header-list problem, stream 3's request and event:\n%s", text)
	}
}

// TestContinuationFlood: a header block in a million tiny CONTINUATION
// frames is decoded as it comes: memory stays flat.
func TestContinuationFlood(t *testing.T) {
	c := newPeer(true)
	c.hb.Reset()
	_ = c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	for i := 0; i < 20000; i++ {
		_ = c.enc.WriteField(hpack.HeaderField{Name: "x-flood", Value: fmt.Sprintf("%040d", i)})
	}
	block := append([]byte(nil), c.hb.Bytes()...)
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:1]})
	first := append([]byte(nil), c.buf.Bytes()...)
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	for i := 1; i < len(block); i++ {
		_ = fr.WriteContinuation(1, i == len(block)-1, block[i:i+1])
	}
	var out []string
	conn := New(&record.Conn{ID: 1}, record.SinkFunc(func(r record.Record) {
		if p, ok := r.(*record.Problem); ok {
			out = append(out, p.Kind)
		}
	}), Options{MaxHeaderListBytes: 64 << 10})
	t0 := time.Now()
	grew := testutil.HeapPeak(func(probe func()) {
		conn.ClientData(first, t0)
		rest := frames.Bytes()
		for i := 0; len(rest) > 0; i++ {
			k := min(len(rest), 1<<16)
			conn.ClientData(rest[:k], t0)
			rest = rest[k:]
			if i%16 == 0 {
				probe()
			}
		}
	})
	if len(block) < 500_000 || grew > 4<<20 || len(out) != 1 || out[0] != KindHeaderList {
		t.Fatalf("a %d-byte block in %d frames: heap grew %d bytes, problems %v; want under 4 MiB and one %q",
			len(block), len(block), grew, out, KindHeaderList)
	}
}

// TestHugeFrameBudget: a frame announcing 16 MiB is held only if the
// shared budget has room; otherwise it is skipped, said so, and the frames
// after it decode.
func TestHugeFrameBudget(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	watchRequest(t, c, 1)
	watchResponse(t, s, 1)
	hdr := []byte{0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 9} // DATA on stream 9, 16 MiB - 1
	payload := make([]byte, 1<<24-1)
	var srv bytes.Buffer
	srv.Write(s.buf.Bytes())
	srv.Write(hdr)
	srv.Write(payload)
	s.buf.Reset()
	_ = s.fr.WriteData(1, true, ev("ADDED", "a", "101"))
	srv.Write(s.buf.Bytes())
	opt := Options{Events: carrier.Options{Budget: event.NewBudget(1 << 20)}}
	out := run(t, []piece{{Client: true, P: c.buf.Bytes()}, {P: srv.Bytes()}}, 1<<16, opt)
	text := strings.Join(out, "\n")
	if count(out, event.KindBudget) != 1 || count(out, `"Type":"ADDED"`) != 1 || count(out, KindFrameSize) != 1 {
		t.Fatalf("want a budget problem, a frame-size warning and the event after:\n%s", text)
	}
	if opt.Events.Budget.Held() != 0 {
		t.Errorf("budget still holds %d bytes", opt.Events.Budget.Held())
	}
}

// TestGapAndHPACKError: a header block that does not decode makes the
// direction's later header blocks undecodable (said once); lost bytes end
// the direction, and open streams end with the capture.
func TestGapAndHPACKError(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	watchRequest(t, c, 1)
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true, EndStream: true})
	watchRequest(t, c, 5)
	watchResponse(t, s, 1)
	_ = s.fr.WriteData(1, false, ev("ADDED", "a", "101"))
	var conv []string
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Problem:
			conv = append(conv, "problem "+v.Kind)
		case *record.Event:
			conv = append(conv, "event "+v.Name)
		case *record.Request:
			conv = append(conv, fmt.Sprintf("request %d", v.Exchange))
		case *record.End:
			conv = append(conv, "end "+v.How)
		}
	})
	conn := New(&record.Conn{ID: 1}, sink, Options{})
	t0 := time.Now()
	conn.ClientData(c.buf.Bytes(), t0)
	conn.ServerData(s.buf.Bytes(), t0)
	conn.ServerGap(100, t0)
	conn.ServerData([]byte("more bytes after the gap"), t0)
	conn.CloseServer(exchange.EndCapture, t0)
	want := "request 1; problem " + KindHPACK + "; event a; problem " + exchange.KindMissing + "; end not decoded further"
	if got := strings.Join(conv, "; "); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// FuzzConn feeds arbitrary bytes to both directions, in writes cut where
// seed says: the follower must not panic, and how the bytes are cut must
// not change the records.
func FuzzConn(f *testing.F) {
	c, s := newPeer(true), newPeer(false)
	watchRequest(f, c, 1)
	watchResponse(f, s, 1)
	_ = s.fr.WriteData(1, false, ev("ADDED", "a", "101"))
	_ = s.fr.WriteDataPadded(1, true, ev("DELETED", "a", "102"), make([]byte, 3))
	f.Add(c.buf.Bytes(), s.buf.Bytes(), int64(1))
	f.Add([]byte(ClientPreface), []byte{0, 0, 0, 4, 0, 0, 0, 0, 0}, int64(2))
	f.Fuzz(func(t *testing.T, client, server []byte, seed int64) {
		if !bytes.HasPrefix(client, []byte(ClientPreface)) {
			client = append([]byte(ClientPreface), client...)
		}
		pieces := []piece{{Client: true, P: client}, {P: server}}
		whole := run(t, pieces, 0, Options{MaxHeaderListBytes: 4096})
		step := 1 + int(uint64(seed)%17)
		rng := rand.New(rand.NewSource(seed))
		_ = rng
		if got := run(t, pieces, step, Options{MaxHeaderListBytes: 4096}); strings.Join(got, "\n") != strings.Join(whole, "\n") {
			t.Fatalf("writes of %d bytes differ from whole writes:\n%s\nwhole:\n%s", step, strings.Join(got, "\n"), strings.Join(whole, "\n"))
		}
	})
}

// TestFlowControlStall: a client that advertises a small stream window and
// opens it only 2 s after the server filled it stalled the watch; the note
// says for how long. DATA past the connection window is a warning.
func TestFlowControlStall(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 300})
	watchRequest(t, c, 1)
	first := append([]byte(nil), c.buf.Bytes()...)
	c.buf.Reset()
	watchResponse(t, s, 1)
	e := ev("ADDED", "a", "101")
	_ = s.fr.WriteData(1, false, e)
	_ = s.fr.WriteData(1, false, make([]byte, 300-len(e))) // the window is now 0
	served := append([]byte(nil), s.buf.Bytes()...)
	s.buf.Reset()
	_ = c.fr.WriteWindowUpdate(1, 1000)
	update := append([]byte(nil), c.buf.Bytes()...)
	_ = s.fr.WriteData(1, false, make([]byte, 70000)) // past the connection's 65535
	over := s.buf.Bytes()

	var notes, problems, stalls []string
	conn := New(&record.Conn{ID: 1}, record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.ConnNote:
			notes = append(notes, v.Message)
			if v.Stall > 0 {
				stalls = append(stalls, fmt.Sprintf("stream %d %v", v.Stream, v.Stall))
			}
		case *record.Problem:
			problems = append(problems, v.Kind+": "+v.Detail)
		}
	}), Options{})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	conn.ClientData(first, t0)
	conn.ServerData(served, t0.Add(time.Second))
	conn.ClientData(update, t0.Add(3*time.Second))
	conn.ServerData(over, t0.Add(4*time.Second))
	want := "flow control: stream 1's window at the client was at 0 for 2s, holding back the server's DATA; WINDOW_UPDATE +1000"
	if !strings.Contains(strings.Join(notes, "\n"), want) || fmt.Sprint(stalls) != "[stream 1 2s]" {
		t.Errorf("notes %q (stalls %v)\nwant %q", notes, stalls, want)
	}
	if len(problems) != 3 || !strings.Contains(problems[0], "SETTINGS_MAX_FRAME_SIZE") ||
		!strings.Contains(problems[1], "4765 bytes past the connection window the client advertised") ||
		!strings.Contains(problems[2], "69000 bytes past the stream's window") {
		t.Errorf("problems %q", problems)
	}
}

// TestResponseHeadersLost: when the server's header blocks cannot be
// decoded any more, a watch whose request is known still gives its events
// from its DATA frames, behind a response inferred from the request.
func TestResponseHeadersLost(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	watchRequest(t, c, 1)
	watchRequest(t, c, 3)
	watchResponse(t, s, 1)
	_ = s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
	_ = s.fr.WriteData(3, false, ev("ADDED", "b", "102"))
	_ = s.fr.WriteData(1, false, ev("ADDED", "a", "101"))
	_ = s.fr.WriteData(3, true, ev("DELETED", "b", "103"))
	out := run(t, []piece{{Client: true, P: c.buf.Bytes()}, {P: s.buf.Bytes()}}, 0, Options{})
	text := strings.Join(out, "\n")
	if count(out, KindHPACK) != 1 || count(out, `(header block not decoded)`) != 1 ||
		count(out, `"Exchange":3,"Seq":`) != 2 || count(out, `"Exchange":1,"Seq":`) != 1 {
		t.Fatalf("want stream 3's two events behind an inferred response:\n%s", text)
	}
}

// TestHPACKAmplification: a table entry referred to again and again (a few
// bytes per block) decoding to megabytes is an HPACK bomb: said once, and
// the later blocks' streams are not followed, so output stays small.
func TestHPACKAmplification(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 65536})
	watchRequest(t, c, 1)
	big := strings.Repeat("C", 4000)
	for i := 0; i < 2000; i++ {
		s.headers(t, 1, false, 0, ":status", "103", "link", big) // indexed after the first
	}
	out := run(t, []piece{{Client: true, P: c.buf.Bytes()}, {P: s.buf.Bytes()}}, 0, Options{})
	size := len(strings.Join(out, "\n"))
	if count(out, KindHPACKBomb) != 1 || size > 2<<20 {
		t.Fatalf("%d bytes of records, %d bomb problems; want one and under 2 MiB", size, count(out, KindHPACKBomb))
	}
}

// TestSkippedDataFrame: a DATA frame skipped for lack of budget breaks the
// event it carried part of: no event is stitched across it, and the frames
// after it keep their index.
func TestSkippedDataFrame(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	_ = s.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
	_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
	watchRequest(t, c, 1)
	watchResponse(t, s, 1)
	big := []byte(fmt.Sprintf(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"default","resourceVersion":"5"}}}`+"\n", strings.Repeat("n", 40000)))
	_ = s.fr.WriteData(1, false, big[:100])
	_ = s.fr.WriteData(1, false, big[100:30000])
	_ = s.fr.WriteData(1, false, big[30000:])
	_ = s.fr.WriteData(1, true, ev("DELETED", "last", "6"))
	opt := Options{Events: carrier.Options{Budget: event.NewBudget(20 << 10)}}
	out := run(t, []piece{{Client: true, P: c.buf.Bytes()}, {P: s.buf.Bytes()}}, 0, opt)
	text := strings.Join(out, "\n")
	if count(out, `"Type":"ADDED"`) != 0 || count(out, `"Type":"DELETED"`) != 1 || count(out, `"index":3,`) != 1 || count(out, event.KindBudget) == 0 {
		t.Fatalf("want the ADDED event lost (its middle frame skipped) and DELETED in DATA frame 3:\n%s", text)
	}
}

// TestResponseWithoutRequest: a response on a stream whose request was not
// captured is followed on its own; its first event confirms the watch.
func TestResponseWithoutRequest(t *testing.T) {
	s := newPeer(false)
	watchResponse(t, s, 5)
	_ = s.fr.WriteData(5, true, ev("ADDED", "a", "101"))
	out := run(t, []piece{{Client: true, P: []byte(ClientPreface)}, {P: s.buf.Bytes()}}, 0, Options{})
	if count(out, `"Exchange":5,"Seq":1,`) != 1 {
		t.Fatalf("want stream 5's event:\n%s", strings.Join(out, "\n"))
	}
}

// TestFrameErrorFlood: frames that do not decode are listed up to a bound,
// then counted.
func TestFrameErrorFlood(t *testing.T) {
	var flood bytes.Buffer
	for i := 0; i < 1000; i++ {
		flood.Write([]byte{0, 0, 0, byte(http2.FramePing), 0, 0, 0, 0, 0}) // a PING must carry 8 bytes
	}
	out := run(t, []piece{{Client: true, P: append([]byte(ClientPreface), flood.Bytes()...)}}, 0, Options{})
	if n := count(out, KindFrame); n != maxFrameErrors+1 || count(out, "992 more frames from the client did not decode") != 1 {
		t.Fatalf("%d frame problems:\n%s", n, strings.Join(out, "\n"))
	}
}

// TestListFrames: with ListFrames every frame of both directions is a note
// with its type, stream, length, flags and offset.
func TestListFrames(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	_ = c.fr.WriteSettings()
	watchRequest(t, c, 1)
	_ = s.fr.WriteSettingsAck()
	watchResponse(t, s, 1)
	_ = s.fr.WriteDataPadded(1, true, ev("ADDED", "a", "101"), make([]byte, 4))
	out := run(t, []piece{{Client: true, P: c.buf.Bytes()}, {P: s.buf.Bytes()}}, 3, Options{ListFrames: true})
	var frames []string
	for _, l := range out {
		if strings.Contains(l, `"Kind":"h2-frame"`) {
			var n record.ConnNote
			if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "*record.ConnNote ")), &n); err != nil {
				t.Fatal(err)
			}
			frames = append(frames, n.Message)
		}
	}
	want := []string{
		"client SETTINGS stream 0, 0 bytes, @24",
		"client HEADERS stream 1, 94 bytes, flags END_STREAM|END_HEADERS, @33",
		"server SETTINGS stream 0, 0 bytes, flags ACK, @0",
		"server HEADERS stream 1, 14 bytes, flags END_HEADERS, @9",
		"server DATA stream 1, 140 bytes, flags END_STREAM|PADDED, @32", // 135 data, the Pad Length octet, 4 of padding
	}
	if strings.Join(frames, "\n") != strings.Join(want, "\n") {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(frames, "\n"), strings.Join(want, "\n"))
	}
}

// TestRapidReset: streams opened and reset at once by the client
// (CVE-2023-44487's shape) each end with an End record, so that what
// follows (the printer) forgets them; the follower keeps none of them.
func TestRapidReset(t *testing.T) {
	c := newPeer(true)
	const n = 5000
	for i := 0; i < n; i++ {
		id := uint32(2*i + 1)
		watchRequest(t, c, id)
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	ends := 0
	conn := New(&record.Conn{ID: 1}, record.SinkFunc(func(r record.Record) {
		if e, ok := r.(*record.End); ok && e.How == "reset by RST_STREAM" && e.Detail == "CANCEL from the client, before any response" {
			ends++
		}
	}), Options{})
	conn.ClientData(c.buf.Bytes(), time.Now())
	if ends != n || len(conn.streams) != 0 || conn.resets != n {
		t.Fatalf("%d ends, %d streams kept, %d resets; want %d, 0, %d", ends, len(conn.streams), conn.resets, n, n)
	}
}

// TestSummaryAfterStreamEnds: when the capture ends with a watch stream
// still open, the stream's end comes before the connection's summary note.
func TestSummaryAfterStreamEnds(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	watchRequest(t, c, 1)
	watchResponse(t, s, 1)
	_ = s.fr.WriteData(1, false, ev("ADDED", "a", "101"))
	sink, out := testutil.RecordLines(t)
	conn := New(&record.Conn{ID: 1}, sink, Options{})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	testutil.Feed([]piece{{Client: true, P: c.buf.Bytes()}, {P: s.buf.Bytes()}}, 0, t0, conn.ClientData, conn.ServerData)
	conn.CloseServer(exchange.EndCapture, t0)
	conn.CloseClient(exchange.EndCapture, t0)
	end, note := -1, -1
	for i, l := range *out {
		if strings.Contains(l, `"How":"capture ended mid-stream"`) {
			end = i
		}
		if strings.Contains(l, "HTTP/2 connection: 1 stream") {
			note = i
		}
	}
	if end < 0 || note < 0 || note < end {
		t.Fatalf("want the stream's end (line %d) before the connection's note (line %d):\n%s", end, note, strings.Join(*out, "\n"))
	}
}

// TestRequestUserinfoRedacted: a user name and password in a request's
// :path (absolute form) are not shown, as over HTTP/1.1 (found by a
// hostile-input trial).
func TestRequestUserinfoRedacted(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	c.headers(t, 1, true, 0, ":method", "GET", ":scheme", "https", ":authority", "k",
		":path", "https://admin:SUPERSECRETPASS@k/api/v1/namespaces/default/configmaps?watch=1")
	watchResponse(t, s, 1)
	_ = s.fr.WriteData(1, true, ev("ADDED", "a", "101"))
	text := strings.Join(run(t, []piece{{Client: true, P: c.buf.Bytes()}, {P: s.buf.Bytes()}}, 0, Options{}), "\n")
	if strings.Contains(text, "SUPERSECRETPASS") || !strings.Contains(text, "https://REDACTED@k/api/v1/namespaces/default/configmaps?watch=1") {
		t.Errorf("records:\n%s", text)
	}
}
