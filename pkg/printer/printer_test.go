package printer

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

// TestEscape: bytes from a capture cannot move the cursor, recolor the
// screen or hide text on a terminal.
func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain/name":               "plain/name",
		"\x1b[31mred\x1b[0m":       `\x1b[31mred\x1b[0m`,
		"evil\u202etxt.exe\u2028x": `evil\u202etxt.exe\u2028x`,
		"over\rwrite":              `over\x0dwrite`,
		"tab\tand\nnewline":        `tab\x09and\x0anewline`,
		"caf\xc3\xa9":              "café",
		"bad\xffutf8":              `bad\xffutf8`,
		"c1\u009bcontrol":          `c1\x9bcontrol`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPrettyEscapesWireBytes: a hostile object name reaches the terminal
// escaped; JSON output keeps the exact bytes.
func TestPrettyEscapesWireBytes(t *testing.T) {
	ev := &record.Event{Conn: &record.Conn{ID: 1}, Exchange: 1, Seq: 1, Type: "ADDED", Kind: "ConfigMap",
		Namespace: "ns", Name: "evil\x1b]0;pwned\x07", ResourceVersion: "1", Object: []byte(`{"kind":"ConfigMap"}`)}
	var pretty, js bytes.Buffer
	p := NewPretty(&pretty, Options{})
	p.Emit(ev)
	p.Flush()
	if strings.Contains(pretty.String(), "\x1b") || !strings.Contains(pretty.String(), `evil\x1b]0;pwned\x07`) {
		t.Errorf("pretty: %q", pretty.String())
	}
	j := NewJSON(&js, Options{})
	j.Emit(ev)
	j.Flush()
	if !strings.Contains(js.String(), `"name":"evil\u001b]0;pwned\u0007"`) {
		t.Errorf("json: %s", js.String())
	}
}

// TestLiveSummaryRequested: a watch the server refused is counted as
// requested, not opened, in both outputs.
func TestLiveSummaryRequested(t *testing.T) {
	for _, tc := range []struct {
		requested, opened int
		pretty, json      string
	}{
		{1, 0, "summary: 0 watches opened (1 requested) · ", `"watchesRequested":1,"watchesOpened":0,`},
		{1, 1, "summary: 1 watch opened · ", `"watchesRequested":1,"watchesOpened":1,`},
		{3, 2, "summary: 2 watches opened (3 requested) · ", `"watchesRequested":3,"watchesOpened":2,`},
	} {
		s := &record.Summary{Live: true, WatchesRequested: tc.requested, WatchesOpened: tc.opened}
		var pretty, js bytes.Buffer
		p := NewPretty(&pretty, Options{})
		p.Emit(s)
		p.Flush()
		if !strings.HasPrefix(pretty.String(), tc.pretty) {
			t.Errorf("pretty: %q, want it to start %q", pretty.String(), tc.pretty)
		}
		j := NewJSON(&js, Options{})
		j.Emit(s)
		j.Flush()
		if !strings.Contains(js.String(), tc.json) {
			t.Errorf("json: %s, want %s", js.String(), tc.json)
		}
	}
}

// TestErrWriterLargeLine: a line of flushBytes or more is written as it
// comes, after the lines held before it, and the ones after it follow.
func TestErrWriterLargeLine(t *testing.T) {
	var out bytes.Buffer
	w := &errWriter{w: &out}
	big := strings.Repeat("x", flushBytes) + "\n"
	for _, l := range []string{"a\n", big, "b\n"} {
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil || out.String() != "a\n"+big+"b\n" {
		t.Errorf("wrote %d bytes, %v; want the three lines in order", out.Len(), err)
	}
}

// TestHealthBookmarkIntervals: the overall health line says of how many
// intervals its bookmark interval is when they were measured within some
// watches only (18 bookmarks, one interval between two of one watch), and
// not when they are all of one watch's.
func TestHealthBookmarkIntervals(t *testing.T) {
	for _, c := range []struct {
		b    record.Intervals
		want string
	}{
		{record.Intervals{Count: 18, Min: 4293 * time.Millisecond, Median: 4293 * time.Millisecond, Max: 4293 * time.Millisecond, Measured: 1},
			"18 bookmarks, every 4.293s within a watch (min 4.293s, max 4.293s; 1 interval)"},
		{record.Intervals{Count: 3, Min: time.Second, Median: 2 * time.Second, Max: 2 * time.Second, Measured: 2},
			"3 bookmarks, every 2s (min 1s, max 2s)"},
	} {
		got := HealthText(&record.Health{Scope: "all", Watches: 2, Bookmarks: c.b})
		if !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want it to say %q", c.b, got, c.want)
		}
	}
}

