package httpconn_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/httpconn"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// Hostile input fed straight to a Conn: each test checks the records that
// say what happened, that what could be decoded was, and (where the input
// is large) that the live heap stayed under an explicit bound.

const MiB = 1 << 20

// tally keeps what the tests assert on, and no more (so that it does not
// weigh on the heap measured): events as "TYPE name", problems, responses
// and ends.
type tally struct {
	events    []string
	nEvents   int
	problems  []*record.Problem
	responses []*record.Response
	nResp     int
	last      *record.End
	nEnds     int
	notes     []*record.ConnNote
	keepResp  bool
	keepEvent bool
}

func (tl *tally) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.Event:
		tl.nEvents++
		if tl.keepEvent {
			tl.events = append(tl.events, v.Type+" "+v.Name)
		}
	case *record.Problem:
		// A watch the server ended early is a warning of its own
		// (record.KindCut, tested in cut_test.go), not what these tests
		// look at.
		if v.Kind != record.KindCut {
			tl.problems = append(tl.problems, v)
		}
	case *record.Response:
		tl.nResp++
		if tl.keepResp {
			tl.responses = append(tl.responses, v)
		}
	case *record.End:
		tl.last = v
		tl.nEnds++
	case *record.ConnNote:
		tl.notes = append(tl.notes, v)
	}
}

// kinds lists the problem kinds in order, with their details.
func (tl *tally) kinds() []string {
	var ks []string
	for _, p := range tl.problems {
		ks = append(ks, p.Kind+": "+p.Detail)
	}
	return ks
}

func (tl *tally) lastEnd() string {
	if tl.last == nil {
		return ""
	}
	return tl.last.How
}

func newTally() *tally { return &tally{keepResp: true, keepEvent: true} }

// jsonEv is a small JSON watch event of ConfigMap name.
func jsonEv(typ, name string) string {
	return `{"type":"` + typ + `","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"` + name +
		`","namespace":"default","resourceVersion":"7"}}}` + "\n"
}

// feedIn feeds p to f in pieces of at most n bytes, calling probe every
// 256 pieces.
func feedIn(p []byte, n int, f func([]byte, time.Time), probe func()) {
	for i := 1; len(p) > 0; i++ {
		k := min(n, len(p))
		f(p[:k], t0)
		p = p[k:]
		if i%256 == 0 {
			probe()
		}
	}
}

// TestHugeChunkSize announces a chunk of 1 GiB and sends 4 MiB of events in
// it: nothing may be allocated for the announced size, every event in the
// part that came decodes, and the body ends without its last chunk.
func TestHugeChunkSize(t *testing.T) {
	tl := newTally()
	tl.keepEvent = false
	var body bytes.Buffer
	n := 0
	for body.Len() < 4*MiB {
		body.WriteString(jsonEv("ADDED", fmt.Sprintf("cm-%d", n)))
		n++
	}
	peak := testutil.HeapPeak(func(probe func()) {
		c := wire.New(testConn, tl, wire.Options{})
		c.ClientData([]byte(watchGET), t0)
		c.ServerData([]byte(chunkedOK+"40000000\r\n"), t0)
		feedIn(body.Bytes(), 1448, c.ServerData, probe)
		c.CloseServer(exchange.EndFIN, t0)
	})
	t.Logf("1 GiB chunk-size, %d bytes of %d events: live heap peak %.2f MiB", body.Len(), n, float64(peak)/MiB)
	if peak > 2*MiB {
		t.Errorf("live heap grew by %.1f MiB; want under 2 MiB for 4 MiB of input", float64(peak)/MiB)
	}
	if tl.nEvents != n {
		t.Errorf("%d events decoded, want %d", tl.nEvents, n)
	}
	if len(tl.problems) != 0 || tl.lastEnd() != "closed without the last chunk" {
		t.Errorf("problems %q, end %q; want none and \"closed without the last chunk\"", tl.kinds(), tl.lastEnd())
	}
}

// TestMillionTinyChunks sends one event cut into a million 1-byte chunks,
// then events of about 150 bytes in 1-byte chunks: the bookkeeping of
// chunks must not grow with their number.
func TestMillionTinyChunks(t *testing.T) {
	const chunks = 1_000_000
	big := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"big","namespace":"default"},"data":{"k":"` +
		strings.Repeat("x", chunks-200)
	big += strings.Repeat(" ", chunks-len(big)-4) + `"}}}`
	var small strings.Builder
	n := 0
	for small.Len() < chunks {
		small.WriteString(jsonEv("MODIFIED", fmt.Sprintf("cm-%d", n)))
		n++
	}
	oneByteChunks := func(s string) []byte {
		out := make([]byte, 0, 6*len(s))
		for i := 0; i < len(s); i++ {
			out = append(out, '1', '\r', '\n', s[i], '\r', '\n')
		}
		return out
	}
	onWire := append(oneByteChunks(big+"\n"), oneByteChunks(small.String())...)
	onWire = append(onWire, lastChunk...)

	tl := newTally()
	tl.keepEvent = false
	peak := testutil.HeapPeak(func(probe func()) {
		c := wire.New(testConn, tl, wire.Options{})
		c.ClientData([]byte(watchGET), t0)
		c.ServerData([]byte(chunkedOK), t0)
		feedIn(onWire, 1448, c.ServerData, probe)
		c.CloseServer(exchange.EndFIN, t0)
	})
	t.Logf("%d one-byte chunks (%d bytes on the wire), %d events: live heap peak %.2f MiB",
		2*chunks+1, len(onWire), n+1, float64(peak)/MiB)
	// The big event itself is 1 MiB and is kept whole; its listed chunks
	// cost about 130 bytes each (16384 of them), the others nothing.
	if peak > 6*MiB {
		t.Errorf("live heap grew by %.1f MiB; want under 6 MiB", float64(peak)/MiB)
	}
	if tl.nEvents != n+1 || tl.lastEnd() != "last-chunk" {
		t.Errorf("%d events, end %q; want %d and last-chunk", tl.nEvents, tl.lastEnd(), n+1)
	}
	if len(tl.problems) != 1 || tl.problems[0].Kind != "watch event in too many chunks" || !tl.problems[0].Warning ||
		tl.problems[0].Detail != "983616 more chunks carried 983616 of its 1000000 bytes; only the first 16384 chunks are listed" {
		t.Errorf("problems %q; want one \"watch event in too many chunks\" warning", tl.kinds())
	}
	if e, want := tl.last, len(big)+1+small.Len(); e.Chunks != want {
		t.Errorf("end counts %d chunks, want %d", e.Chunks, want)
	}
}

