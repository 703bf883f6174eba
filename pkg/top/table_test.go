package top

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/charmbracelet/x/ansi"

	"github.com/kwatch/kwatch/pkg/health"
	"github.com/kwatch/kwatch/pkg/record"
)

var t0 = time.Date(2026, 12, 4, 4, 46, 0, 0, time.UTC)

// chain is the sinks as kwatch places them for --top: health, then the
// table, then what the table stands in for (here nothing).
func chain(opt Options) (*Table, record.Sink) {
	tab := New(record.SinkFunc(func(record.Record) {}), opt)
	h := health.New(tab)
	tab.SetHealth(h)
	return tab, h
}

func conn(id int, h2 bool) *record.Conn {
	return &record.Conn{ID: id, HTTP2: h2, Client: netip.MustParseAddrPort("127.0.0.1:40000"), Server: netip.MustParseAddrPort("127.0.0.1:6443")}
}

func watch(c *record.Conn, ex int, target, ua string) []record.Record {
	return []record.Record{
		&record.Request{Conn: c, Exchange: ex, Time: t0, Method: "GET", Target: target, Watch: true, Header: map[string][]string{"User-Agent": {ua}}},
		&record.Response{Conn: c, Exchange: ex, Time: t0, StatusCode: 200, Watch: true, Request: &record.Request{Watch: true}},
	}
}

func event(c *record.Conn, ex, seq int, typ, rv string, at time.Time, frame int, size int64) *record.Event {
	return &record.Event{Conn: c, Exchange: ex, Seq: seq, Time: at, Type: typ, Kind: "ConfigMap", Namespace: "demo", Name: "a",
		ResourceVersion: rv, Frames: []record.Frame{{Stream: uint32(ex), Index: frame, Length: size}}}
}

// feed emits the records of a scene: an attached server's client
// (kube-controller-manager's connection: a process note, a watch of
// replicasets, one of configmaps in demo with 30 events and a
// resourceVersion that goes back, then the configmaps watch ended by a
// reset and re-listed after 410 Gone), kubectl watching secrets in another
// namespace, and a stream whose request was not seen.
func feed(s record.Sink) {
	kcm := conn(1, true)
	s.Emit(&record.ConnNote{Conn: kcm, Time: t0, Kind: "process", Processes: []record.ConnProcess{
		{Role: "client", PID: 812, Name: "kube-controller-manager"}, {Role: "server", PID: 7, Name: "kube-apiserver", Attached: true}}})
	ua := "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/"
	for _, r := range watch(kcm, 1, "/apis/apps/v1/replicasets?watch=true", ua+"replicaset-controller") {
		s.Emit(r)
	}
	for _, r := range watch(kcm, 3, "/api/v1/namespaces/demo/configmaps?labelSelector=app%3Dweb&watch=true", ua+"shared-informers") {
		s.Emit(r)
	}
	for i := range 30 {
		rv := 100 + i
		if i == 29 {
			rv = 90 // backwards: a finding
		}
		s.Emit(event(kcm, 3, i+1, "MODIFIED", itoa(rv), t0.Add(time.Duration(i)*100*time.Millisecond), i, 200))
	}
	s.Emit(event(kcm, 1, 1, "ADDED", "5", t0.Add(time.Second), 0, 300))
	s.Emit(&record.ConnNote{Conn: kcm, Time: t0.Add(3 * time.Second), Kind: "h2", Frame: "WINDOW_UPDATE", Stream: 3, Stall: time.Second})
	s.Emit(&record.Event{Conn: kcm, Exchange: 3, Seq: 31, Time: t0.Add(4 * time.Second), Type: "ERROR",
		Status: &metav1.Status{Code: 410, Reason: metav1.StatusReasonExpired}, Frames: []record.Frame{{Stream: 3, Index: 30, Length: 100}}})
	s.Emit(&record.End{Conn: kcm, Exchange: 3, Time: t0.Add(4 * time.Second), How: "end of stream", Clean: true, Watch: true})
	for _, r := range watch(kcm, 5, "/api/v1/namespaces/demo/configmaps?labelSelector=app%3Dweb&sendInitialEvents=true&watch=true", ua+"shared-informers") {
		s.Emit(r)
	}
	s.Emit(&record.Restart{Time: t0.Add(5 * time.Second), Conn: kcm, Exchange: 5, Prev: kcm, PrevExchange: 3, Why: record.WhyRelist,
		Relist: record.RelistWatchList, After: record.AfterGone})
	s.Emit(event(kcm, 5, 1, "ADDED", "130", t0.Add(5*time.Second), 0, 200))

	k := conn(2, false)
	for _, r := range watch(k, 1, "/api/v1/namespaces/alpha/secrets?watch=true", "kubectl/v1.37.2 (linux/amd64) kubernetes/abc1234") {
		s.Emit(r)
	}
	// A stream of a connection joined mid-way: its request not seen.
	j := conn(3, true)
	s.Emit(&record.Response{Conn: j, Exchange: 9, Time: t0, StatusCode: 200, Watch: true, Inferred: true})
	s.Emit(&record.ConnNote{Conn: j, Time: t0, Kind: "h2-joined", Stream: 9, Resource: &record.Resource{APIVersion: "v1", Kind: "Pod", Namespace: "kube-system"}})
	s.Emit(&record.Event{Conn: j, Exchange: 9, Seq: 1, Time: t0, Type: "MODIFIED", Kind: "Pod", Namespace: "kube-system", Name: "p", ResourceVersion: "7", Length: 50})
}

