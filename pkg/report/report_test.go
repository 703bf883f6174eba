package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

var t0 = time.Date(2026, 12, 1, 3, 12, 0, 0, time.UTC)

func watchReq(c *record.Conn, ex int, target, ua string, at time.Time) *record.Request {
	return &record.Request{Conn: c, Exchange: ex, Time: at, Method: "GET", Target: target, Watch: true,
		Header: map[string][]string{"User-Agent": {ua}}}
}

func ev(c *record.Conn, ex, seq int, typ, rv string, at time.Time, off, n int64, chunks ...record.Chunk) *record.Event {
	return &record.Event{Conn: c, Exchange: ex, Seq: seq, Time: at, Type: typ, Kind: "ConfigMap", Namespace: "default",
		Name: "a", ResourceVersion: rv, Object: json.RawMessage(`{"kind":"ConfigMap"}`), Offset: off, Length: n, Chunks: chunks, Format: "json"}
}

func pageOf(t *testing.T, r *Report) *page {
	t.Helper()
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	i := strings.Index(s, `<script type="application/json" id="data">`)
	j := strings.Index(s[i:], "</script>")
	var p page
	if err := json.Unmarshal([]byte(s[i+len(`<script type="application/json" id="data">`):i+j]), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestSharedChunks: events that share a chunk, and one event across three
// chunks, are placed in their chunks' data byte by byte.
func TestSharedChunks(t *testing.T) {
	c := &record.Conn{ID: 1, Client: netip.MustParseAddrPort("10.0.0.1:40000"), Server: netip.MustParseAddrPort("10.0.0.2:6443")}
	r := New(nil, Options{})
	r.Emit(watchReq(c, 1, "/api/v1/namespaces/default/configmaps?watch=1&labelSelector=a%3Db", "kubectl/v1.37.2", t0))
	// chunk 0: 300 bytes holding events of 100, 100 and 99 bytes, each
	// followed by its newline.
	for i := range 3 {
		n := int64(100)
		if i == 2 {
			n = 99
		}
		r.Emit(ev(c, 1, i+1, "ADDED", fmt.Sprint(10+i), t0.Add(time.Second), int64(101*i), n,
			record.Chunk{Index: 0, Size: 300, SizeLine: "12c", Header: []byte("12c\r\n"), Offset: 0, Events: 3, Bytes: n, Ordinal: i + 1, DataAt: 0}))
	}
	// an event of 70000 bytes over chunks 1 to 3 (32768 each), the last
	// chunk holding another event after it.
	r.Emit(ev(c, 1, 4, "MODIFIED", "13", t0.Add(2*time.Second), 300, 70000,
		record.Chunk{Index: 1, Size: 32768, SizeLine: "8000", Header: []byte("8000\r\n"), Events: 1, Bytes: 32768, DataAt: 300},
		record.Chunk{Index: 2, Size: 32768, SizeLine: "8000", Header: []byte("8000\r\n"), Events: 1, Bytes: 32768, DataAt: 300 + 32768},
		record.Chunk{Index: 3, Size: 32768, SizeLine: "8000", Header: []byte("8000\r\n"), Events: 2, Bytes: 70000 - 2*32768, DataAt: 300 + 2*32768}))
	p := pageOf(t, r)
	if len(p.Events) != 4 {
		t.Fatalf("%d events", len(p.Events))
	}
	for i, want := range [][3]int64{{0, 100, 200}, {101, 100, 99}, {202, 99, 0}} {
		cs := p.Events[i].Carrs[0]
		if cs.Before != want[0] || cs.Bytes != want[1] || cs.After != want[2] || cs.Head != "31 32 63 0d 0a" || cs.Tail != "0d 0a" {
			t.Errorf("event %d in chunk 0: %+v, want before/this/after %v", i+1, cs, want)
		}
	}
	cs := p.Events[3].Carrs
	if len(cs) != 3 || cs[0].Before != 0 || cs[1].Before != 0 || cs[2].Bytes != 70000-2*32768 || cs[2].After != 32768-(70000-2*32768) {
		t.Errorf("event across chunks: %+v", cs)
	}
	l := p.Lanes[0]
	if l.Selector != "labelSelector=a=b" || l.UA != "kubectl/v1.37.2" || l.Client != "10.0.0.1:40000" || l.Counts[0] != 3 || l.Counts[1] != 1 {
		t.Errorf("lane %+v", l)
	}
	if p.Events0 != 4 {
		t.Errorf("%d events counted", p.Events0)
	}
}

// TestBounds: a lane with more events than it draws one by one becomes
// density (bins that widen to stay few), keeps its ERROR and
// initial-events-end marks, and the page counts every event; past the
// detail budget marks stay without their bytes.
func TestBounds(t *testing.T) {
	c := &record.Conn{ID: 7}
	r := New(nil, Options{MaxLaneMarks: 100, MaxDetailBytes: 10 << 10})
	r.Emit(watchReq(c, 1, "/api/v1/pods?watch=1", "x", t0))
	const n = 20000
	for i := range n {
		e := ev(c, 1, i+1, "MODIFIED", fmt.Sprint(i), t0.Add(time.Duration(i)*37*time.Millisecond), 0, 10)
		if i == 15000 {
			e.Type, e.InitialEventsEnd = "BOOKMARK", true
		}
		r.Emit(e)
	}
	p := pageOf(t, r)
	l := p.Lanes[0]
	total := 0
	for _, b := range l.Bins {
		for _, v := range b[1:] {
			total += int(v)
		}
	}
	if !l.Dense || len(l.Marks) != 101 || p.Events0 != n || total != n || len(l.Bins) > maxBins {
		t.Errorf("dense %v, %d marks, %d events counted, %d in %d bins", l.Dense, len(l.Marks), p.Events0, total, len(l.Bins))
	}
	if last := l.Marks[100]; last[1] != tBookmark || int(last[2])&flagInitialEnd == 0 {
		t.Errorf("the initial-events-end bookmark is not kept: %v", last)
	}
	if p.Dropped.Marks != n-101 || p.Dropped.Details == 0 || len(p.Events) == 0 || len(p.Events) >= 101 {
		t.Errorf("dropped %+v with %d details kept", p.Dropped, len(p.Events))
	}
}

// TestHostileText: text from the wire (object, path, User-Agent) cannot end
// the page's data script or add markup.
func TestHostileText(t *testing.T) {
	c := &record.Conn{ID: 1}
	r := New(nil, Options{Title: "kwatch pcap </title><script>x()</script>"})
	bad := `</script><script>window.pwned=1</script><!--`
	r.Emit(watchReq(c, 1, "/api/v1/configmaps?watch=1&x="+bad, bad, t0))
	e := ev(c, 1, 1, "ADDED", "1", t0, 0, 10)
	e.Object = json.RawMessage(`{"kind":"ConfigMap","data":{"k":"` + strings.ReplaceAll(bad, `"`, `\"`) + `"}}`)
	e.Name = bad
	r.Emit(e)
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "</script>"); n != 2 {
		t.Errorf("the page has %d </script>, want 2 (the data's and the script's)", n)
	}
	if strings.Contains(b.String(), "window.pwned=1</script>") || !strings.Contains(b.String(), "<title>kwatch pcap &lt;/title&gt;") {
		t.Error("wire text reached the page unescaped")
	}
}

// TestTitleHoldsPlaceholder: a title (the capture's file name) holding the
// page template's data placeholder stays in the title, and the data where
// it belongs; found by a hostile trial (the data went into <title>).
func TestTitleHoldsPlaceholder(t *testing.T) {
	r := New(nil, Options{Title: "kwatch pcap {{DATA}}<b>x.pcap"})
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	title, _, _ := strings.Cut(b.String(), "</title>")
	if !strings.HasSuffix(title, "<title>kwatch pcap {{DATA}}&lt;b&gt;x.pcap") {
		t.Errorf("title %q", title[max(0, len(title)-80):])
	}
	_, data, _ := strings.Cut(b.String(), `<script type="application/json" id="data">`)
	data, _, _ = strings.Cut(data, "</script>")
	if !json.Valid([]byte(data)) {
		t.Errorf("the data element does not hold the data: %.80q", data)
	}
}

// TestFollowKind: how a watch follows the one before it.
func TestFollowKind(t *testing.T) {
	prev := &lane{lastRV: "42"}
	for _, c := range []struct {
		l    lane
		want string
	}{
		{lane{requestRV: "42"}, "resume"},
		{lane{requestRV: "0"}, "follows"},
		{lane{reason: "resume: the connection closed without the last chunk", why: record.WhyResume}, "resume"},
		{lane{reason: "after LIST", why: record.WhyAfterList, relists: 1}, "re-list"},
		{lane{reason: "re-list after 410 Gone (watch-list)", why: record.WhyRelist}, "re-list"},
	} {
		if got := followKind(prev, &c.l); got != c.want {
			t.Errorf("%+v: %s, want %s", c.l, got, c.want)
		}
	}
}

// TestNoteKind: the timeline sorts notes by their typed fields, and
// RST_STREAM and stream stalls go to their stream's lane.
func TestNoteKind(t *testing.T) {
	for _, c := range []struct {
		note   record.ConnNote
		kind   string
		stream int
	}{
		{record.ConnNote{Kind: "h2", Frame: "RST_STREAM", Stream: 3, Message: "RST_STREAM from the server: stream 3, INTERNAL_ERROR"}, "rst_stream", 3},
		{record.ConnNote{Kind: "h2", Frame: "WINDOW_UPDATE", Stall: 2 * time.Second, Stream: 15}, "stall", 15},
		{record.ConnNote{Kind: "h2", Frame: "WINDOW_UPDATE", Stall: 2 * time.Second}, "stall", 0},
		{record.ConnNote{Kind: "h2", Frame: "GOAWAY"}, "goaway", 0},
		{record.ConnNote{Kind: "h2", Frame: "PING"}, "ping", 0},
		{record.ConnNote{Kind: "h2", Frame: "SETTINGS"}, "", 0},
		{record.ConnNote{Kind: "h2", Message: "HTTP/2 (the client's connection preface)"}, "", 0},
		{record.ConnNote{Kind: "tcp", Stall: 2 * time.Second}, "stall", 0},
		{record.ConnNote{Kind: "tcp", Unlisted: 3}, "", 0},
		{record.ConnNote{Kind: "closed", Reset: true}, "reset", 0},
		{record.ConnNote{Kind: "closed"}, "closed", 0},
		{record.ConnNote{Kind: "not-http"}, "conn", 0},
	} {
		kind := noteKind(&c.note)
		if got := streamOf(kind, &c.note); kind != c.kind || got != c.stream {
			t.Errorf("%+v: kind %q, stream %d; want %q, %d", c.note, kind, got, c.kind, c.stream)
		}
	}
}

// TestDetailsSpread: past the detail budget the events that keep their
// bytes are spread over the capture (every 2^k-th), not its first ones,
// and an ERROR late in it keeps its own.
func TestDetailsSpread(t *testing.T) {
	c := &record.Conn{ID: 1}
	r := New(nil, Options{MaxLaneMarks: 50000, MaxDetailBytes: 64 << 10})
	r.Emit(watchReq(c, 1, "/api/v1/pods?watch=1", "x", t0))
	const n = 20000
	for i := range n {
		e := ev(c, 1, i+1, "MODIFIED", fmt.Sprint(i), t0.Add(time.Duration(i)*time.Millisecond), 0, 10)
		if i == n-7 {
			e.Type = "ERROR"
		}
		r.Emit(e)
	}
	p := pageOf(t, r)
	var last, errSeq int
	for _, e := range p.Events {
		last = max(last, e.Seq)
		if e.Type == "ERROR" {
			errSeq = e.Seq
		}
	}
	if len(p.Events) < 50 || last < n*9/10 || errSeq != n-6 || p.Dropped.Details != n-len(p.Events) {
		t.Errorf("%d details kept, the last of event %d, ERROR's %d, %d dropped", len(p.Events), last, errSeq, p.Dropped.Details)
	}
	// Marks point at their own details after the holes are closed.
	for _, m := range p.Lanes[0].Marks {
		if m[3] >= 0 && p.Events[int(m[3])].T != m[0] {
			t.Fatalf("mark at %v points at the details of the event at %v", m[0], p.Events[int(m[3])].T)
		}
	}
}

// TestWho: the table of who is watching what names each watch's client as
// the printers do (who.Of): its User-Agent's program, version and
// component, and its process from attach's process note; a watch whose
// request was not seen, by its connection's process alone.
func TestWho(t *testing.T) {
	c := &record.Conn{ID: 1, HTTP2: true, Client: netip.MustParseAddrPort("127.0.0.1:40000"), Server: netip.MustParseAddrPort("127.0.0.1:6443")}
	r := New(nil, Options{})
	r.Emit(&record.ConnNote{Conn: c, Time: t0, Kind: "process", Message: "client kube-controller-manager (pid 812) · server kube-apiserver (pid 7)",
		Processes: []record.ConnProcess{{Role: "client", PID: 812, Name: "kube-controller-manager"}, {Role: "server", PID: 7, Name: "kube-apiserver", Attached: true}}})
	r.Emit(watchReq(c, 3, "/apis/apps/v1/replicasets?watch=true", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/replicaset-controller", t0))
	r.Emit(&record.Response{Conn: c, Exchange: 5, Time: t0, StatusCode: 200, Watch: true, Format: "protobuf", Inferred: true})
	p := pageOf(t, r)
	if len(p.Lanes) != 2 {
		t.Fatalf("%d lanes", len(p.Lanes))
	}
	if got, want := p.Lanes[0].Who, "kube-controller-manager/v1.37.2 … replicaset-controller (pid 812)"; got != want {
		t.Errorf("the request's client: %q, want %q", got, want)
	}
	if got, want := p.Lanes[1].Who, "kube-controller-manager (pid 812)"; got != want {
		t.Errorf("the joined stream's client: %q, want %q", got, want)
	}
}
