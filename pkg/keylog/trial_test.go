package keylog

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/record"
)

// TestTrials: the key log's connections with both TLS 1.3 application
// traffic secrets are offered newest first, bounded, without those a
// captured handshake looked up, as copies; the budget of openings is
// taken whole or not at all.
func TestTrials(t *testing.T) {
	line := func(label string, r, secret byte) string {
		return label + " " + strings.Repeat(string("0123456789abcdef"[r]), 64) + " " + strings.Repeat(string("0123456789abcdef"[secret]), 64) + "\n"
	}
	l := New()
	l.Add([]byte(line("CLIENT_TRAFFIC_SECRET_0", 1, 1)+line("SERVER_TRAFFIC_SECRET_0", 1, 2)+
		line("CLIENT_TRAFFIC_SECRET_0", 2, 3)+line("SERVER_TRAFFIC_SECRET_0", 2, 4)+
		line("CLIENT_TRAFFIC_SECRET_0", 3, 5)+ // no server secret
		line("CLIENT_RANDOM", 4, 6)+ // TLS 1.2
		line("CLIENT_TRAFFIC_SECRET_0", 5, 7)+line("SERVER_TRAFFIC_SECRET_0", 5, 8)), "keys.log")
	got, all := l.Trials(2)
	if all != 3 || len(got) != 2 || got[0].Random[0] != 0x55 || got[1].Random[0] != 0x22 || got[0].Source != "keys.log" {
		t.Fatalf("trials %+v of %d", got, all)
	}
	got[0].ClientTraffic[0] = 0
	var r Random
	for i := range r {
		r[i] = 0x55
	}
	if s, ok := l.Lookup(r); !ok || s.ClientTraffic[0] != 0x77 {
		t.Fatalf("the Log's secrets changed through a trial's copy: %+v", s)
	}
	got, all = l.Trials(8)
	if all != 2 || len(got) != 2 || got[0].Random[0] != 0x22 || got[1].Random[0] != 0x11 {
		t.Errorf("after a lookup: trials %+v of %d", got, all)
	}
	if !l.TakeTrialOpens(DefaultTrialOpens-1) || l.TakeTrialOpens(2) || !l.TakeTrialOpens(1) || l.TakeTrialOpens(1) || l.TakeTrialOpens(-1) {
		t.Errorf("the budget of openings is not taken whole or not at all")
	}
	l.ReturnTrialOpens(3)
	if !l.TakeTrialOpens(3) || l.TakeTrialOpens(1) {
		t.Errorf("openings given back are not there to take again")
	}
	l.ReturnTrialOpens(DefaultTrialOpens + 5)
	if !l.TakeTrialOpens(DefaultTrialOpens) || l.TakeTrialOpens(1) {
		t.Errorf("more given back than taken makes more than the budget")
	}
}

// TestJoinedLine: a joined state written as its comment line (what kwatch
// attach --record puts in a Decryption Secrets Block) reads back as the
// same state, TLS 1.3 and TLS 1.2, by endpoints either way round; a
// damaged line is a line error, never a state.
func TestJoinedLine(t *testing.T) {
	for _, j := range []Joined{
		{Client: netip.MustParseAddrPort("127.0.0.1:40000"), Server: netip.MustParseAddrPort("[::1]:6443"), Version: 0x0304, Suite: 0x1301,
			ClientTraffic: bytes.Repeat([]byte{1}, 32), ServerTraffic: bytes.Repeat([]byte{2}, 32), ClientSeq: 7, ServerSeq: 1 << 40},
		{Client: netip.MustParseAddrPort("10.0.0.1:1"), Server: netip.MustParseAddrPort("10.0.0.2:443"), Version: 0x0303, Suite: 0xc02f,
			Master: bytes.Repeat([]byte{3}, 48), ClientRandom: [32]byte{4}, ServerRandom: [32]byte{5}, ClientSeq: 1, ServerSeq: 2},
	} {
		l := New()
		l.Add(j.Line(), "session.pcapng")
		got, ok := l.LookupJoined(j.Server, j.Client)
		if !ok {
			t.Fatalf("%s: no state read back", j.Line())
		}
		want := j
		want.Source = "kwatch attach's recording of it (session.pcapng)"
		if fmt.Sprintf("%+v", *got) != fmt.Sprintf("%+v", want) {
			t.Errorf("read back\n%+v\nwant\n%+v", *got, want)
		}
	}
	l := New()
	l.Add([]byte(JoinedPrefix+"127.0.0.1:1 127.0.0.1:2 0304 1301 1 2 zz - - - -\n"+JoinedPrefix+"127.0.0.1:1\n"), "f")
	if _, ok := l.LookupJoined(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:2")); ok {
		t.Error("a damaged line gave a state")
	}
	if _, _, errs, n := l.Stats(); n != 2 || len(errs) != 2 {
		t.Errorf("%d line errors (%v), want 2", n, errs)
	}
}

// TestProcessLine: the processes at a connection's ends written as their
// comment line (kwatch attach --record) read back the same by the
// connection's client and server; a damaged or oversized line is a line
// error, never processes.
func TestProcessLine(t *testing.T) {
	p := Processes{Client: netip.MustParseAddrPort("127.0.0.1:40000"), Server: netip.MustParseAddrPort("[::1]:6443"),
		Message: "client kube-controller-manager (pid 812) · server kube-apiserver (pid 7, attached)",
		Processes: []record.ConnProcess{{Role: "client", PID: 812, Name: "kube-controller-manager", PodUID: "u", ContainerID: "c"},
			{Role: "server", PID: 7, Name: "kube \"api\"\nserver", Attached: true}}}
	line := ProcessLine(p)
	if bytes.Count(line, []byte("\n")) != 1 || !bytes.HasPrefix(line, []byte(ProcessPrefix+"127.0.0.1:40000 [::1]:6443 {")) {
		t.Fatalf("line %q", line)
	}
	l := New()
	l.Add(line, "session.pcapng")
	msg, procs := l.Processes(p.Client, p.Server)
	if msg != p.Message || fmt.Sprint(procs) != fmt.Sprint(p.Processes) {
		t.Errorf("read back %q %v, want %q %v", msg, procs, p.Message, p.Processes)
	}
	if msg, _ := l.Processes(p.Server, p.Client); msg != "" {
		t.Errorf("read back the other way round: %q", msg)
	}
	if _, _, errs, n := l.Stats(); n != 0 {
		t.Errorf("line errors: %v", errs)
	}
	l = New()
	l.Add([]byte(ProcessPrefix+"127.0.0.1:1 127.0.0.1:2 {\"message\":1}\n"+ProcessPrefix+"127.0.0.1:1\n"+
		ProcessPrefix+"127.0.0.1:1 127.0.0.1:2 {\"message\":\""+strings.Repeat("x", 5000)+"\"}\n"+
		ProcessPrefix+"127.0.0.1:1 127.0.0.1:2 {}\n"), "f")
	if msg, _ := l.Processes(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:2")); msg != "" {
		t.Errorf("a damaged line gave processes: %q", msg)
	}
	if _, _, errs, n := l.Stats(); n != 4 {
		t.Errorf("%d line errors (%v), want 4", n, errs)
	}
}