func itoa(n int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + fmtInt(n)) }

func fmtInt(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// TestRows: each watch is a row with its client, resource, namespace,
// selectors, events, bytes, restarts and re-lists, stalls and health; a
// watch that followed another (a re-list after 410 Gone) is that one's row.
func TestRows(t *testing.T) {
	tab, s := chain(Options{})
	feed(s)
	rows := tab.Snapshot().Rows
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %v", len(rows), rows)
	}
	want := []Row{
		{ID: 1, Watch: "#1 s1", Client: "kube-controller-manager/v1.37.2 … replicaset-controller (pid 812)", Resource: "replicasets.apps",
			Events: 1, Bytes: 300, Last: t0.Add(time.Second), Health: "ok"},
		{ID: 2, Watch: "#1 s5", Client: "kube-controller-manager/v1.37.2 … shared-informers (pid 812)", Resource: "configmaps", Namespace: "demo",
			Selectors: "-l app=web", Events: 32, Bytes: 30*200 + 100 + 200, Last: t0.Add(5 * time.Second), Restarts: 1, Relists: 1,
			FlowStalls: 1, Health: "1 finding", Bad: true},
		{ID: 4, Watch: "#2", Client: "kubectl/v1.37.2", Resource: "secrets", Namespace: "alpha", Health: "ok"},
		{ID: 5, Watch: "#3 s9", Resource: "Pod", Namespace: NamespaceNotSeen, Events: 1, Bytes: 50, Last: t0, Health: "ok"},
	}
	for i, w := range want {
		if rows[i] != w {
			t.Errorf("row %d:\n%+v, want\n%+v", i, rows[i], w)
		}
	}
}

// TestHealthColumn: the health column says what is wrong: findings, 410
// Gone, how the server cut the watch; "ended" for one that ended well.
func TestHealthColumn(t *testing.T) {
	tab, s := chain(Options{})
	c := conn(1, false)
	for _, r := range watch(c, 1, "/api/v1/configmaps?watch=true", "curl/8.14.1") {
		s.Emit(r)
	}
	s.Emit(&record.Event{Conn: c, Exchange: 1, Seq: 1, Time: t0, Type: "ERROR", Status: &metav1.Status{Code: 410}})
	s.Emit(&record.End{Conn: c, Exchange: 1, Time: t0, How: "closed without the last chunk", Watch: true, Cut: &record.Cut{By: record.CutReset}})
	for _, r := range watch(c, 2, "/api/v1/pods?watch=true", "curl/8.14.1") {
		s.Emit(r)
	}
	s.Emit(&record.End{Conn: c, Exchange: 2, Time: t0, How: "last-chunk", Clean: true, Watch: true})
	rows := tab.Snapshot().Rows
	if got, want := rows[0].Health, "410 Gone, ended by the server resetting the connection (TCP RST)"; got != want || !rows[0].Bad {
		t.Errorf("health %q (bad %v), want %q", got, rows[0].Bad, want)
	}
	if got := rows[1].Health; got != "ended" || rows[1].Bad || !rows[1].Ended {
		t.Errorf("health %q, want ended", got)
	}
}