// TestHeaderNeverEnds sends 16 MiB of header fields without the empty line:
// one problem at MaxHeaderBytes, and no more than that buffered.
func TestHeaderNeverEnds(t *testing.T) {
	line := []byte("X-Filler: 0123456789abcdef0123456789abcdef\r\n")
	tl := newTally()
	peak := testutil.HeapPeak(func(probe func()) {
		c := wire.New(testConn, tl, wire.Options{})
		c.ClientData([]byte(watchGET), t0)
		c.ServerData([]byte("HTTP/1.1 200 OK\r\n"), t0)
		chunk := bytes.Repeat(line, 1000)
		for sent := 0; sent < 16*MiB; sent += len(chunk) {
			c.ServerData(chunk, t0)
			probe()
		}
		c.CloseServer(exchange.EndFIN, t0)
	})
	t.Logf("16 MiB header section: live heap peak %.2f MiB", float64(peak)/MiB)
	// The section is kept to MaxHeaderBytes+1 bytes.
	if peak > 2*MiB {
		t.Errorf("live heap grew by %.1f MiB; want under 2 MiB (MaxHeaderBytes is 1 MiB)", float64(peak)/MiB)
	}
	want := []string{"header section too large: no empty line within its first 1048576 bytes"}
	if fmt.Sprint(tl.kinds()) != fmt.Sprint(want) || tl.problems[0].Offset != 0 || tl.problems[0].Direction != "server" {
		t.Errorf("problems %q at %+v; want %q at server stream offset 0", tl.kinds(), tl.problems, want)
	}
}

// TestEventNeverCloses sends a JSON watch event whose top-level object never
// closes: it is skipped once it passes MaxEventBytes, and the bytes after
// that are not kept.
func TestEventNeverCloses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int64
		bytes int
	}{
		{"limit-1MiB", 1 * MiB, 32 * MiB},
		{"default-limit", 0, 96 * MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.max == 0 {
				t.Skip("96 MiB of input")
			}
			tl := newTally()
			limit := tc.max
			if limit == 0 {
				limit = 64 * MiB
			}
			peak := testutil.HeapPeak(func(probe func()) {
				c := wire.New(testConn, tl, wire.Options{Limits: exchange.Limits{MaxEventBytes: tc.max}})
				c.ClientData([]byte(watchGET), t0)
				c.ServerData([]byte(chunkedOK), t0)
				c.ServerData([]byte(chunkOf(jsonEv("ADDED", "before"))), t0)
				c.ServerData([]byte(chunkOf(`{"type":"ADDED","object":{"data":{"k":"`)), t0)
				piece := []byte(chunkOf(strings.Repeat(`x","k":{"y":[1,2,3]},"z":"`, 1200)))
				for sent, i := 0, 1; sent < tc.bytes; sent, i = sent+len(piece), i+1 {
					c.ServerData(piece, t0)
					if i%64 == 0 {
						probe()
					}
				}
				c.CloseServer(exchange.EndFIN, t0)
			})
			t.Logf("%d MiB of one unclosed event, limit %d MiB: live heap peak %.2f MiB", tc.bytes/MiB, limit/MiB, float64(peak)/MiB)
			if bound := uint64(limit) + 2*MiB; peak > bound {
				t.Errorf("live heap grew by %.1f MiB; want under %d MiB", float64(peak)/MiB, bound/MiB)
			}
			want := []string{
				fmt.Sprintf("watch event larger than the limit: more than %d bytes; skipped", limit),
			}
			if got := tl.kinds(); len(got) != 2 || got[0] != want[0] || !strings.HasPrefix(got[1], "watch event cut short: ") {
				t.Errorf("problems %q; want %q then \"watch event cut short\"", got, want)
			}
			if fmt.Sprint(tl.events) != "[ADDED before]" || tl.lastEnd() != "closed without the last chunk" {
				t.Errorf("events %q, end %q", tl.events, tl.lastEnd())
			}
		})
	}
}

