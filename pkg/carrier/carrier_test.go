package carrier_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/carrier"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/record"
)

// Watch events of known lengths: 88, 91 and 90 bytes.
const (
	addedA    = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}}`
	modifiedB = `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b"}}}`
	deletedC  = `{"type":"DELETED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"}}}`
	// notAnEvent is JSON, framed as an event, that is no watch event.
	notAnEvent = `{"object":{}}`
)

// sink is a Body's Env and AttachFunc: it keeps the records emitted, in
// order, and the carriers handed over with each event.
type sink struct {
	recs    []record.Record
	located int
	carried map[*record.Event][]carrier.Carried
}

func newSink() *sink { return &sink{carried: map[*record.Event][]carrier.Carried{}} }

func (s *sink) Emit(r record.Record)      { s.recs = append(s.recs, r) }
func (s *sink) Problem(p *record.Problem) { s.recs = append(s.recs, p) }
func (s *sink) Locate(*record.Problem)    { s.located++ }

// attach copies carried: the Body reuses its array.
func (s *sink) attach(ev *record.Event, carried []carrier.Carried) {
	s.carried[ev] = slices.Clone(carried)
}

// gotEvent is what a test checks of an emitted event.
type gotEvent struct {
	Type, Name     string
	Offset, Length int64
	Initial        bool
	Carried        []gotCarried
}

// gotCarried is one carrier of an event: the Meta given to Start, and the
// carrier's and the event's counts.
type gotCarried struct {
	Meta       any
	Index      int
	Size, Data int64
	Inflated   int64
	Events     int
	Bytes      int64
	Ordinal    int
}

// gotProblem is what a test checks of a problem or warning.
type gotProblem struct {
	Kind    string
	Warning bool
	Offset  int64
	Where   string
}

// got turns the records emitted so far into gotEvent and gotProblem
// values, in order.
func (s *sink) got() []any {
	var out []any
	for _, r := range s.recs {
		switch v := r.(type) {
		case *record.Event:
			g := gotEvent{Type: v.Type, Name: v.Name, Offset: v.Offset, Length: v.Length, Initial: v.Initial}
			for _, c := range s.carried[v] {
				g.Carried = append(g.Carried, gotCarried{Meta: c.Carrier.Meta, Index: c.Carrier.Index, Size: c.Carrier.Size,
					Data: c.Carrier.Data, Inflated: c.Carrier.Inflated, Events: c.Carrier.Events, Bytes: c.Bytes,
					Ordinal: c.Ordinal})
			}
			out = append(out, g)
		case *record.Problem:
			out = append(out, gotProblem{Kind: v.Kind, Warning: v.Warning, Offset: v.Offset, Where: v.Where})
		default:
			out = append(out, fmt.Sprintf("%T", r))
		}
	}
	return out
}

// chunk is the Meta of an HTTP/1.1 chunk in these tests, frame that of an
// HTTP/2 DATA frame.
func chunk(i int) any { return record.Chunk{Index: i} }
func frame(i int) any { return record.Frame{Stream: 3, Index: i} }

// body returns a Body for a JSON watch that reports to s.
func body(s *sink, opt carrier.Options) *carrier.Body {
	conn := &record.Conn{ID: 1}
	return carrier.New(s, opt, s.attach, conn, 1, "server", event.FormatJSON, time.Unix(1700000000, 0))
}

// carry hands each of parts to b as one carrier of its own, numbered from
// 0, its Meta made by meta.
func carry(b *carrier.Body, meta func(int) any, parts ...string) {
	for i, p := range parts {
		b.Start(carrier.Carrier{Index: i, Size: int64(len(p)), Meta: meta(i)})
		b.Write([]byte(p))
	}
}