// TestSortAndRender: the model sorts by the key pressed, reverses on R,
// and draws the rows with the sorted column marked; rates come from the
// counts of refreshes RateWindow apart.
func TestSortAndRender(t *testing.T) {
	tab, s := chain(Options{})
	now := t0.Add(10 * time.Second)
	m := newModel(tab.Snapshot, func() time.Time { return now }, false)
	m.refresh() // before any record
	feed(s)
	now = now.Add(2 * time.Second)
	m.refresh()
	order := func() string {
		var w []string
		for _, r := range m.rows {
			w = append(w, r.Watch)
		}
		return strings.Join(w, ",")
	}
	// By events/s: 34 events in 2 s on the configmaps watch (32) and
	// the others' single events.
	if got, want := order(), "#1 s5,#1 s1,#3 s9,#2"; got != want {
		t.Errorf("by events/s: %s, want %s", got, want)
	}
	if r := m.rows[0]; r.rate != 16 || r.byteRate != 3150 {
		t.Errorf("rates %v events/s, %v bytes/s; want 16 and 3150", r.rate, r.byteRate)
	}
	for _, tc := range []struct{ key, want string }{
		{"n", "#1 s1,#2,#1 s5,#3 s9"},
		{"R", "#3 s9,#1 s5,#2,#1 s1"},
		{"c", "#3 s9,#1 s1,#1 s5,#2"},
		{"l", "#2,#3 s9,#1 s1,#1 s5"},
		{"t", "#1 s5,#1 s1,#2,#3 s9"},
		{"h", "#1 s5,#1 s1,#2,#3 s9"},
		{"r", "#3 s9,#1 s5,#1 s1,#2"},
		{"w", "#1 s1,#1 s5,#2,#3 s9"},
	} {
		if m.key(tc.key) {
			t.Fatalf("key %q quits", tc.key)
		}
		if got := order(); got != tc.want {
			t.Errorf("after %q: %s, want %s", tc.key, got, tc.want)
		}
	}
	if !m.key("q") || !m.key("ctrl+c") {
		t.Error("q or Ctrl-C does not quit")
	}
	m.key("e")
	m.width, m.height = 200, 40
	screen := m.render(true)
	for _, want := range []string{
		"kwatch top · 4 watches · 17 events/s · sorted by events · 04:46:12",
		"EVENTS▼",
		"#1 s5   kube-controller-manager/v1.37.2 … shared-informers (pid 812)",
		"configmaps        demo        -l app=web",
		"sort: s ev/s · e events · b bytes/s · l last · t restarts · x stalls · h health · c client · r resource · n namespace · w watch · R reverse · ↑↓ scroll · q quit",
	} {
		if !strings.Contains(screen, want) {
			t.Errorf("the screen has no %q:\n%s", want, screen)
		}
	}
	// The configmaps row: 32 events, 16/s, 3150 bytes/s, its last event
	// 7 s before, 1 restart and 1 re-list, 1 flow-control stall, 1
	// finding.
	line := lineWith(screen, "#1 s5 ")
	if f := strings.Fields(line); len(f) < 19 || strings.Join(f[len(f)-10:], " ") != "32 16 3.1Ki 7s 1 1 1 fc 1 finding" {
		t.Errorf("configmaps row: %q", line)
	}
	if strings.Contains(screen, "\x1b") {
		t.Errorf("escapes with color off:\n%q", screen)
	}
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestScroll: on a terminal lower than the rows, the rows shown move with
// the keys, and say which they are.
func TestScroll(t *testing.T) {
	tab, s := chain(Options{})
	for i := range 30 {
		c := conn(i+1, false)
		for _, r := range watch(c, 1, "/api/v1/namespaces/ns/configmaps?watch=true", "curl/8.14.1") {
			s.Emit(r)
		}
	}
	m := newModel(tab.Snapshot, func() time.Time { return t0 }, false)
	m.refresh()
	m.width, m.height = 120, 15 // 10 rows
	m.key("w")
	if got := m.render(true); !strings.Contains(got, "rows 1-10 of 30") || !strings.Contains(got, "#10 ") || strings.Contains(got, "#11 ") {
		t.Errorf("first page:\n%s", got)
	}
	m.key("pgdown")
	m.key("down")
	if got := m.render(true); !strings.Contains(got, "rows 12-21 of 30") {
		t.Errorf("after pgdown and down:\n%s", got)
	}
	m.key("end")
	if got := m.render(true); !strings.Contains(got, "rows 21-30 of 30") {
		t.Errorf("at the end:\n%s", got)
	}
}

// TestMaxRows: past MaxRows an ended watch's row makes room; with none
// ended, the watch is counted as not shown.
func TestMaxRows(t *testing.T) {
	tab, s := chain(Options{MaxRows: 2})
	c := conn(1, false)
	for ex := 1; ex <= 2; ex++ {
		for _, r := range watch(c, ex, "/api/v1/configmaps?watch=true", "curl/8.14.1") {
			s.Emit(r)
		}
	}
	s.Emit(&record.End{Conn: c, Exchange: 1, Time: t0, How: "last-chunk", Clean: true, Watch: true})
	for ex := 3; ex <= 4; ex++ {
		for _, r := range watch(c, ex, "/api/v1/configmaps?watch=true", "curl/8.14.1") {
			s.Emit(r)
		}
	}
	snap := tab.Snapshot()
	if len(snap.Rows) != 2 || snap.Rows[0].Watch != "#1" || snap.NotShown != 1 {
		t.Errorf("rows %v, %d not shown", snap.Rows, snap.NotShown)
	}
}

// TestPlain: on a pipe the table is written every interval with its time,
// with no escape sequence, and once more at the end.
func TestPlain(t *testing.T) {
	tab, s := chain(Options{})
	feed(s)
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tab.Show(ctx, ScreenOptions{Out: &out, Color: true, Now: func() time.Time { return t0.Add(time.Minute) }}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.HasPrefix(got, "2026-12-04T04:47:00Z 4 watches · 0 events/s · sorted by ev/s\nWATCH  ") || strings.Contains(got, "\x1b") ||
		!strings.Contains(got, "kubectl/v1.37.2") || strings.Contains(got, "sort:") || !strings.HasSuffix(got, "\n\n") {
		t.Errorf("plain table:\n%q", got)
	}
}

// TestGate: what is written while the table is shown is dropped, the
// run's end is held, and Release writes it and lets the rest through; the
// table holds from the first health record, flushing what came before.
func TestGate(t *testing.T) {
	var out bytes.Buffer
	g := NewGate(&out)
	g.Write([]byte("event line\n"))
	g.Hold()
	g.Write([]byte("health line\n"))
	if out.Len() != 0 {
		t.Fatalf("written while the table is shown: %q", out.String())
	}
	if err := g.Release(); err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("summary\n"))
	if got := out.String(); got != "health line\nsummary\n" {
		t.Errorf("got %q", got)
	}

	var order []string
	tab := New(flushSink{&order}, Options{OnEnd: func() { order = append(order, "hold") }})
	tab.Emit(&record.Request{Conn: conn(1, false), Exchange: 1, Watch: true, Target: "/api/v1/pods?watch=1"})
	tab.Emit(&record.Health{Scope: "all"})
	tab.Emit(&record.Summary{})
	if got := strings.Join(order, ","); got != "request,flush,hold,health,summary" {
		t.Errorf("order %s", got)
	}
}

// TestProblemsHeld: the problems that come while the table stands in for
// the lines are passed on at the run's end (after OnEnd), the first
// MaxProblems of them, each once; those past them as they come.
func TestProblemsHeld(t *testing.T) {
	var got []string
	tab := New(record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Problem:
			got = append(got, v.Kind)
		case *record.Summary:
			got = append(got, "summary")
		}
	}), Options{OnEnd: func() { got = append(got, "hold") }})
	for i := range MaxProblems + 3 {
		tab.Emit(&record.Problem{Conn: conn(1, false), Kind: "p" + itoa(i), Offset: -1})
	}
	tab.Emit(&record.Summary{})
	want := []string{"p200", "p201", "p202", "hold"}
	for i := range MaxProblems {
		want = append(want, "p"+itoa(i))
	}
	want = append(want, "summary")
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("passed on:\n%v\nwant\n%v", got, want)
	}
	if n := tab.ProblemsNotKept(); n != 3 {
		t.Errorf("ProblemsNotKept = %d, want 3", n)
	}
}

