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
