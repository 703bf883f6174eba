package keylog

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// stagedLog is a Log with staging and a clock the test moves, and the
// lines Admitted was given.
type stagedLog struct {
	*Log
	clock    time.Time
	admitted []string
}

func newStaged(opt StageOptions) *stagedLog {
	s := &stagedLog{Log: New(), clock: time.Unix(1_000_000, 0)}
	opt.Admitted = func(line []byte) { s.admitted = append(s.admitted, strings.TrimSuffix(string(line), "\n")) }
	s.SetStaging(opt)
	s.stage.now = func() time.Time { return s.clock }
	return s
}

// randomN returns a client random made of n, and its hex.
func randomN(n int) (Random, string) {
	var r Random
	copy(r[:], fmt.Sprintf("%032d", n))
	return r, r.String()
}

func line(label, hexRandom string, fill byte) string {
	return fmt.Sprintf("%s %s %s", label, hexRandom, strings.Repeat(fmt.Sprintf("%02x", fill), 32))
}

// TestStageWaitsForLookup: staged secrets do not enter the Log, nor go to
// Admitted, until a lookup asks for their random; then all of them do, in
// the order they came, and later lines of the same random enter at once.
func TestStageWaitsForLookup(t *testing.T) {
	l := newStaged(StageOptions{})
	r, h := randomN(1)
	hs := line(LabelClientHandshake, h, 1) + "\n" + line(LabelServerHandshake, h, 2) + "\n"
	l.Stage([]byte(hs), "uprobe")
	if conns, _, _, _ := l.Stats(); conns != 0 || len(l.admitted) != 0 {
		t.Fatalf("before a lookup: %d connections in the Log, %d lines admitted", conns, len(l.admitted))
	}
	if w, a, f := l.StageStats(); w != 2 || a != 0 || f != 0 {
		t.Fatalf("waiting %d, admitted %d, forgotten %d; want 2, 0, 0", w, a, f)
	}
	gen := l.Generation()
	s, ok := l.Lookup(r)
	if !ok || s.ClientHandshake == nil || s.ServerHandshake == nil || s.Source != "uprobe" {
		t.Fatalf("lookup: %+v, %v", s, ok)
	}
	if l.Generation() == gen {
		t.Error("the Log's generation did not move when staged lines entered")
	}
	l.Stage([]byte(line(LabelClientTraffic0, h, 3)), "uprobe")
	if s, _ := l.Lookup(r); s.ClientTraffic == nil {
		t.Error("a later line of a random the Log holds did not enter at once")
	}
	want := []string{line(LabelClientHandshake, h, 1), line(LabelServerHandshake, h, 2), line(LabelClientTraffic0, h, 3)}
	if !slices.Equal(l.admitted, want) {
		t.Errorf("admitted %q, want %q", l.admitted, want)
	}
	if w, a, f := l.StageStats(); w != 0 || a != 3 || f != 0 {
		t.Errorf("waiting %d, admitted %d, forgotten %d; want 0, 3, 0", w, a, f)
	}
}

// TestStageWanted: a lookup that found nothing is remembered for the
// window: the secrets that come after it enter at once (the common order
// live: the ClientHello is decoded before the process's secrets arrive);
// after the window they wait like any other.
func TestStageWanted(t *testing.T) {
	l := newStaged(StageOptions{Window: 10 * time.Second})
	r, h := randomN(2)
	if _, ok := l.Lookup(r); ok {
		t.Fatal("found secrets in an empty Log")
	}
	l.clock = l.clock.Add(9 * time.Second)
	l.Stage([]byte(line(LabelClientTraffic0, h, 4)), "uprobe")
	if s, ok := l.Lookup(r); !ok || s.ClientTraffic == nil || s.Source != "uprobe" {
		t.Fatalf("secrets of a random looked up 9 s before: %+v, %v", s, ok)
	}
	if len(l.admitted) != 1 {
		t.Errorf("admitted %q", l.admitted)
	}
	r2, h2 := randomN(3)
	l.Lookup(r2)
	l.clock = l.clock.Add(10 * time.Second)
	l.Stage([]byte(line(LabelClientTraffic0, h2, 5)), "uprobe")
	if w, _, _ := l.StageStats(); w != 1 {
		t.Errorf("a line for a random looked up 10 s before (the window) did not wait: %d waiting", w)
	}
}

