package report_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/diff"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/health"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/report"
	"github.com/kwatch/kwatch/pkg/rewatch"
	"github.com/kwatch/kwatch/pkg/wire"
)

// capture decodes a capture from testdata (real watches recorded on the
// project's stack) into a report and the JSON Lines of the same records.
func capture(t *testing.T, name string, withDiff bool) (page string, lines []map[string]any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "captures", name))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p := printer.NewJSON(&out, printer.Options{})
	rep := report.New(p, report.Options{Title: "kwatch pcap " + name})
	var sink record.Sink = health.New(rep)
	if withDiff {
		sink = diff.New(sink, diff.Options{PerWatch: true})
	}
	sink = rewatch.New(sink)
	// TLS captures carry their keys in the pcapng file.
	opt := pcap.Options{Name: name, Keys: keylog.New(), HTTP: wire.Options{Limits: exchange.Limits{Budget: event.NewBudget(0)}}}
	if _, err := pcap.Read(context.Background(), bytes.NewReader(data), opt, sink); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	page = filepath.Join(t.TempDir(), strings.TrimSuffix(name, filepath.Ext(name))+".html")
	if err := rep.WriteFile(page); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("JSON line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return page, lines
}

// TestBrowserCaptures opens the reports of real captures (HTTP/1.1 chunks
// through kubectl proxy, HTTP/2 with a RST_STREAM and a GOAWAY, TLS 1.3
// with the keys in the pcapng file) in chromium and checks the page
// against the JSON Lines of the same records: a lane per watch, a mark per
// event; choosing a mark shows the framing bytes of the chunk or DATA
// frame that carried it; zooming changes the visible range; no script
// error.
func TestBrowserCaptures(t *testing.T) {
	ctx, errs := testutil.Browser(t)
	for _, name := range []string{"watch-lo.pcap", "h2c-reset-lo.pcap", "tls13-h2-keys-lo.pcapng", "bookmarks-lo.pcap", "h2c-gzip-lo.pcap"} {
		t.Run(name, func(t *testing.T) {
			page, lines := capture(t, name, false)
			watches := map[string]bool{}
			var events []map[string]any
			for _, l := range lines {
				key := fmt.Sprintf("%v|%v", l["connection"], l["exchange"])
				switch l["record"] {
				case "event":
					events = append(events, l)
					watches[key] = true
				case "request":
					if l["watch"] == true {
						watches[key] = true
					}
				}
			}
			if len(events) == 0 {
				t.Fatal("the capture has no events")
			}
			testutil.Do(t, ctx, chromedp.Navigate("file://"+page), chromedp.WaitVisible(chromedp.CSS("#timeline")))
			nLanes := testutil.Get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline g.lane").length`))
			nMarks := testutil.Get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline rect.mark").length`))
			title := testutil.Get(t, ctx, chromedp.Title())
			if nLanes != len(watches) || nMarks != len(events) {
				t.Errorf("page draws %d lanes and %d marks; the JSON Lines have %d watches and %d events", nLanes, nMarks, len(watches), len(events))
			}
			if title != "kwatch pcap "+name {
				t.Errorf("title %q", title)
			}

			// Every event's bytes add up in each of its carriers.
			if bad := testutil.Get(t, ctx, chromedp.Evaluate[[]string](`kwatchReport.data.events.filter(ev => !ev.gz && !ev.cs.every(c => c.b >= 0 && c.a >= 0 && c.b + c.e + c.a === c.n)).map(ev => ev.ts)`)); len(bad) > 0 {
				t.Errorf("events whose carriers do not add up: %v", bad)
			}

			// Hover the first mark: the tooltip is the event's line.
			at := testutil.Get(t, ctx, chromedp.Evaluate[[]float64](`(() => { const r = document.querySelector('#timeline rect.mark[data-ev="0"]').getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`))
			testutil.Do(t, ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at[0], at[1]))
			tip := testutil.Get(t, ctx, chromedp.Evaluate[string](`document.getElementById("tooltip").hidden ? "" : document.getElementById("tooltip").textContent`))
			if !strings.Contains(tip, events[0]["type"].(string)) || !strings.Contains(tip, "rv "+fmt.Sprint(events[0]["resourceVersion"])) {
				t.Errorf("hovering the first mark shows %q", tip)
			}
			testutil.Do(t, ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 5, 5))

			// Choose the first event: its carrier's framing bytes.
			first := events[0]
			var want string
			if cs, _ := first["chunks"].([]any); len(cs) > 0 {
				c := cs[0].(map[string]any)
				want = spacedHex(c["sizeLine"].(string) + "\r\n")
			} else {
				f := first["frames"].([]any)[0].(map[string]any)
				n := int(f["length"].(float64))
				flags := 0
				if f["endStream"] == true {
					flags |= 1
				}
				if f["padded"] == true {
					flags |= 8
				}
				s := int(f["stream"].(float64))
				want = spacedHex(string([]byte{byte(n >> 16), byte(n >> 8), byte(n), 0, byte(flags), byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)}))
			}
			testutil.Do(t, ctx, chromedp.Click(chromedp.CSS(`#timeline rect.mark[data-ev="0"]`)), chromedp.WaitVisible(chromedp.CSS("#event-view")))
			strip := testutil.Get(t, ctx, chromedp.Text(chromedp.CSS("#strip")))
			line := testutil.Get(t, ctx, chromedp.Text(chromedp.CSS("#event-line")))
			if !strings.Contains(strip, want) {
				t.Errorf("the first event's bytes %q lack its carrier's framing %q", strip, want)
			}
			if !strings.Contains(line, first["type"].(string)) || !strings.Contains(line, fmt.Sprint(first["resourceVersion"])) {
				t.Errorf("event line %q is not the first event's (%v rv %v)", line, first["type"], first["resourceVersion"])
			}

			// Shift+drag across the middle of the timeline: the events
			// table lists the events of that time range, as the JSON
			// Lines date them.
			box := testutil.Get(t, ctx, chromedp.Evaluate[[]float64](`(() => { const r = document.getElementById("timeline").getBoundingClientRect(); return [r.left, r.top, r.width]; })()`))
			plotX := func(f float64) float64 { return box[0] + 260 + f*(box[2]-270) }
			y := box[1] + 30
			shift := chromedp.ButtonModifiers(chromedp.ModifierShift)
			testutil.Do(t, ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, plotX(0.2), y),
				chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, plotX(0.2), y, chromedp.ButtonLeft, shift),
				chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, plotX(0.6), y, chromedp.ButtonLeft, shift),
				chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, plotX(0.6), y, chromedp.ButtonLeft, shift))
			brush := testutil.Get(t, ctx, chromedp.Evaluate[[]float64](`kwatchReport.brushed()`))
			t0, _ := time.Parse(time.RFC3339Nano, testutil.Get(t, ctx, chromedp.Evaluate[string](`kwatchReport.data.t0`)))
			inRange := 0
			for _, e := range events {
				at, _ := time.Parse(time.RFC3339Nano, e["time"].(string))
				ms := float64(at.Sub(t0).Microseconds()) / 1000
				if ms >= brush[0] && ms <= brush[1] {
					inRange++
				}
			}
			rows := testutil.Get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#events tr[data-ev]").length`))
			t.Logf("time range %v ms: %d of %d events", brush, inRange, len(events))
			if len(brush) != 2 || brush[1] <= brush[0] || rows != inRange {
				t.Errorf("time range %v: the events table lists %d events; the JSON Lines have %d in it", brush, rows, inRange)
			}
			testutil.Do(t, ctx, chromedp.Click(chromedp.CSS("#brush-clear")))
			if rows := testutil.Get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#events tr[data-ev]").length`)); rows != len(events) {
				t.Errorf("after clearing the time range the table lists %d events, want %d", rows, len(events))
			}

			// Zoom in: the visible range halves around its middle.
			before := testutil.Get(t, ctx, chromedp.Evaluate[[]float64](`kwatchReport.visible()`))
			testutil.Do(t, ctx, chromedp.Click(chromedp.CSS("#zoom-in")))
			after := testutil.Get(t, ctx, chromedp.Evaluate[[]float64](`kwatchReport.visible()`))
			if got, want := after[1]-after[0], (before[1]-before[0])/2; got < want*0.999 || got > want*1.001 {
				t.Errorf("zoom in: visible %v -> %v", before, after)
			}
			rangeText := testutil.Get(t, ctx, chromedp.Text(chromedp.CSS("#range")))
			if !strings.HasPrefix(rangeText, "visible: ") {
				t.Errorf("range %q", rangeText)
			}
			if e := errs(); len(e) > 0 {
				t.Errorf("script errors: %s", strings.Join(e, "\n"))
			}
		})
	}
}