// TestDeeplyNestedJSON sends events nested 100000 and 1000000 levels deep:
// they are reported as not decoding (apimachinery's JSON decoder stops at
// its depth limit, without recursing that deep), and the events after them
// decode.
func TestDeeplyNestedJSON(t *testing.T) {
	tl := newTally()
	c := wire.New(testConn, tl, wire.Options{})
	c.ClientData([]byte(watchGET), t0)
	c.ServerData([]byte(chunkedOK), t0)
	for _, depth := range []int{100_000, 1_000_000} {
		deep := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","data":` +
			strings.Repeat(`{"a":[`, depth) + strings.Repeat(`]}`, depth) + "}}\n"
		c.ServerData([]byte(chunkOf(deep)), t0)
		c.ServerData([]byte(chunkOf(jsonEv("ADDED", fmt.Sprint("after-", depth)))), t0)
	}
	c.ServerData([]byte(lastChunk), t0)
	if fmt.Sprint(tl.events) != "[ADDED after-100000 ADDED after-1000000]" {
		t.Errorf("events %q", tl.events)
	}
	if len(tl.problems) != 2 {
		t.Fatalf("problems %q; want two", tl.kinds())
	}
	for _, p := range tl.problems {
		if p.Kind != "watch event does not decode" || !strings.Contains(p.Detail, "depth") {
			t.Errorf("problem %s: %s; want \"watch event does not decode\" naming the depth", p.Kind, p.Detail)
		}
	}
}

// TestProtobufPrefix4GiB sends a protobuf frame whose length prefix says
// 4 GiB, then 8 MiB: the frame is skipped at its prefix and nothing is
// buffered.
func TestProtobufPrefix4GiB(t *testing.T) {
	tl := newTally()
	peak := testutil.HeapPeak(func(probe func()) {
		c := wire.New(testConn, tl, wire.Options{})
		c.ClientData([]byte(protoGET), t0)
		c.ServerData([]byte(protoOK), t0)
		c.ServerData([]byte(chunkOf(protoEvent("ADDED", "before", "5"))), t0)
		c.ServerData([]byte(chunkOf("\xff\xff\xff\xff")), t0)
		piece := []byte(chunkOf(string(bytes.Repeat([]byte{0x0a}, 32<<10))))
		for sent, i := 0, 1; sent < 8*MiB; sent, i = sent+len(piece), i+1 {
			c.ServerData(piece, t0)
			if i%16 == 0 {
				probe()
			}
		}
		c.CloseServer(exchange.EndFIN, t0)
	})
	t.Logf("4 GiB protobuf length prefix, 8 MiB after it: live heap peak %.2f MiB", float64(peak)/MiB)
	if peak > 1*MiB {
		t.Errorf("live heap grew by %.1f MiB; want under 1 MiB", float64(peak)/MiB)
	}
	want := []string{
		"watch event larger than the limit: the length prefix announces 4294967299 bytes, more than 67108864; skipped",
		"watch event cut short: 8388612 bytes of an event, then the body ended",
	}
	if fmt.Sprint(tl.kinds()) != fmt.Sprint(want) {
		t.Errorf("problems %q; want %q", tl.kinds(), want)
	}
	if fmt.Sprint(tl.events) != "[ADDED before]" {
		t.Errorf("events %q", tl.events)
	}
}

// response is a header section with the given status and fields.
func response(status string, fields ...string) string {
	return "HTTP/1.1 " + status + "\r\n" + strings.Join(append(fields, ""), "\r\n") + "\r\n"
}

// TestPipelinedBeyondPending sends 100 requests before any response, then
// the 100 responses, then one more exchange: the first 64 responses are
// paired with their requests, the others get their exchange numbers in
// order without the request, one warning says so, and the exchange after
// them is paired again.
func TestPipelinedBeyondPending(t *testing.T) {
	tl := newTally()
	c := wire.New(testConn, tl, wire.Options{})
	const n = 100
	for i := 1; i <= n; i++ {
		c.ClientData([]byte(fmt.Sprintf("GET /api/v1/namespaces/default/configmaps/cm-%d HTTP/1.1\r\nHost: x\r\n\r\n", i)), t0)
	}
	for i := 1; i <= n; i++ {
		c.ServerData([]byte(response("200 OK", "Content-Length: 2")+"{}"), t0)
	}
	c.ClientData([]byte(watchGET), t0)
	c.ServerData([]byte(chunkedOK+chunkOf(jsonEv("ADDED", "a"))+lastChunk), t0)

	if len(tl.problems) != 1 || tl.problems[0].Kind != "too many requests waiting for responses" || !tl.problems[0].Warning ||
		tl.problems[0].Exchange != httpconn.DefaultMaxPending+1 {
		t.Fatalf("problems %q; want one \"too many requests waiting for responses\" warning at exchange %d", tl.kinds(), httpconn.DefaultMaxPending+1)
	}
	if len(tl.responses) != n+1 {
		t.Fatalf("%d responses, want %d", len(tl.responses), n+1)
	}
	for i, r := range tl.responses {
		paired := i < httpconn.DefaultMaxPending || i == n
		if r.Exchange != i+1 || (r.Request != nil) != paired ||
			r.Request != nil && r.Request.Exchange != r.Exchange {
			t.Errorf("response %d: exchange %d, request %v; want exchange %d, paired %v", i+1, r.Exchange, r.Request, i+1, paired)
		}
	}
	if last := tl.responses[n]; !last.Watch || fmt.Sprint(tl.events) != "[ADDED a]" {
		t.Errorf("the watch after the pipelined requests: watch %v, events %q", last.Watch, tl.events)
	}
}