func TestCarriers(t *testing.T) {
	for _, c := range []struct {
		name  string
		meta  func(int) any
		parts []string // the carriers' data, one carrier each
		want  []any
	}{{
		name:  "two events in one chunk",
		meta:  chunk,
		parts: []string{addedA + "\n" + modifiedB + "\n"},
		want: []any{
			gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88, Carried: []gotCarried{
				{Meta: chunk(0), Index: 0, Size: 181, Data: 0, Events: 2, Bytes: 88, Ordinal: 1}}},
			gotEvent{Type: "MODIFIED", Name: "b", Offset: 89, Length: 91, Carried: []gotCarried{
				{Meta: chunk(0), Index: 0, Size: 181, Data: 0, Events: 2, Bytes: 91, Ordinal: 2}}},
		},
	}, {
		name:  "one event in three chunks",
		meta:  chunk,
		parts: []string{addedA[:30], addedA[30:60], addedA[60:] + "\n"},
		want: []any{
			gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88, Carried: []gotCarried{
				{Meta: chunk(0), Index: 0, Size: 30, Data: 0, Events: 1, Bytes: 30, Ordinal: 1},
				{Meta: chunk(1), Index: 1, Size: 30, Data: 30, Events: 1, Bytes: 30, Ordinal: 1},
				{Meta: chunk(2), Index: 2, Size: 29, Data: 60, Events: 1, Bytes: 28, Ordinal: 1}}},
		},
	}, {
		// The second chunk holds the end of one event and a whole
		// other: it counts two events, the first chunk two as well.
		name:  "events across a chunk boundary",
		meta:  chunk,
		parts: []string{addedA + "\n" + modifiedB[:41], modifiedB[41:] + "\n" + deletedC + "\n"},
		want: []any{
			gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88, Carried: []gotCarried{
				{Meta: chunk(0), Index: 0, Size: 130, Data: 0, Events: 2, Bytes: 88, Ordinal: 1}}},
			gotEvent{Type: "MODIFIED", Name: "b", Offset: 89, Length: 91, Carried: []gotCarried{
				{Meta: chunk(0), Index: 0, Size: 130, Data: 0, Events: 2, Bytes: 41, Ordinal: 2},
				{Meta: chunk(1), Index: 1, Size: 142, Data: 130, Events: 2, Bytes: 50, Ordinal: 1}}},
			gotEvent{Type: "DELETED", Name: "c", Offset: 181, Length: 90, Carried: []gotCarried{
				{Meta: chunk(1), Index: 1, Size: 142, Data: 130, Events: 2, Bytes: 90, Ordinal: 2}}},
		},
	}, {
		// HTTP/2: a DATA frame per event, its Meta handed back as given.
		name:  "one DATA frame per event",
		meta:  frame,
		parts: []string{addedA + "\n", modifiedB + "\n"},
		want: []any{
			gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88, Carried: []gotCarried{
				{Meta: frame(0), Index: 0, Size: 89, Data: 0, Events: 1, Bytes: 88, Ordinal: 1}}},
			gotEvent{Type: "MODIFIED", Name: "b", Offset: 89, Length: 91, Carried: []gotCarried{
				{Meta: frame(1), Index: 1, Size: 92, Data: 89, Events: 1, Bytes: 91, Ordinal: 1}}},
		},
	}, {
		// The frame that holds only the newline after the event carries
		// none of its bytes and is not listed.
		name:  "an event's newline in a DATA frame of its own",
		meta:  frame,
		parts: []string{addedA, "\n"},
		want: []any{
			gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88, Carried: []gotCarried{
				{Meta: frame(0), Index: 0, Size: 88, Data: 0, Events: 1, Bytes: 88, Ordinal: 1}}},
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			s := newSink()
			b := body(s, carrier.Options{})
			carry(b, c.meta, c.parts...)
			b.Close()
			if got := s.got(); !reflect.DeepEqual(got, c.want) {
				t.Errorf("records:\n got %+v\nwant %+v", got, c.want)
			}
			if p, w := b.Counts(); p != 0 || w != 0 {
				t.Errorf("Counts() = %d problems, %d warnings, want none", p, w)
			}
		})
	}
}

// TestEmittedWhenCarriersComplete checks that an event is emitted only once
// the carrier that holds its last byte has all of its data, and a problem
// found behind it waits behind it.
func TestEmittedWhenCarriersComplete(t *testing.T) {
	s := newSink()
	b := body(s, carrier.Options{})
	data := addedA + "\n" + notAnEvent + "\n"
	b.Start(carrier.Carrier{Index: 0, Size: int64(len(data)), Meta: chunk(0)})
	b.Write([]byte(data[:100])) // addedA whole, notAnEvent begun
	if len(s.recs) != 0 {
		t.Fatalf("emitted %v before the chunk's data was complete", s.got())
	}
	b.Write([]byte(data[100:])) // the chunk is complete
	want := []any{
		gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88, Carried: []gotCarried{
			{Meta: chunk(0), Index: 0, Size: 103, Data: 0, Events: 2, Bytes: 88, Ordinal: 1}}},
		gotProblem{Kind: "watch event does not decode", Offset: 89, Where: "data"},
	}
	if got := s.got(); !reflect.DeepEqual(got, want) {
		t.Errorf("records:\n got %+v\nwant %+v", got, want)
	}
	// The problem was emitted behind a pending event: located first.
	if s.located != 1 {
		t.Errorf("Locate called %d times, want 1", s.located)
	}
	if p, w := b.Counts(); p != 1 || w != 0 {
		t.Errorf("Counts() = %d problems, %d warnings, want 1, 0", p, w)
	}
	b.Close()
}