type flushSink struct{ order *[]string }

func (f flushSink) Emit(r record.Record) {
	switch r.(type) {
	case *record.Request:
		*f.order = append(*f.order, "request")
	case *record.Health:
		*f.order = append(*f.order, "health")
	case *record.Summary:
		*f.order = append(*f.order, "summary")
	}
}

func (f flushSink) Flush() { *f.order = append(*f.order, "flush") }

// TestEscaped: bytes from the wire reach the screen escaped.
func TestEscaped(t *testing.T) {
	tab, s := chain(Options{})
	for _, r := range watch(conn(1, false), 1, "/api/v1/namespaces/x%1b%5b2J/configmaps?watch=true", "evil/1\x1b]0;pwned\x07") {
		s.Emit(r)
	}
	m := newModel(tab.Snapshot, func() time.Time { return t0 }, true)
	m.refresh()
	m.width, m.height = 200, 20
	screen := m.render(true)
	if strings.Contains(ansiStripSGR(screen), "\x1b]") || strings.Contains(screen, "\x1b[2J") || !strings.Contains(screen, `evil/1\x1b]0;pwned\x07`) {
		t.Errorf("screen %q", screen)
	}
}

// ansiStripSGR drops the screen's own color sequences (ESC [ … m).
func ansiStripSGR(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == ';' || s[j] == ':') {
				j++
			}
			if j < len(s) && s[j] == 'm' {
				i = j
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// TestConcurrent: records come on one goroutine while the screen takes
// the rows and notices come on others (go test -race).
func TestConcurrent(t *testing.T) {
	tab, s := chain(Options{})
	m := newModel(tab.Snapshot, time.Now, true)
	m.width, m.height = 120, 30
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			feed(s)
		}
	}()
	go func() {
		for range 100 {
			tab.Notice("a notice")
		}
	}()
	for {
		m.refresh()
		_ = m.render(true)
		select {
		case <-done:
			if n := len(tab.Snapshot().Rows); n != 4 {
				t.Errorf("%d rows", n)
			}
			return
		default:
		}
	}
}