// TestResponseWithoutRequest: a second response on a connection whose only
// request has been answered (a smuggled response, written after the
// watch's last-chunk) is reported; its events are still shown, with
// exchange 2. A first response without a request (a capture that starts
// after it) is not a problem.
func TestResponseWithoutRequest(t *testing.T) {
	tl := newTally()
	c := wire.New(testConn, tl, wire.Options{})
	c.ClientData([]byte(watchGET), t0)
	c.ServerData([]byte(chunkedOK+chunkOf(jsonEv("ADDED", "a"))+lastChunk+
		chunkedOK+chunkOf(jsonEv("MODIFIED", "smuggled"))+lastChunk), t0)
	if len(tl.problems) != 1 || tl.problems[0].Kind != "response without a request" || tl.problems[0].Warning ||
		tl.problems[0].Exchange != 2 {
		t.Fatalf("problems %q; want one \"response without a request\" at exchange 2", tl.kinds())
	}
	if fmt.Sprint(tl.events) != "[ADDED a MODIFIED smuggled]" || len(tl.responses) != 2 || tl.responses[1].Exchange != 2 {
		t.Errorf("events %q, %d responses", tl.events, len(tl.responses))
	}

	first := newTally()
	c = wire.New(testConn, first, wire.Options{})
	c.ServerData([]byte(chunkedOK+chunkOf(jsonEv("ADDED", "a"))+lastChunk), t0)
	if len(first.problems) != 0 {
		t.Errorf("a first response without its request: problems %q", first.kinds())
	}
}

// TestInformationalLoop sends 200000 "100 Continue" responses before the
// watch response: each is reported, none takes the request, the live heap
// does not grow with them, and the watch decodes.
func TestInformationalLoop(t *testing.T) {
	tl := newTally()
	tl.keepResp = false
	var c *wire.Conn
	const n = 200_000
	peak := testutil.HeapPeak(func(probe func()) {
		c = wire.New(testConn, tl, wire.Options{})
		c.ClientData([]byte(watchGET), t0)
		cont := []byte(response("100 Continue"))
		for i := 1; i <= n; i++ {
			c.ServerData(cont, t0)
			if i%10_000 == 0 {
				probe()
			}
		}
	})
	t.Logf("%d 100 Continue responses: live heap peak %.2f MiB", n, float64(peak)/MiB)
	if peak > 1*MiB {
		t.Errorf("live heap grew by %.1f MiB; want under 1 MiB", float64(peak)/MiB)
	}
	tl.keepResp = true
	c.ServerData([]byte(chunkedOK+chunkOf(jsonEv("ADDED", "a"))+chunkOf(jsonEv("DELETED", "a"))+lastChunk), t0)
	if tl.nResp != n+1 || len(tl.problems) != 0 {
		t.Errorf("%d responses, problems %q; want %d and none", tl.nResp, tl.kinds(), n+1)
	}
	if r := tl.responses[0]; r.StatusCode != 200 || r.Request == nil || r.Exchange != 1 || !r.Watch {
		t.Errorf("the 200 response: %+v; want exchange 1, paired with the watch request", r)
	}
	if fmt.Sprint(tl.events) != "[ADDED a DELETED a]" || tl.lastEnd() != "last-chunk" {
		t.Errorf("events %q, end %q", tl.events, tl.lastEnd())
	}
}

