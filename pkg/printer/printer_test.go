package printer

import (
	"bytes"
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
