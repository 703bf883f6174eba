package merge

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

// clock is a test's time.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// note is a record of connection c at ms milliseconds, its message text.
func note(c *record.Conn, ms int, text string) *record.ConnNote {
	return &record.ConnNote{Conn: c, Time: at(ms), Kind: "h2", Message: text}
}

func conn(node, client, server string) *record.Conn {
	return &record.Conn{Client: netip.MustParseAddrPort(client), Server: netip.MustParseAddrPort(server), Node: node}
}

// collect is a sink that keeps what it is given, as "#ID message".
type collect struct{ out []string }

func (c *collect) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.ConnNote:
		c.out = append(c.out, fmt.Sprintf("#%d %s", v.Conn.ID, v.Message))
	case *record.Event:
		c.out = append(c.out, fmt.Sprintf("#%d %s %s rv %s", v.Conn.ID, v.Type, v.Name, v.ResourceVersion))
	default:
		c.out = append(c.out, fmt.Sprintf("%T", r))
	}
}

func (c *collect) String() string { return strings.Join(c.out, "\n") }

// TestMergeOrder: records of two sources come in bursts, each source's in
// its own time order; they go out in time order as soon as both sources
// have one held, and each connection is numbered as it is first shown.
func TestMergeOrder(t *testing.T) {
	clk := &clock{t0}
	out := &collect{}
	m := New(out, Options{Now: clk.now})
	a, b := m.Add("a"), m.Add("b")
	ca, cb := conn("a", "10.0.0.1:40000", "10.0.0.9:6443"), conn("b", "10.0.0.2:40000", "10.0.0.9:6443")
	m.Push(a, note(ca, 10, "a10"))
	m.Push(a, note(ca, 30, "a30"))
	m.Push(a, note(ca, 50, "a50"))
	if len(out.out) != 0 {
		t.Fatalf("handed on before b sent anything: %s", out)
	}
	m.Push(b, note(cb, 20, "b20"))
	m.Push(b, note(cb, 40, "b40"))
	m.Push(b, note(cb, 60, "b60"))
	m.Done(a)
	m.Done(b)
	want := "#1 a10\n#2 b20\n#1 a30\n#2 b40\n#1 a50\n#2 b60"
	if out.String() != want {
		t.Errorf("merged:\n%s\nwant:\n%s", out, want)
	}
	if st := m.Stats(); st.Records != 6 || st.Late != 0 || st.Connections != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestMergeWindow: a source that sends nothing holds the other's records
// back for the window only; a record of its that comes later than that,
// earlier than records handed on, goes at once and is counted late. A
// source's records keep their order even when its times go back.
func TestMergeWindow(t *testing.T) {
	clk := &clock{t0}
	out := &collect{}
	m := New(out, Options{Now: clk.now, Window: time.Second})
	a, b := m.Add("a"), m.Add("b")
	ca, cb := conn("a", "10.0.0.1:40000", "10.0.0.9:6443"), conn("b", "10.0.0.2:40000", "10.0.0.9:6443")
	m.Push(a, note(ca, 100, "a100"))
	m.Push(a, note(ca, 90, "a90 (its time goes back: kept after a100)"))
	clk.t = t0.Add(500 * time.Millisecond)
	if d := m.Tick(); d != 500*time.Millisecond || len(out.out) != 0 {
		t.Fatalf("Tick after 0.5 s: next in %v, handed on %q", d, out.out)
	}
	clk.t = t0.Add(time.Second)
	if d := m.Tick(); d != 0 {
		t.Errorf("Tick after the window: next in %v, want 0 (nothing held)", d)
	}
	m.Push(b, note(cb, 50, "b50 (late)"))
	clk.t = t0.Add(2 * time.Second)
	m.Tick()
	want := "#1 a100\n#1 a90 (its time goes back: kept after a100)\n#2 b50 (late)"
	if out.String() != want {
		t.Errorf("merged:\n%s\nwant:\n%s", out, want)
	}
	if st := m.Stats(); st.Late != 1 {
		t.Errorf("Late = %d, want 1", st.Late)
	}
}

// TestMergeMaxHeld: past MaxHeld records the earliest goes at once.
func TestMergeMaxHeld(t *testing.T) {
	clk := &clock{t0}
	out := &collect{}
	m := New(out, Options{Now: clk.now, MaxHeld: 3})
	a, _ := m.Add("a"), m.Add("b")
	c := conn("a", "10.0.0.1:40000", "10.0.0.9:6443")
	for i := range 5 {
		m.Push(a, note(c, i, fmt.Sprint(i)))
	}
	if want := "#1 0\n#1 1"; out.String() != want {
		t.Errorf("handed on with 5 held, at most 3:\n%s\nwant:\n%s", out, want)
	}
}

// TestMergeDuplicate: one TCP connection seen from two nodes at once (its
// two ends, or two kwatch on one machine) is shown once, from the node
// that showed it first, with a note; once it ended, the same endpoints
// from another node are a connection of their own again.
func TestMergeDuplicate(t *testing.T) {
	clk := &clock{t0}
	out := &collect{}
	m := New(out, Options{Now: clk.now})
	a, b := m.Add("a"), m.Add("b")
	ca, cb := conn("a", "10.0.0.1:40000", "10.0.0.9:6443"), conn("b", "10.0.0.1:40000", "10.0.0.9:6443")
	m.Push(a, note(ca, 10, "a: open"))
	m.Push(b, note(cb, 11, "b: open"))
	m.Push(a, &record.Event{Conn: ca, Time: at(20), Type: "ADDED", Name: "x", ResourceVersion: "5"})
	m.Push(b, &record.Event{Conn: cb, Time: at(21), Type: "ADDED", Name: "x", ResourceVersion: "5"})
	m.Push(a, &record.ConnNote{Conn: ca, Time: at(30), Kind: "closed", Message: "a: closed"})
	m.Push(b, &record.ConnNote{Conn: cb, Time: at(31), Kind: "closed", Message: "b: closed"})
	cb2 := conn("b", "10.0.0.1:40000", "10.0.0.9:6443")
	m.Push(b, note(cb2, 40, "b: the endpoints again"))
	m.Done(a)
	m.Done(b)
	want := strings.Join([]string{
		"#1 a: open",
		"#1 also seen from node b (the same TCP connection): shown once, as node a saw it",
		"#1 ADDED x rv 5",
		"#1 a: closed",
		"#2 b: the endpoints again",
	}, "\n")
	if out.String() != want {
		t.Errorf("merged:\n%s\nwant:\n%s", out, want)
	}
	if st := m.Stats(); st.Duplicates != 1 || st.Connections != 2 || st.Events != 1 || st.Versions != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestMergeVersions: the same object version delivered to two watches
// (through two API servers) is one version; each delivery is handed on.
func TestMergeVersions(t *testing.T) {
	clk := &clock{t0}
	out := &collect{}
	m := New(out, Options{Now: clk.now})
	a, b := m.Add("a"), m.Add("b")
	ca, cb := conn("a", "10.0.0.1:40000", "10.0.0.8:6443"), conn("b", "10.0.0.2:40000", "10.0.0.9:6443")
	ev := func(c *record.Conn, ms int, typ, rv string) *record.Event {
		return &record.Event{Conn: c, Time: at(ms), Type: typ, APIVersion: "v1", Kind: "ConfigMap", Namespace: "n", Name: "x", ResourceVersion: rv}
	}
	m.Push(a, ev(ca, 1, "ADDED", "5"))
	m.Push(b, ev(cb, 2, "ADDED", "5"))
	m.Push(a, ev(ca, 3, "MODIFIED", "6"))
	m.Push(b, ev(cb, 4, "MODIFIED", "6"))
	m.Push(b, &record.Event{Conn: cb, Time: at(5), Type: "BOOKMARK", ResourceVersion: "7"})
	m.Done(a)
	m.Done(b)
	if st := m.Stats(); st.Events != 4 || st.Versions != 2 || st.Records != 5 {
		t.Errorf("stats %+v, want 4 events of 2 versions, 5 records", st)
	}
}