func spacedHex(s string) string {
	h := hex.EncodeToString([]byte(s))
	var parts []string
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, " ")
}

// TestBrowserDiff: a --diff report shows what a MODIFIED event changed,
// as the terminal does.
func TestBrowserDiff(t *testing.T) {
	ctx, errs := testutil.Browser(t)
	page, lines := capture(t, "watch-lo.pcap", true)
	ev := -1
	n := 0
	for _, l := range lines {
		if l["record"] != "event" {
			continue
		}
		if l["type"] == "MODIFIED" && l["diff"] != nil && ev < 0 {
			ev = n
		}
		n++
	}
	if ev < 0 {
		t.Fatal("no MODIFIED event with a diff")
	}
	testutil.Do(t, ctx, chromedp.Navigate("file://"+page), chromedp.WaitVisible(chromedp.CSS("#timeline")),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#timeline rect.mark[data-ev="%d"]`, ev))),
		chromedp.WaitVisible(chromedp.CSS("#event-diff-wrap")))
	changes := testutil.Get(t, ctx, chromedp.Text(chromedp.CSS("#event-diff")))
	if want := `~ data.step: "0" → "1"`; !strings.Contains(changes, want) {
		t.Errorf("changes %q lack %q", changes, want)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("script errors: %s", strings.Join(e, "\n"))
	}
}