// TestStageBounds: a flood of secrets for randoms no lookup asks for
// (a process calling writeKeyLog with made-up randoms) holds at most
// MaxLines, forgets the oldest, and forgets all after the window; none
// enters the Log or goes to Admitted.
func TestStageBounds(t *testing.T) {
	l := newStaged(StageOptions{MaxLines: 100, Window: time.Minute})
	var b strings.Builder
	for i := range 10_000 {
		_, h := randomN(1000 + i)
		b.WriteString(line(LabelServerTraffic0, h, 6) + "\n")
	}
	l.Stage([]byte(b.String()), "uprobe")
	if w, a, f := l.StageStats(); w != 100 || a != 0 || f != 9900 {
		t.Errorf("waiting %d, admitted %d, forgotten %d; want 100, 0, 9900", w, a, f)
	}
	newest, _ := randomN(1000 + 9999)
	oldest, _ := randomN(1000)
	if _, ok := l.Lookup(oldest); ok {
		t.Error("the oldest line, past MaxLines, was kept")
	}
	if _, ok := l.Lookup(newest); !ok {
		t.Error("the newest line was not kept")
	}
	l.clock = l.clock.Add(time.Minute)
	if w, _, f := l.StageStats(); w != 0 || f != 9999 {
		t.Errorf("after the window: waiting %d, forgotten %d; want 0 and 9999", w, f)
	}
	if conns, _, _, _ := l.Stats(); conns != 1 || len(l.admitted) != 1 {
		t.Errorf("%d connections in the Log, %d lines admitted; want 1 and 1 (the one looked up)", conns, len(l.admitted))
	}
	if len(l.stage.order) > 1 || len(l.stage.lines) != 0 {
		t.Errorf("after the window %d randoms in order, %d in lines", len(l.stage.order), len(l.stage.lines))
	}
}

// TestStageBadLines: a line that does not read is counted as Add counts
// it, staged or not.
func TestStageBadLines(t *testing.T) {
	l := newStaged(StageOptions{})
	l.Stage([]byte("garbage\nCLIENT_RANDOM "+strings.Repeat("zz", 32)+" 00\n# comment\n"), "uprobe")
	if _, _, _, n := l.Stats(); n != 2 {
		t.Errorf("%d line errors, want 2", n)
	}
	if w, _, _ := l.StageStats(); w != 0 {
		t.Errorf("%d lines waiting", w)
	}
}

// TestStageJoined: a joined connection's state line goes to Admitted at
// the first lookup that finds it, once, and again after AddJoined changed
// it (a KeyUpdate, a state read again).
func TestStageJoined(t *testing.T) {
	l := newStaged(StageOptions{})
	c, s := netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.0.2:6443")
	j := Joined{Client: c, Server: s, Version: 0x0304, Suite: 0x1301, ClientTraffic: make([]byte, 32), ServerTraffic: make([]byte, 32), ClientSeq: 5}
	l.AddJoined(j)
	if len(l.admitted) != 0 {
		t.Fatalf("admitted before a lookup: %q", l.admitted)
	}
	for range 3 {
		if _, ok := l.LookupJoined(s, c); !ok {
			t.Fatal("joined state not found")
		}
	}
	j.ClientSeq = 9
	l.AddJoined(j)
	l.LookupJoined(c, s)
	want := []string{strings.TrimSuffix(string(Joined{Client: c, Server: s, Version: 0x0304, Suite: 0x1301, ClientTraffic: make([]byte, 32), ServerTraffic: make([]byte, 32), ClientSeq: 5}.Line()), "\n"),
		strings.TrimSuffix(string(j.Line()), "\n")}
	if !slices.Equal(l.admitted, want) {
		t.Errorf("admitted %q, want %q", l.admitted, want)
	}
}

// TestStageWithoutStaging: without SetStaging, Stage is Add.
func TestStageWithoutStaging(t *testing.T) {
	l := New()
	r, h := randomN(7)
	l.Stage([]byte(line(LabelClientTraffic0, h, 8)), "src")
	if s, ok := l.Lookup(r); !ok || s.Source != "src" {
		t.Errorf("%+v, %v", s, ok)
	}
}

// TestSetMaxLines: lowering the bound forgets the oldest connections at
// once.
func TestSetMaxLines(t *testing.T) {
	l := New()
	for i := range 10 {
		_, h := randomN(100 + i)
		l.Add([]byte(line(LabelClientTraffic0, h, 9)), "k")
	}
	l.SetMaxLines(4)
	if conns, dropped, _, _ := l.Stats(); conns != 4 || dropped != 6 {
		t.Errorf("%d connections, %d dropped; want 4 and 6", conns, dropped)
	}
}