// gzipMember returns s compressed as one gzip member (RFC 1952).
func gzipMember(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGzipMembers follows a gzip body of two members, one per chunk (the
// API server flushes a member per event): each event's bytes, and the
// inflated bytes of each chunk, are the inflated content's; Data is -1.
func TestGzipMembers(t *testing.T) {
	m1, m2 := gzipMember(t, addedA+"\n"), gzipMember(t, modifiedB+"\n")
	s := newSink()
	b := body(s, carrier.Options{})
	if !b.StartInflate("gzip") {
		t.Fatal("StartInflate(gzip) = false")
	}
	if !b.Compressed() {
		t.Error("Compressed() = false after StartInflate")
	}
	carry(b, chunk, string(m1), string(m2))
	b.Close()
	n1, n2 := int64(len(m1)), int64(len(m2))
	want := []any{
		gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88, Carried: []gotCarried{
			{Meta: chunk(0), Index: 0, Size: n1, Data: -1, Inflated: 89, Events: 1, Bytes: 88, Ordinal: 1}}},
		gotEvent{Type: "MODIFIED", Name: "b", Offset: 89, Length: 91, Carried: []gotCarried{
			{Meta: chunk(1), Index: 1, Size: n2, Data: -1, Inflated: 92, Events: 1, Bytes: 91, Ordinal: 1}}},
	}
	if got := s.got(); !reflect.DeepEqual(got, want) {
		t.Errorf("records:\n got %+v\nwant %+v", got, want)
	}
	if bytes, members := b.Inflated(); bytes != 181 || members != 2 {
		t.Errorf("Inflated() = %d bytes, %d members, want 181, 2", bytes, members)
	}
}

// TestGzipMemberAcrossChunks follows one gzip member cut into two chunks:
// the event is listed in both, and the inflated bytes are shared between
// them.
func TestGzipMemberAcrossChunks(t *testing.T) {
	m := gzipMember(t, addedA+"\n")
	half := len(m) / 2
	s := newSink()
	b := body(s, carrier.Options{})
	b.StartInflate("gzip")
	carry(b, chunk, string(m[:half]), string(m[half:]))
	b.Close()
	if len(s.recs) != 1 {
		t.Fatalf("records: %+v, want one event", s.got())
	}
	ev := s.got()[0].(gotEvent)
	if ev.Type != "ADDED" || ev.Name != "a" || ev.Length != 88 || len(ev.Carried) != 2 {
		t.Fatalf("event: %+v, want ADDED a in 2 chunks", ev)
	}
	// The member's data ends in the second chunk: the output comes when
	// it is read, and each chunk's compressed bytes gave a share of it.
	if ev.Carried[0].Inflated <= 0 || ev.Carried[1].Inflated <= 0 {
		t.Errorf("chunks inflated to %d and %d bytes, want a share for each", ev.Carried[0].Inflated, ev.Carried[1].Inflated)
	}
	var inflated, carried int64
	for _, c := range ev.Carried {
		inflated += c.Inflated
		carried += c.Bytes
		if c.Data != -1 {
			t.Errorf("chunk %d: Data = %d, want -1 (a compressed body)", c.Index, c.Data)
		}
	}
	if inflated != 89 || carried != 88 {
		t.Errorf("chunks inflated to %d bytes and carried %d of the event, want 89 and 88", inflated, carried)
	}
	if bytes, members := b.Inflated(); bytes != 89 || members != 1 {
		t.Errorf("Inflated() = %d bytes, %d members, want 89, 1", bytes, members)
	}
}

// TestUncarried follows a body without carriers (Content-Length): events
// are emitted with no carriers.
func TestUncarried(t *testing.T) {
	s := newSink()
	b := body(s, carrier.Options{})
	b.WriteUncarried([]byte(addedA + "\n" + deletedC + "\n"))
	b.Close()
	want := []any{
		gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88},
		gotEvent{Type: "DELETED", Name: "c", Offset: 89, Length: 90},
	}
	if got := s.got(); !reflect.DeepEqual(got, want) {
		t.Errorf("records:\n got %+v\nwant %+v", got, want)
	}
	if got, want := b.Events(), map[string]int{"ADDED": 1, "DELETED": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("Events() = %v, want %v", got, want)
	}
}