// TestFramingFields covers Content-Length and Transfer-Encoding fields that
// are invalid, conflicting or repeated (RFC 9112 §6.3, RFC 9110 §8.6).
func TestFramingFields(t *testing.T) {
	events := chunkOf(jsonEv("ADDED", "a")) + lastChunk
	for _, tc := range []struct {
		name     string
		fields   []string
		body     string
		framing  string
		length   int64
		warnings []string
		events   string
		end      string
	}{
		{name: "content-length-overflow", fields: []string{"Content-Length: 99999999999999999999"}, body: "{}",
			framing: "close", warnings: []string{`invalid Content-Length "99999999999999999999": body read until close`}, end: "close"},
		{name: "content-length-2^63", fields: []string{"Content-Length: 9223372036854775808"}, body: "{}",
			framing: "close", warnings: []string{`invalid Content-Length "9223372036854775808": body read until close`}, end: "close"},
		{name: "content-length-negative", fields: []string{"Content-Length: -2"}, body: "{}",
			framing: "close", warnings: []string{`invalid Content-Length "-2": body read until close`}, end: "close"},
		{name: "content-length-plus", fields: []string{"Content-Length: +2"}, body: "{}",
			framing: "close", warnings: []string{`invalid Content-Length "+2": body read until close`}, end: "close"},
		{name: "content-length-conflict", fields: []string{"Content-Length: 2", "Content-Length: 3"}, body: "{}",
			framing: "close", warnings: []string{`invalid Content-Length "2, 3": body read until close`}, end: "close"},
		{name: "content-length-repeated", fields: []string{"Content-Length: 2, 2", "Content-Length: 2"}, body: "{}",
			framing: "content-length", length: 2, end: "content-length"},
		{name: "transfer-encoding-twice", fields: []string{"Content-Type: application/json", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"},
			body: events, framing: "chunked", warnings: []string{"Transfer-Encoding lists chunked 2 times; decoded once"},
			events: "[ADDED a]", end: "last-chunk"},
		{name: "transfer-encoding-and-content-length", fields: []string{"Content-Type: application/json", "Content-Length: 5", "Transfer-Encoding: chunked"},
			body: events, framing: "chunked",
			warnings: []string{"both Transfer-Encoding and Content-Length; Transfer-Encoding wins (RFC 9112 §6.3), a request-smuggling pattern"},
			events:   "[ADDED a]", end: "last-chunk"},
		{name: "transfer-encoding-gzip-chunked", fields: []string{"Content-Type: application/json", "Transfer-Encoding: gzip, chunked"},
			body: chunkOf("\x1f\x8b\x08\x00junk") + lastChunk, framing: "chunked",
			warnings: []string{"Transfer-Encoding: gzip, chunked; chunks are listed, events are not decoded"}, end: "last-chunk"},
		{name: "transfer-encoding-not-chunked", fields: []string{"Content-Type: application/json", "Transfer-Encoding: gzip"},
			body: "\x1f\x8b", framing: "close", end: "close",
			warnings: []string{"Transfer-Encoding gzip without chunked last: body read until close", "Transfer-Encoding: gzip; events are not decoded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := newTally()
			c := wire.New(testConn, tl, wire.Options{})
			c.ClientData([]byte(watchGET), t0)
			c.ServerData([]byte(response("200 OK", tc.fields...)+tc.body), t0)
			c.CloseServer(exchange.EndFIN, t0)
			var warnings []string
			for _, p := range tl.problems {
				if !p.Warning {
					t.Errorf("problem %s: %s is not a warning", p.Kind, p.Detail)
				}
				warnings = append(warnings, p.Detail)
			}
			if fmt.Sprintf("%q", warnings) != fmt.Sprintf("%q", tc.warnings) {
				t.Errorf("warnings %q; want %q", warnings, tc.warnings)
			}
			r := tl.responses[0]
			if r.Framing != tc.framing || r.ContentLength != tc.length {
				t.Errorf("framing %s, length %d; want %s, %d", r.Framing, r.ContentLength, tc.framing, tc.length)
			}
			if ev := fmt.Sprint(tl.events); ev != tc.events && !(tc.events == "" && ev == "[]") {
				t.Errorf("events %s; want %s", ev, tc.events)
			}
			if tl.lastEnd() != tc.end {
				t.Errorf("end %q; want %q", tl.lastEnd(), tc.end)
			}
		})
	}
}

// TestMadeUpEventTypes sends 20000 events with types of their own, one of
// them 1 MiB long: they decode, and the counts of events by type stay
// bounded (the watch event types and 8 others by name, the rest together).
func TestMadeUpEventTypes(t *testing.T) {
	tl := newTally()
	tl.keepEvent = false
	c := wire.New(testConn, tl, wire.Options{})
	c.ClientData([]byte(watchGET), t0)
	c.ServerData([]byte(chunkedOK+chunkOf(jsonEv("ADDED", "a")+jsonEv(strings.Repeat("T", MiB), "b"))), t0)
	const n = 20_000
	for i := 0; i < n; i++ {
		c.ServerData([]byte(chunkOf(jsonEv(fmt.Sprint("TYPE-", i), "a"))), t0)
	}
	c.ServerData([]byte(lastChunk), t0)
	if tl.nEvents != n+2 || len(tl.problems) != 0 {
		t.Errorf("%d events, problems %q; want %d and none", tl.nEvents, tl.kinds(), n+2)
	}
	want := map[string]int{"ADDED": 1, "(other types)": n - 8 + 1}
	for i := 0; i < 8; i++ {
		want[fmt.Sprint("TYPE-", i)] = 1
	}
	if got := tl.last.Events; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts by type %v; want %v", got, want)
	}
}

// TestManyEventsInOneWrite sends 5000 events in one chunk, in one write and
// then a byte at a time: the frames are decoded as they complete (no more
// than a few hundred wait in one write) and the records are the same.
func TestManyEventsInOneWrite(t *testing.T) {
	var body strings.Builder
	for i := 0; i < 5000; i++ {
		body.WriteString(`{"type":"ADDED","object":{}}` + "\n")
		if i%1000 == 999 {
			body.WriteString("junk\n") // a problem between the events
		}
	}
	onWire := []byte(chunkedOK + chunkOf(body.String()) + lastChunk)
	run := func(piece int) []string {
		rc := &recorder{t: t}
		c := wire.New(testConn, rc, wire.Options{})
		c.ClientData([]byte(watchGET), t0)
		feedIn(onWire, piece, c.ServerData, func() {})
		return rc.lines
	}
	whole, split := run(len(onWire)), run(1)
	if len(whole) != 2+5000+5+1 {
		t.Fatalf("%d records; want the request, the response, 5000 events, 5 problems and the end", len(whole))
	}
	if d := diffLines(whole, split); d != "" {
		t.Fatalf("fed a byte at a time, records differ at %s", d)
	}
}

// TestBudgetHeaderSections: 100 connections share a 1 MiB budget and each
// sends 64 KiB of a header section that never ends (each within
// MaxHeaderBytes). The sections that do not fit are reported and their
// direction dropped; the rest go on, and closing every connection gives
// back every byte.
func TestBudgetHeaderSections(t *testing.T) {
	const conns, budgetBytes = 100, 1 * MiB
	budget := event.NewBudget(budgetBytes)
	tl := newTally()
	line := []byte("X-Filler: 0123456789abcdef0123456789abcdef\r\n")
	section := append([]byte("HTTP/1.1 200 OK\r\n"), bytes.Repeat(line, 64<<10/len(line))...)
	var open []*wire.Conn
	for range conns {
		c := wire.New(testConn, tl, wire.Options{Limits: exchange.Limits{Budget: budget}})
		c.ClientData([]byte(watchGET), t0)
		c.ServerData(section, t0)
		open = append(open, c)
	}
	if h := budget.Held(); h > budgetBytes {
		t.Errorf("%d bytes reserved; the budget is %d", h, budgetBytes)
	}
	over := 0
	for _, p := range tl.problems {
		if p.Kind == event.KindBudget {
			over++
		}
	}
	// 1 MiB holds 16 sections of 64 KiB (less what requests hold: they
	// were parsed and released at once).
	if fits := budgetBytes / len(section); over != conns-fits {
		t.Errorf("%d sections over the budget; want %d (problems %q)", over, conns-fits, tl.kinds()[:min(3, len(tl.kinds()))])
	}
	for _, c := range open {
		c.CloseServer(exchange.EndFIN, t0)
		c.CloseClient(exchange.EndFIN, t0)
	}
	if h := budget.Held(); h != 0 {
		t.Errorf("%d bytes still reserved after every connection closed", h)
	}
}