// TestBookmarkFold: a watch's bookmarks are one line per BookmarkFold,
// said before its next other event, at its end, and once the fold spans
// BookmarkFold (also when another watch's record comes after that);
// the initial-events-end bookmark and a bookmark alone keep their own
// line; --bookmarks, and JSON, show each.
func TestBookmarkFold(t *testing.T) {
	c := &record.Conn{ID: 1, HTTP2: true}
	t0 := time.Date(2026, 12, 4, 4, 46, 0, 0, time.UTC)
	seq := map[int]int{}
	ev := func(ex int, typ, rv string, at time.Duration) *record.Event {
		seq[ex]++
		e := &record.Event{Conn: c, Exchange: ex, Seq: seq[ex], Type: typ, ResourceVersion: rv, Time: t0.Add(at),
			Frames: []record.Frame{{Stream: uint32(ex), Index: seq[ex] - 1, Length: 95}}}
		if typ != "BOOKMARK" {
			e.Kind, e.Namespace, e.Name = "ConfigMap", "demo", "a"
		}
		return e
	}
	iee := ev(1, "BOOKMARK", "100", 0)
	iee.InitialEventsEnd = true
	recs := []record.Record{
		iee,
		ev(1, "BOOKMARK", "100", time.Minute),
		ev(1, "BOOKMARK", "105", 2*time.Minute),
		ev(1, "ADDED", "106", 2*time.Minute+time.Second),
		ev(1, "BOOKMARK", "106", 3*time.Minute),
		ev(3, "BOOKMARK", "200", 3*time.Minute),
		ev(1, "BOOKMARK", "107", 4*time.Minute),
		ev(1, "BOOKMARK", "108", 5*time.Minute),
		ev(1, "BOOKMARK", "110", 8*time.Minute),
		ev(3, "ADDED", "201", 9*time.Minute),
		&record.End{Conn: c, Exchange: 1, Time: t0.Add(10 * time.Minute), How: "end of stream", Clean: true, Watch: true},
		&record.End{Conn: c, Exchange: 3, Time: t0.Add(10 * time.Minute), How: "end of stream", Clean: true, Watch: true},
	}
	print := func(opt Options) string {
		var out bytes.Buffer
		p := NewPretty(&out, opt)
		for _, r := range recs {
			p.Emit(r)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			if !strings.Contains(l, " end: ") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	want := strings.Join([]string{
		"#1 invalid AddrPort -> invalid AddrPort",
		"2026-12-04T04:46:00.000000Z #1 s1   1 BOOKMARK  rv 100 (k8s.io/initial-events-end)  DATA frame 0 = 95 bytes",
		"2026-12-04T04:48:00.000000Z #1 s1   2 BOOKMARKs rv 100→105 over 1m0s (events 2-3)",
		"2026-12-04T04:48:01.000000Z #1 s1   4 ADDED     ConfigMap demo/a  rv 106  DATA frame 3 = 95 bytes",
		// At 4:54 the fold that began at 4:49 spans 5 minutes: said;
		// the bookmark of 4:54 begins the next.
		"2026-12-04T04:51:00.000000Z #1 s1   3 BOOKMARKs rv 106→108 over 2m0s (events 5-7)",
		// Watch 3's bookmark, alone, at its next event.
		"2026-12-04T04:49:00.000000Z #1 s3   1 BOOKMARK  rv 200  DATA frame 0 = 95 bytes",
		"2026-12-04T04:55:00.000000Z #1 s3   2 ADDED     ConfigMap demo/a  rv 201  DATA frame 1 = 95 bytes",
		// Watch 1's last, alone, at its end.
		"2026-12-04T04:54:00.000000Z #1 s1   8 BOOKMARK  rv 110  DATA frame 7 = 95 bytes",
	}, "\n")
	if got := print(Options{}); got != want {
		t.Errorf("folded:\n%s\nwant\n%s", got, want)
	}
	if got := print(Options{Bookmarks: true}); strings.Count(got, " BOOKMARK  rv ") != 8 || strings.Contains(got, "BOOKMARKs") {
		t.Errorf("--bookmarks:\n%s", got)
	}
	var js bytes.Buffer
	j := NewJSON(&js, Options{})
	for _, r := range recs {
		j.Emit(r)
	}
	j.Close()
	if n := strings.Count(js.String(), `"type":"BOOKMARK"`); n != 8 {
		t.Errorf("JSON has %d bookmarks, want 8", n)
	}
}

// TestJoinedStreamLine: the response of a stream joined mid-connection
// and the note that names its resource are one line; a stream whose first
// event is a bookmark is named by the bookmark's object.
func TestJoinedStreamLine(t *testing.T) {
	c := &record.Conn{ID: 2, HTTP2: true}
	t0 := time.Date(2026, 12, 4, 4, 46, 13, 0, time.UTC)
	resp := func(ex int) *record.Response {
		return &record.Response{Conn: c, Exchange: ex, Time: t0, Proto: "HTTP/2.0", StatusCode: 200, Reason: "(HEADERS not captured: joined mid-connection)",
			ContentType: "application/vnd.kubernetes.protobuf;stream=watch", Watch: true, Inferred: true}
	}
	recs := []record.Record{
		resp(16523),
		&record.ConnNote{Conn: c, Time: t0, Kind: "h2-joined", Stream: 16523, Resource: &record.Resource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "demo"},
			Message: "stream 16523: its request was not seen; its events are v1 ConfigMap, as named by event 1's object (the first in namespace demo, the namespace watched not known)"},
		&record.Event{Conn: c, Exchange: 16523, Seq: 1, Time: t0, Type: "ADDED", APIVersion: "v1", Kind: "ConfigMap", Namespace: "demo", Name: "app-config", ResourceVersion: "2370"},
		resp(7805),
		&record.Event{Conn: c, Exchange: 7805, Seq: 1, Time: t0, Type: "BOOKMARK", APIVersion: "coordination.k8s.io/v1", Kind: "Lease", ResourceVersion: "2371"},
		resp(7807),
		&record.Event{Conn: c, Exchange: 7807, Seq: 1, Time: t0, Type: "ERROR"},
		// kubectl get -w's Table rows, whose objects are
		// PartialObjectMetadata; a metadata informer's watch.
		resp(3),
		&record.ConnNote{Conn: c, Time: t0, Kind: "h2-joined", Stream: 3,
			Resource: &record.Resource{APIVersion: "meta.k8s.io/v1", Kind: "Table", Namespace: "demo", RowKind: "PartialObjectMetadata"}},
		resp(5),
		&record.ConnNote{Conn: c, Time: t0, Kind: "h2-joined", Stream: 5, Resource: &record.Resource{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}},
		resp(7),
		&record.ConnNote{Conn: c, Time: t0, Kind: "h2-joined", Stream: 7,
			Resource: &record.Resource{APIVersion: "meta.k8s.io/v1", Kind: "Table", Namespace: "demo", RowKind: "ConfigMap"}},
	}
	var out bytes.Buffer
	p := NewPretty(&out, Options{})
	for _, r := range recs {
		p.Emit(r)
	}
	p.Close()
	got := out.String()
	for _, want := range []string{
		"2026-12-04T04:46:13.000000Z #2 s16523 < HTTP/2.0 200 (HEADERS not captured: joined mid-connection) · application/vnd.kubernetes.protobuf;stream=watch · watch of v1 ConfigMap (request not seen: named by its first event's object, in namespace demo; the namespace watched not known) · inferred from the body\n" +
			"2026-12-04T04:46:13.000000Z #2 s16523   1 ADDED     ConfigMap demo/app-config  rv 2370  0 bytes, not chunked\n",
		"#2 s7805 < HTTP/2.0 200 (HEADERS not captured: joined mid-connection) · application/vnd.kubernetes.protobuf;stream=watch · watch of coordination.k8s.io/v1 Lease (request not seen: named by its first event's object, a bookmark) · inferred from the body\n",
		"#2 s7807 < HTTP/2.0 200 (HEADERS not captured: joined mid-connection) · application/vnd.kubernetes.protobuf;stream=watch · watch (request not captured) · inferred from the body\n",
		"#2 s3 < HTTP/2.0 200 (HEADERS not captured: joined mid-connection) · application/vnd.kubernetes.protobuf;stream=watch · watch of Table rows (resource not seen; request not seen: its first event's object does not name it, in namespace demo; the namespace watched not known) · inferred from the body\n",
		"#2 s5 < HTTP/2.0 200 (HEADERS not captured: joined mid-connection) · application/vnd.kubernetes.protobuf;stream=watch · watch of object metadata (resource not seen; request not seen: its first event's object does not name it, cluster-scoped or in no namespace) · inferred from the body\n",
		"#2 s7 < HTTP/2.0 200 (HEADERS not captured: joined mid-connection) · application/vnd.kubernetes.protobuf;stream=watch · watch of ConfigMap as Table rows (request not seen: named by its first event's object, in namespace demo; the namespace watched not known) · inferred from the body\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks\n%s\nin\n%s", want, got)
		}
	}
	if strings.Contains(got, "its request was not seen;") {
		t.Errorf("the stream is named twice:\n%s", got)
	}
}