// TestTooManyCarriers: an event carried by more chunks than
// MaxEventCarriers lists the first ones, with a warning after it.
func TestTooManyCarriers(t *testing.T) {
	s := newSink()
	b := body(s, carrier.Options{MaxEventCarriers: 2})
	carry(b, chunk, addedA[:20], addedA[20:40], addedA[40:60], addedA[60:]+"\n")
	b.Close()
	want := []any{
		gotEvent{Type: "ADDED", Name: "a", Offset: 0, Length: 88, Carried: []gotCarried{
			{Meta: chunk(0), Index: 0, Size: 20, Data: 0, Events: 1, Bytes: 20, Ordinal: 1},
			{Meta: chunk(1), Index: 1, Size: 20, Data: 20, Events: 1, Bytes: 20, Ordinal: 1}}},
		gotProblem{Kind: "watch event in too many chunks", Warning: true, Offset: 0, Where: "data"},
	}
	if got := s.got(); !reflect.DeepEqual(got, want) {
		t.Errorf("records:\n got %+v\nwant %+v", got, want)
	}
	if p := s.recs[len(s.recs)-1].(*record.Problem); p.Detail != "2 more chunks carried 48 of its 88 bytes; only the first 2 chunks are listed" {
		t.Errorf("warning detail %q", p.Detail)
	}
	if p, w := b.Counts(); p != 0 || w != 1 {
		t.Errorf("Counts() = %d problems, %d warnings, want 0, 1", p, w)
	}
}

// TestCutShort: an event the body ends inside is a problem, or a warning
// when the client closed the connection.
func TestCutShort(t *testing.T) {
	for _, c := range []struct {
		name     string
		byClient func(*carrier.Body)
		warning  bool
		hint     string
	}{
		{"by the server", func(*carrier.Body) {}, false, ""},
		{"by the client", func(b *carrier.Body) { b.ClosedByClient(false) }, true, "the client closed the connection inside this event"},
		{"by kwatch", func(b *carrier.Body) { b.ClosedByClient(true) }, true, "kwatch closed the connection inside this event"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSink()
			b := body(s, carrier.Options{})
			carry(b, chunk, addedA+"\n"+modifiedB[:50])
			c.byClient(b)
			b.Close()
			got := s.got()
			if len(got) != 2 {
				t.Fatalf("records: %+v, want the event and a problem", got)
			}
			if ev := got[0].(gotEvent); ev.Type != "ADDED" || ev.Name != "a" {
				t.Errorf("first record %+v, want the ADDED event", ev)
			}
			want := gotProblem{Kind: event.KindTruncated, Warning: c.warning, Offset: 89, Where: "data"}
			if got[1] != want {
				t.Errorf("problem %+v, want %+v", got[1], want)
			}
			if p := s.recs[1].(*record.Problem); c.hint != "" && p.Hint != c.hint {
				t.Errorf("hint %q, want %q", p.Hint, c.hint)
			}
		})
	}
}

// TestTentative: a watch inferred from its response only, whose first
// event does not decode, is no watch: nothing is reported.
func TestTentative(t *testing.T) {
	s := newSink()
	b := body(s, carrier.Options{})
	b.SetTentative()
	carry(b, chunk, notAnEvent+"\n"+addedA+"\n")
	b.Close()
	if len(s.recs) != 0 || b.Watching() {
		t.Errorf("records %+v, Watching() = %v; want none, false", s.got(), b.Watching())
	}
	// Without SetTentative the same body is a watch with a problem.
	s = newSink()
	b = body(s, carrier.Options{})
	carry(b, chunk, notAnEvent+"\n"+addedA+"\n")
	b.Close()
	if got := s.got(); len(got) != 2 || got[0] != (gotProblem{Kind: "watch event does not decode", Offset: 0, Where: "data"}) || !b.Watching() {
		t.Errorf("records %+v, Watching() = %v; want a problem then the event, true", got, b.Watching())
	}
}