// TestRequestsWaitingKeepNoHeaders: requests whose header sections are
// complete (each just under the 1 MiB bound) and whose responses have not
// come keep only their request line while they wait: 50 connections must
// not hold 50 MB.
func TestRequestsWaitingKeepNoHeaders(t *testing.T) {
	const conns = 50
	line := []byte("X-Filler: 0123456789abcdef0123456789abcdef\r\n")
	req := append([]byte("GET /api/v1/configmaps?watch=1 HTTP/1.1\r\nHost: x\r\n"), bytes.Repeat(line, 1000<<10/len(line))...)
	req = append(req, "\r\n"...)
	var open []*wire.Conn
	tl := newTally()
	peak := testutil.HeapPeak(func(probe func()) {
		for i := range conns {
			c := wire.New(testConn, tl, wire.Options{})
			c.ClientData(req, t0)
			open = append(open, c)
			if i%10 == 9 {
				probe()
			}
		}
	})
	t.Logf("%d requests of %d KiB waiting for their responses: live heap peak %.1f MiB", conns, len(req)>>10, float64(peak)/MiB)
	if peak > 8*MiB {
		t.Errorf("live heap grew by %.1f MiB; want under 8 MiB", float64(peak)/MiB)
	}
	for _, c := range open {
		c.CloseClient(exchange.EndFIN, t0)
	}
}

// TestEventCutByKwatch: an event cut short because kwatch closed the
// connection (Ctrl-C, --idle-timeout) is a warning that says so; cut by the
// server's close it stays an error.
func TestEventCutByKwatch(t *testing.T) {
	for _, tc := range []struct {
		how     exchange.Ending
		warning bool
	}{{exchange.EndLocal, true}, {exchange.EndFIN, false}} {
		tl := newTally()
		c := wire.New(testConn, tl, wire.Options{})
		c.ClientData([]byte(watchGET), t0)
		c.ServerData([]byte(chunkedOK), t0)
		c.ServerData([]byte(chunkOf(jsonEv("ADDED", "a"))), t0)
		half := jsonEv("MODIFIED", "b")
		c.ServerData([]byte(chunkOf(half[:len(half)/2])), t0)
		c.CloseServer(tc.how, t0)
		var cut *record.Problem
		for _, p := range tl.problems {
			if p.Kind == event.KindTruncated {
				cut = p
			}
		}
		if cut == nil || cut.Warning != tc.warning || (tc.warning && !strings.Contains(cut.Hint, "kwatch closed")) {
			t.Errorf("ending %v: problem %+v; want a %q with warning=%v", tc.how, cut, event.KindTruncated, tc.warning)
		}
	}
}