// TestLeftOutSummary: what the filters left out is in the summary line,
// and said on a line of its own when it was not known, or hid problems;
// JSON has it whole.
func TestLeftOutSummary(t *testing.T) {
	s := &record.Summary{Packets: 10, Connections: 2, LeftOut: &record.LeftOut{Connections: 3, Watches: 14, NotKnown: 5, Exchanges: 2, Problems: 1}}
	var pretty, js bytes.Buffer
	p := NewPretty(&pretty, Options{})
	p.Emit(s)
	p.Close()
	want := "left out: 5 of the 14 watches because what the filters ask was not seen (the User-Agent, resource or namespace of a watch whose request came before the capture or the join, or named HPACK entries from before it); 1 problem about what was left out, not shown\n" +
		"summary: 10 packets · 2 TCP connections (3 left out by the filters) · 0 watches (14 left out by the filters) · 0 events · 0 chunks · 0 problems, 0 warnings\n"
	if pretty.String() != want {
		t.Errorf("pretty:\n%s\nwant\n%s", pretty.String(), want)
	}
	j := NewJSON(&js, Options{})
	j.Emit(s)
	j.Close()
	if !strings.Contains(js.String(), `"leftOut":{"connections":3,"watches":14,"notKnown":5,"exchanges":2,"problems":1}`) {
		t.Errorf("json: %s", js.String())
	}
}