// TestHoldResponse: the response of a tentative watch goes out before its
// first event, a watch, when the event confirms it; as no watch, and
// before nothing else, when its first event does not decode, when its
// first protobuf length prefix is past the bound (a protobuf object's
// magic), or when the body ends before an event; at once when the body is
// not tentative.
func TestHoldResponse(t *testing.T) {
	resp := func() *record.Response {
		return &record.Response{Conn: &record.Conn{ID: 1}, Exchange: 1, Watch: true, Format: "json"}
	}
	for _, c := range []struct {
		name      string
		format    event.Format
		tentative bool
		parts     []string
		watch     bool
		kinds     []string // the records, in order
	}{
		{"confirmed", event.FormatJSON, true, []string{addedA + "\n"}, true, []string{"response", "event"}},
		{"not an event", event.FormatJSON, true, []string{notAnEvent + "\n" + addedA + "\n"}, false, []string{"response"}},
		{"a protobuf object", event.FormatProtobuf, true, []string{"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Status"}, false, []string{"response"}},
		{"no event", event.FormatJSON, true, nil, false, []string{"response"}},
		{"not tentative", event.FormatJSON, false, nil, true, []string{"response"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSink()
			b := carrier.New(s, carrier.Options{}, s.attach, &record.Conn{ID: 1}, 1, "server", c.format, time.Unix(1700000000, 0))
			if c.tentative {
				b.SetTentative()
			}
			r := resp()
			b.HoldResponse(r)
			if c.tentative && len(s.recs) != 0 {
				t.Fatalf("emitted before any event: %+v", s.recs)
			}
			carry(b, chunk, c.parts...)
			b.Close()
			var kinds []string
			for _, rec := range s.recs {
				switch rec.(type) {
				case *record.Response:
					kinds = append(kinds, "response")
				case *record.Event:
					kinds = append(kinds, "event")
				default:
					kinds = append(kinds, fmt.Sprintf("%T", rec))
				}
			}
			if !slices.Equal(kinds, c.kinds) || r.Watch != c.watch || b.Watching() != c.watch || (r.Format == "") == c.watch {
				t.Errorf("records %v, response Watch %v (format %q), Watching() %v; want %v, %v", kinds, r.Watch, r.Format, b.Watching(), c.kinds, c.watch)
			}
		})
	}
}

// TestInitial: with SetInitial, the ADDED events before the first other
// event are the initial state.
func TestInitial(t *testing.T) {
	s := newSink()
	b := body(s, carrier.Options{})
	b.SetInitial(true)
	carry(b, chunk, addedA+"\n"+addedA+"\n", modifiedB+"\n"+addedA+"\n")
	b.Close()
	var initial []bool
	for _, g := range s.got() {
		initial = append(initial, g.(gotEvent).Initial)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(initial, want) {
		t.Errorf("Initial of the events: %v, want %v", initial, want)
	}
	if got, want := b.Events(), map[string]int{"ADDED": 3, "MODIFIED": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("Events() = %v, want %v", got, want)
	}
}

// TestSecrets: SetSecrets redacts every object as a Secret's.
func TestSecrets(t *testing.T) {
	const cm = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{"k":"value"}}}`
	for _, secrets := range []bool{false, true} {
		s := newSink()
		b := body(s, carrier.Options{})
		b.SetSecrets(secrets)
		carry(b, chunk, cm+"\n")
		b.Close()
		if len(s.recs) != 1 {
			t.Fatalf("SetSecrets(%v): records %+v, want one event", secrets, s.got())
		}
		obj := string(s.recs[0].(*record.Event).Object)
		if shown := strings.Contains(obj, `"value"`); shown == secrets {
			t.Errorf("SetSecrets(%v): object %s", secrets, obj)
		}
	}
}

// TestGap: bytes lost inside an event damage it; the events after it
// decode, at offsets that count the lost bytes.
func TestGap(t *testing.T) {
	s := newSink()
	b := body(s, carrier.Options{})
	data := addedA + "\n" + modifiedB + "\n" + deletedC + "\n"
	b.Start(carrier.Carrier{Index: 0, Size: int64(len(data)), Meta: chunk(0)})
	b.Write([]byte(data[:100]))
	b.Gap(20, true) // inside modifiedB
	b.Write([]byte(data[120:]))
	b.Close()
	got := s.got()
	var events []string
	var problems []gotProblem
	for _, g := range got {
		switch v := g.(type) {
		case gotEvent:
			events = append(events, fmt.Sprintf("%s %s @%d", v.Type, v.Name, v.Offset))
		case gotProblem:
			problems = append(problems, v)
		}
	}
	if want := []string{"ADDED a @0", "DELETED c @181"}; !slices.Equal(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
	if len(problems) != 1 || problems[0].Kind != event.KindLost {
		t.Errorf("problems %+v, want one %q", problems, event.KindLost)
	}
}