// TestBareLFNextToFramingField: a bare LF that ends a Transfer-Encoding or
// Content-Length field line, or the line before one, decides the framing
// for a parser that takes it as a line ending, and not for one that does
// not (RFC 9112 §2.2 allows both). Each such LF is one warning at its
// offset in the direction's stream; the message is still decoded as
// framed (llhttp's "Headers separated by LF" is the first case). Bare LFs
// elsewhere in the header section, and framing fields of a message that
// has no body whatever they say, are not reported.
func TestBareLFNextToFramingField(t *testing.T) {
	const ct = "Content-Type: application/json"
	events := chunkOf(jsonEv("ADDED", "a")) + lastChunk
	post := "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\n"
	for _, tc := range []struct {
		name           string
		client, server string
		want           []string // "direction @offset kind: detail" of every problem
		hint           string   // in the hint of every bare LF warning
		events, end    string
	}{
		{name: "llhttp: headers separated by LF, before Transfer-Encoding", client: watchGET,
			server: "HTTP/1.1 200 OK\r\n" + ct + "\nTransfer-Encoding: chunked\r\n\r\n" + events,
			want:   []string{`server @47 bare LF next to a framing field: the line before "Transfer-Encoding: chunked" ends in a bare LF`},
			hint:   "a parser that does not reads the Transfer-Encoding line as part of the line before it",
			events: "[ADDED a]", end: "last-chunk"},
		{name: "after Transfer-Encoding", client: watchGET,
			server: "HTTP/1.1 200 OK\r\n" + ct + "\r\nTransfer-Encoding: chunked\nX-Next: 1\r\n\r\n" + events,
			want:   []string{`server @75 bare LF next to a framing field: "Transfer-Encoding: chunked" ends in a bare LF`},
			hint:   "a parser that does not reads the line after it as part of the Transfer-Encoding field",
			events: "[ADDED a]", end: "last-chunk"},
		{name: "after Transfer-Encoding, before the empty line", client: watchGET,
			server: "HTTP/1.1 200 OK\r\n" + ct + "\r\nTransfer-Encoding: chunked\n\r\n" + events,
			want:   []string{`server @75 bare LF next to a framing field: "Transfer-Encoding: chunked" ends in a bare LF`},
			hint:   "decoded as chunked",
			events: "[ADDED a]", end: "last-chunk"},
		{name: "before Content-Length", client: listGET,
			server: "HTTP/1.1 200 OK\r\n" + ct + "\nContent-Length: 2\r\n\r\n{}",
			want:   []string{`server @47 bare LF next to a framing field: the line before "Content-Length: 2" ends in a bare LF`},
			hint:   "decoded as 2 bytes by Content-Length",
			end:    "content-length"},
		{name: "after Content-Length", client: listGET,
			server: "HTTP/1.1 200 OK\r\nContent-Length: 2\n" + ct + "\r\n\r\n{}",
			want:   []string{`server @34 bare LF next to a framing field: "Content-Length: 2" ends in a bare LF`},
			hint:   "a parser that does not reads the line after it as part of the Content-Length field",
			end:    "content-length"},
		{name: "between Content-Length and Transfer-Encoding: one warning for the LF", client: watchGET,
			server: "HTTP/1.1 200 OK\r\n" + ct + "\r\nContent-Length: 5\nTransfer-Encoding: chunked\r\n\r\n" + events,
			want: []string{
				"server @0 unusual body framing: both Transfer-Encoding and Content-Length; Transfer-Encoding wins (RFC 9112 §6.3), a request-smuggling pattern",
				`server @66 bare LF next to a framing field: "Content-Length: 5" ends in a bare LF, right before "Transfer-Encoding: chunked"`,
			},
			hint:   "a parser that does not reads the Transfer-Encoding line as part of the Content-Length field",
			events: "[ADDED a]", end: "last-chunk"},
		{name: "status line ends in a bare LF before Transfer-Encoding", client: watchGET,
			server: "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\r\n" + ct + "\r\n\r\n" + events,
			want:   []string{`server @15 bare LF next to a framing field: the line before "Transfer-Encoding: chunked" ends in a bare LF`},
			events: "[ADDED a]", end: "last-chunk"},
		{name: "every line ends in a bare LF", client: watchGET,
			server: "HTTP/1.1 200 OK\n" + ct + "\nTransfer-Encoding: chunked\n\n" + events,
			want: []string{
				`server @46 bare LF next to a framing field: the line before "Transfer-Encoding: chunked" ends in a bare LF`,
				`server @73 bare LF next to a framing field: "Transfer-Encoding: chunked" ends in a bare LF`,
			},
			events: "[ADDED a]", end: "last-chunk"},
		{name: "request: before Transfer-Encoding",
			client: post + "Transfer-Encoding: chunked\r\n\r\n" + chunkOf("{}") + lastChunk,
			server: "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
			want:   []string{`client @60 bare LF next to a framing field: the line before "Transfer-Encoding: chunked" ends in a bare LF`},
			hint:   "request-smuggling",
			end:    "no body"},
		{name: "bare LF away from the framing fields", client: watchGET,
			server: "HTTP/1.1 200 OK\r\nX-A: 1\n" + ct + "\r\nTransfer-Encoding: chunked\r\n\r\n" + events,
			events: "[ADDED a]", end: "last-chunk"},
		{name: "304: no body whatever the fields say", client: listGET,
			server: "HTTP/1.1 304 Not Modified\r\nX-A: 1\nContent-Length: 20\r\n\r\n",
			end:    "no body"},
		{name: "CRLF only", client: watchGET, server: chunkedOK + events,
			events: "[ADDED a]", end: "last-chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, piece := range []int{1 << 20, 1} {
				tl := newTally()
				c := wire.New(testConn, tl, wire.Options{})
				feedIn([]byte(tc.client), piece, c.ClientData, func() {})
				feedIn([]byte(tc.server), piece, c.ServerData, func() {})
				c.CloseServer(exchange.EndFIN, t0)
				c.CloseClient(exchange.EndFIN, t0)
				var got []string
				for _, p := range tl.problems {
					got = append(got, fmt.Sprintf("%s @%d %s: %s", p.Direction, p.Offset, p.Kind, p.Detail))
					if !p.Warning {
						t.Errorf("pieces of %d: %s is not a warning", piece, got[len(got)-1])
					}
					if p.Kind == httpconn.KindBareLFFraming && (p.Where != "stream" ||
						!strings.Contains(p.Hint, tc.hint) || !strings.Contains(p.Hint, "frames this message differently")) {
						t.Errorf("pieces of %d: %s: where %q, hint %q; want stream and a hint with %q", piece, got[len(got)-1], p.Where, p.Hint, tc.hint)
					}
				}
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
					t.Errorf("pieces of %d: problems\n\t%q\nwant\n\t%q", piece, got, tc.want)
				}
				if ev := fmt.Sprint(tl.events); ev != tc.events && !(tc.events == "" && ev == "[]") {
					t.Errorf("pieces of %d: events %s; want %s", piece, ev, tc.events)
				}
				if tl.lastEnd() != tc.end {
					t.Errorf("pieces of %d: end %q; want %q", piece, tl.lastEnd(), tc.end)
				}
			}
		})
	}
}