// narrowModel is the model of feed's scene, two seconds after it, on a
// terminal width cells wide.
func narrowModel(width int) *model {
	tab, s := chain(Options{})
	now := t0.Add(10 * time.Second)
	m := newModel(tab.Snapshot, func() time.Time { return now }, false)
	m.refresh()
	feed(s)
	now = now.Add(2 * time.Second)
	m.refresh()
	m.width, m.height = width, 20
	return m
}

// TestNarrow: on a terminal of 80 cells, the columns that fit are kept by
// priority, the sorted column always; the names are cut with "…", the
// lines are at most 80 cells wide, and the footer says what is hidden.
func TestNarrow(t *testing.T) {
	m := narrowModel(80)
	screen := trimLines(m.render(true))
	lines := strings.Split(screen, "\n")
	for _, l := range lines {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("%d cells wide: %q", w, l)
		}
	}
	if got, want := lines[1], "WATCH   CLIENT                 RESOURCE        NAMESPACE    EVENTS  EV/S▼    B/S"; got != want {
		t.Errorf("header\n%q, want\n%q", got, want)
	}
	if got, want := lineWith(screen, "#1 s5"), "#1 s5   kube-controller-mana…  configmaps      demo             32     16  3.1Ki"; got != want {
		t.Errorf("row\n%q, want\n%q", got, want)
	}
	if got, want := lineWith(screen, "#3 s9"), "#3 s9                          Pod             (not seen)        1    0.5     25"; got != want {
		t.Errorf("row\n%q, want\n%q", got, want)
	}
	if !strings.Contains(screen, "\nhidden (too narrow): SELECTORS LAST RESTARTS RELISTS STALLS HEALTH\n") {
		t.Errorf("no line of the hidden columns:\n%s", screen)
	}
	// Sorted by health, HEALTH is shown, in its place; a column of
	// less priority makes room.
	m.key("h")
	screen = trimLines(m.render(true))
	if got, want := strings.Split(screen, "\n")[1], "WATCH   CLIENT               RESOURCE        NAMESPACE    EV/S    B/S  HEALTH▼"; got != want {
		t.Errorf("sorted by health, header\n%q, want\n%q", got, want)
	}
	if !strings.Contains(screen, "\nhidden (too narrow): SELECTORS EVENTS LAST RESTARTS RELISTS STALLS\n") {
		t.Errorf("sorted by health, no line of the hidden columns:\n%s", screen)
	}
}