// TestWatchNumberAfterRetries: kwatch stream announces each watch (WATCH n)
// before its request; retries that failed before sending theirs leave
// announcements of the same path behind. A request takes the newest
// announcement of its path, in the pretty output and in JSON, and the
// stale ones are dropped: past 64 of them the numbers still agree.
func TestWatchNumberAfterRetries(t *testing.T) {
	const path = "/api/v1/namespaces/demo/configmaps?allowWatchBookmarks=true&resourceVersion=5&watch=true"
	conn := &record.Conn{ID: 1, HTTP2: true}
	for _, retries := range []int{5, 100} {
		var pretty, js bytes.Buffer
		p, j := NewPretty(&pretty, Options{}), NewJSON(&js, Options{})
		for n := 1; n <= retries; n++ {
			ws := &record.WatchStart{Number: n, Path: path, ResourceVersion: "5"}
			p.Emit(ws)
			j.Emit(ws)
		}
		req := &record.Request{Conn: conn, Exchange: 1, Method: "GET", Target: path, Proto: "HTTP/2.0", Watch: true}
		p.Emit(req)
		j.Emit(req)
		p.Flush()
		j.Flush()
		if want := fmt.Sprintf("WATCH %d\n", retries); !strings.Contains(pretty.String(), "> GET "+path+" HTTP/2.0 · "+want) {
			t.Errorf("%d announcements: pretty\n%s\nwant the request with %q", retries, pretty.String(), want)
		}
		if want := fmt.Sprintf(`"watchNumber":%d`, retries); !strings.Contains(js.String(), want) {
			t.Errorf("%d announcements: json\n%s\nwant %s", retries, js.String(), want)
		}
	}
}