// TestChunkSizeLineCRThenEnd: hyper's "F\rF" chunk-size line. The CR is not
// followed by LF, so the line is invalid however the body goes on: it is
// reported at the CR, also when the server closes the connection right
// after it. A CR as the very last byte may still have been followed by its
// LF: that body is only cut short.
func TestChunkSizeLineCRThenEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		want   []string // "where @offset kind: detail" of every problem
		end    string
		detail string // the End's detail
	}{
		{name: "F CR F then FIN", body: "F\rF",
			want: []string{"body @1 invalid chunk-size: CR not followed by LF: byte 0x46 follows it"},
			end:  "not decoded further"},
		{name: "F CR F after an event, then FIN", body: chunkOf(jsonEv("ADDED", "a")) + "F\rF",
			want: []string{fmt.Sprintf("body @%d invalid chunk-size: CR not followed by LF: byte 0x46 follows it", len(chunkOf(jsonEv("ADDED", "a")))+1)},
			end:  "not decoded further"},
		{name: "F CR F CRLF then FIN", body: "F\rF\r\n" + strings.Repeat("x", 0xff),
			want: []string{"body @1 invalid chunk-size: CR not followed by LF: byte 0x46 follows it"},
			end:  "not decoded further"},
		{name: "F CR then FIN", body: "F\r",
			end: "closed without the last chunk", detail: "inside a chunk-size line (2 bytes read; the last is a CR, its LF did not come)"},
		{name: "lone CR then FIN", body: "\r",
			end: "closed without the last chunk", detail: "inside a chunk-size line (1 bytes read; the last is a CR, its LF did not come)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, piece := range []int{1 << 20, 1} {
				tl := newTally()
				c := wire.New(testConn, tl, wire.Options{})
				c.ClientData([]byte(watchGET), t0)
				feedIn([]byte(chunkedOK+tc.body), piece, c.ServerData, func() {})
				c.CloseServer(exchange.EndFIN, t0)
				var got []string
				for _, p := range tl.problems {
					got = append(got, fmt.Sprintf("%s @%d %s: %s", p.Where, p.Offset, p.Kind, p.Detail))
					if p.Warning || p.Direction != "server" {
						t.Errorf("pieces of %d: %s: warning %v, direction %s; want an error of the server", piece, got[len(got)-1], p.Warning, p.Direction)
					}
				}
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
					t.Errorf("pieces of %d: problems\n\t%q\nwant\n\t%q", piece, got, tc.want)
				}
				if tl.lastEnd() != tc.end || tl.last.Detail != tc.detail || tl.nEnds != 1 {
					t.Errorf("pieces of %d: %d ends, the last %q (%q); want one, %q (%q)", piece, tl.nEnds, tl.lastEnd(), tl.last.Detail, tc.end, tc.detail)
				}
			}
		})
	}
}

// TestBareLFFramingBounded: a header section of thousands of framing
// field lines ending in bare LF gets a few warnings, not thousands.
func TestBareLFFramingBounded(t *testing.T) {
	n := 0
	sink := record.SinkFunc(func(r record.Record) {
		if p, ok := r.(*record.Problem); ok && p.Kind == httpconn.KindBareLFFraming {
			n++
		}
	})
	c := wire.New(&record.Conn{ID: 1}, sink, wire.Options{})
	c.ServerData([]byte("HTTP/1.1 200 OK\r\n"+strings.Repeat("Transfer-Encoding: chunked\n", 5000)+"\r\n0\r\n\r\n"), time.Time{})
	if n != 5 { // 4, and one saying the others are not listed
		t.Errorf("%d warnings, want 5", n)
	}
}

// TestSecretsWatchRedacted: the events of a watch of secrets are redacted
// as Secrets whatever their objects say they are (found by a hostile-input
// trial: a server labelling a Secret's data a ConfigMap had it printed);
// the same event on a watch of configmaps is not.
func TestSecretsWatchRedacted(t *testing.T) {
	ev := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"s"},"data":{"p":"c2VjcmV0"}}}` + "\n"
	server := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkOf(ev) + "0\r\n\r\n")
	for resource, redacted := range map[string]bool{"secrets": true, "%73ecrets": true, "configmaps": false} {
		client := []byte("GET /api/v1/namespaces/default/" + resource + "?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
		out := strings.Join(runConn(t, client, server, 0, whole), "\n")
		if !strings.Contains(out, "*record.Event") || strings.Contains(out, "c2VjcmV0") != !redacted {
			t.Errorf("a watch of %s: redacted %v, want %v:\n%s", resource, !strings.Contains(out, "c2VjcmV0"), redacted, out)
		}
	}
}

// TestSecretsWatchPipelined: a watch of secrets after more pipelined
// requests than are kept waiting (its request not kept, only counted) is
// still redacted as one (found by a fourth hostile-input trial).
func TestSecretsWatchPipelined(t *testing.T) {
	var client, server strings.Builder
	for i := range httpconn.DefaultMaxPending {
		fmt.Fprintf(&client, "GET /api/v1/namespaces/default/configmaps/x%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		server.WriteString("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
	}
	client.WriteString("GET /api/v1/namespaces/default/secrets?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	ev := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"s"},"data":{"p":"c2VjcmV0"}}}` + "\n"
	server.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkOf(ev) + "0\r\n\r\n")
	out := strings.Join(runConn(t, []byte(client.String()), []byte(server.String()), 0, whole), "\n")
	if !strings.Contains(out, "*record.Event") || strings.Contains(out, "c2VjcmV0") {
		t.Errorf("the watch of secrets after %d pipelined requests printed its data:\n%s", httpconn.DefaultMaxPending, out[max(0, len(out)-3000):])
	}
}

// TestMalformedTrailerNotShown: a trailer line that is not a field line and
// may hold a credential (a folded continuation of Set-Cookie) is neither in
// the trailers shown nor quoted by the problem about it (found by a
// hostile-input trial).
func TestMalformedTrailerNotShown(t *testing.T) {
	client := []byte("GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	server := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"0\r\nSet-Cookie: a=\r\n SUPERSECRETFOLD\r\nSet-Cookie : SUPERSECRETSPACE\r\n\r\n")
	out := strings.Join(runConn(t, client, server, 0, whole), "\n")
	if strings.Contains(out, "SUPERSECRET") || !strings.Contains(out, "malformed trailer field line") {
		t.Errorf("a credential in a malformed trailer line is shown:\n%s", out)
	}
}