// TestBrowserHostileAndDense: a page made from hostile text (markup in the
// path, User-Agent and object) runs none of it and shows it as text; a
// watch with more events than the page draws one by one is drawn as
// density and the page says so.
func TestBrowserHostileAndDense(t *testing.T) {
	ctx, errs := testutil.Browser(t)
	bad := `<img src=x onerror="window.pwned=1"></script><script>window.pwned=1</script>`
	rep := report.New(nil, report.Options{Title: bad, MaxLaneMarks: 100})
	c := &record.Conn{ID: 1}
	t0 := time.Date(2026, 12, 1, 3, 12, 0, 0, time.UTC)
	rep.Emit(&record.Request{Conn: c, Exchange: 1, Time: t0, Target: "/api/v1/configmaps?watch=1&x=" + bad, Watch: true,
		Header: map[string][]string{"User-Agent": {bad}}})
	for i := range 5000 {
		obj, _ := json.Marshal(map[string]any{"kind": "ConfigMap", "metadata": map[string]string{"name": bad}, "data": map[string]string{"k": "txt.\u202eexe"}})
		rep.Emit(&record.Event{Conn: c, Exchange: 1, Seq: i + 1, Time: t0.Add(time.Duration(i) * 10 * time.Millisecond),
			Type: "MODIFIED", Kind: "ConfigMap", Name: bad, ResourceVersion: fmt.Sprint(i), Object: obj, Length: 10})
	}
	page := filepath.Join(t.TempDir(), "hostile.html")
	if err := rep.WriteFile(page); err != nil {
		t.Fatal(err)
	}
	testutil.Do(t, ctx, chromedp.Navigate("file://"+page), chromedp.WaitVisible(chromedp.CSS("#timeline")),
		chromedp.Click(chromedp.CSS(`#timeline rect.mark[data-ev="0"]`)), chromedp.WaitVisible(chromedp.CSS("#event-view")))
	pwned := testutil.Get(t, ctx, chromedp.Evaluate[bool](`window.pwned !== undefined || document.querySelector("img") !== null`))
	title := testutil.Get(t, ctx, chromedp.Title())
	density := testutil.Get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline path.density").length`))
	caveats := testutil.Get(t, ctx, chromedp.Text(chromedp.CSS("#caveats")))
	line := testutil.Get(t, ctx, chromedp.Text(chromedp.CSS("#event-line")))
	if pwned || title != bad || !strings.Contains(line, bad) {
		t.Errorf("hostile text: ran %v, title %q, event line %q", pwned, title, line)
	}
	// A bidirectional control in a value is shown escaped, as in the
	// terminal, not obeyed.
	object := testutil.Get(t, ctx, chromedp.Evaluate[string](`document.getElementById("event-object").textContent`))
	if !strings.Contains(object, `"k": "txt.\u202eexe"`) || strings.ContainsRune(object, '\u202e') {
		t.Errorf("event object shown as %q", object)
	}
	if density == 0 || !strings.Contains(caveats, "drawn as density") {
		t.Errorf("%d density bars; caveats %q", density, caveats)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("script errors: %s", strings.Join(e, "\n"))
	}
}