// TestWide: on a terminal of 200 cells every column is shown whole, and
// nothing is said hidden.
func TestWide(t *testing.T) {
	m := narrowModel(200)
	screen := trimLines(m.render(true))
	if got, want := strings.Split(screen, "\n")[1],
		"WATCH   CLIENT                                                             RESOURCE          NAMESPACE   SELECTORS    EVENTS  EV/S▼    B/S   LAST   RESTARTS  RELISTS   STALLS  HEALTH"; got != want {
		t.Errorf("header\n%q, want\n%q", got, want)
	}
	if got, want := lineWith(screen, "#1 s1"),
		"#1 s1   kube-controller-manager/v1.37.2 … replicaset-controller (pid 812)  replicasets.apps                                1    0.5    150    11s          0        0        0  ok"; got != want {
		t.Errorf("row\n%q, want\n%q", got, want)
	}
	if strings.Contains(screen, "hidden") || strings.Contains(screen, "…\n") {
		t.Errorf("something hidden or cut:\n%s", screen)
	}
}

// TestStableWidths: the columns keep their widths from one refresh to the
// next when the widest text in them goes (rates falling to 0, a long
// client's row gone), on a terminal and on a pipe.
func TestStableWidths(t *testing.T) {
	for _, width := range []int{0, 80, 200} {
		m := narrowModel(width)
		terminal := width > 0
		before := strings.Split(trimLines(m.render(terminal)), "\n")[1]
		m.now = func() time.Time { return t0.Add(time.Hour) } // rates 0, ages in hours
		m.refresh()
		m.rows = m.rows[len(m.rows)-1:] // kubectl's row only
		after := strings.Split(trimLines(m.render(terminal)), "\n")[1]
		if before != after {
			t.Errorf("width %d: header\n%q, then\n%q", width, before, after)
		}
	}
}

// TestNotSeen: a watch whose request was not seen is named by what its
// events' objects tell (its first bookmark's kind until another event
// comes), never further: kubectl get -w's Table rows, whose objects are
// PartialObjectMetadata, and a metadata informer's objects name no
// resource; the namespace watched is not known unless the objects have
// none (cluster-scoped).
func TestNotSeen(t *testing.T) {
	tab, s := chain(Options{})
	c := conn(1, true)
	ev := func(ex, seq int, typ, apiVersion, kind, rowKind, ns string) *record.Event {
		return &record.Event{Conn: c, Exchange: ex, Seq: seq, Time: t0, Type: typ, APIVersion: apiVersion, Kind: kind, RowKind: rowKind,
			Namespace: ns, Name: "x", ResourceVersion: "7", Length: 10}
	}
	for ex := 1; ex <= 7; ex += 2 {
		s.Emit(&record.Response{Conn: c, Exchange: ex, Time: t0, StatusCode: 200, Watch: true, Inferred: true})
	}
	s.Emit(ev(1, 1, "MODIFIED", "meta.k8s.io/v1", "Table", "PartialObjectMetadata", "demo"))
	s.Emit(ev(3, 1, "ADDED", "meta.k8s.io/v1", "PartialObjectMetadata", "", ""))
	s.Emit(ev(5, 1, "BOOKMARK", "apps/v1", "Deployment", "", ""))
	s.Emit(ev(7, 1, "BOOKMARK", "v1", "Namespace", "", ""))
	s.Emit(ev(7, 2, "ADDED", "v1", "Namespace", "", ""))
	var got []string
	for _, r := range tab.Snapshot().Rows {
		got = append(got, r.Watch+" | "+r.Resource+" | "+r.Namespace)
	}
	want := []string{
		"#1 s1 | Table rows (resource not seen) | (not seen)",
		"#1 s3 | object metadata (resource not seen) | ",
		"#1 s5 | Deployment | (not seen)",
		"#1 s7 | Namespace | ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
