package attach

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/kwatch/kwatch/pkg/procnet"
)

func TestPacketTuple(t *testing.T) {
	v4 := make([]byte, 40)
	v4[0], v4[9] = 0x45, 6
	copy(v4[12:], []byte{127, 0, 0, 1})
	copy(v4[16:], []byte{10, 0, 0, 2})
	binary.BigEndian.PutUint16(v4[20:], 50000)
	binary.BigEndian.PutUint16(v4[22:], 6443)
	v4[33] = 0x02 // SYN
	src, dst, syn, ok := packetTuple(v4)
	if !ok || !syn || src != netip.MustParseAddrPort("127.0.0.1:50000") || dst != netip.MustParseAddrPort("10.0.0.2:6443") {
		t.Errorf("IPv4: %v %v %v %v", src, dst, syn, ok)
	}
	v4[33] = 0x12 // SYN+ACK: not a connection's first packet
	if _, _, syn, _ := packetTuple(v4); syn {
		t.Error("SYN+ACK taken for a SYN")
	}
	v6 := make([]byte, 60)
	v6[0], v6[6] = 0x60, 6
	v6[23], v6[39] = 1, 1 // ::1
	binary.BigEndian.PutUint16(v6[40:], 6443)
	binary.BigEndian.PutUint16(v6[42:], 50001)
	v6[53] = 0x10
	src, dst, syn, ok = packetTuple(v6)
	if !ok || syn || src != netip.MustParseAddrPort("[::1]:6443") || dst != netip.MustParseAddrPort("[::1]:50001") {
		t.Errorf("IPv6: %v %v %v %v", src, dst, syn, ok)
	}
	for _, bad := range [][]byte{nil, {0x45}, v4[:30], append([]byte{0x45}, make([]byte, 39)...)} {
		if _, _, _, ok := packetTuple(bad); ok {
			t.Errorf("% x taken for TCP", bad)
		}
	}
}

// TestEnds tells the processes at a connection's ends from their sockets:
// a client's connection, one accepted by a listener (on any address), one
// whose two ends are both attached, and one of neither.
func TestEnds(t *testing.T) {
	ctl := procnet.Process{PID: 812, Exe: "/usr/local/bin/kube-controller-manager"}
	api := procnet.Process{PID: 7, Exe: "/usr/local/bin/kube-apiserver"}
	ap := netip.MustParseAddrPort
	s := &sockets{
		listen: map[netip.AddrPort]procnet.Process{ap("0.0.0.0:6443"): api},
		conns: map[[2]netip.AddrPort]procnet.Process{
			{ap("127.0.0.1:50000"), ap("127.0.0.1:6443")}: ctl,
			{ap("127.0.0.1:6443"), ap("127.0.0.1:50000")}: api,
			{ap("127.0.0.1:41000"), ap("127.0.0.1:2379")}: api,
		},
	}
	for _, tc := range []struct {
		client, server string
		want           string
	}{
		{"127.0.0.1:50000", "127.0.0.1:6443", "client kube-controller-manager (pid 812) · server kube-apiserver (pid 7)"},
		{"127.0.0.1:41000", "127.0.0.1:2379", "client kube-apiserver (pid 7)"},
		{"10.1.2.3:40000", "10.0.0.1:6443", "server kube-apiserver (pid 7)"},
		{"127.0.0.1:40000", "127.0.0.1:8001", ""},
	} {
		c, sv := ap(tc.client), ap(tc.server)
		if got, _ := describe(verdict{ends: s.ends(c, sv)}, c); got != tc.want {
			t.Errorf("%s -> %s: %q, want %q", c, sv, got, tc.want)
		}
		if got, _ := describe(verdict{ends: s.ends(sv, c)}, c); got != tc.want {
			t.Errorf("%s -> %s, from the server's packet: %q, want %q", c, sv, got, tc.want)
		}
	}
}

func TestDescribeBefore(t *testing.T) {
	p := procnet.Process{PID: 812, Comm: "kube-controller"}
	c := netip.MustParseAddrPort("127.0.0.1:50000")
	got, _ := describe(verdict{ends: []end{{proc: p, local: c}}, before: true}, c)
	if want := "client kube-controller (pid 812) · open before kwatch attached"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// busySource is a live.Source whose packets never stop: a TCP segment of
// the same connection every millisecond.
type busySource struct {
	pkt     []byte
	dropped uint64
}

func (b *busySource) ReadPacket() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	time.Sleep(time.Millisecond)
	return b.pkt, gopacket.CaptureInfo{Timestamp: time.Now()}, layers.LinkTypeRaw, nil
}

func (b *busySource) Dropped() uint64 { return b.dropped }

// TestTrackedIdle: while only other processes' packets come, ReadPacket
// still returns, with an idle turn, so that ReadLive sees Ctrl-C.
func TestTrackedIdle(t *testing.T) {
	pkt := make([]byte, 40)
	pkt[0], pkt[9] = 0x45, 6
	copy(pkt[12:], []byte{10, 0, 0, 1})
	copy(pkt[16:], []byte{10, 0, 0, 2})
	binary.BigEndian.PutUint16(pkt[20:], 6443)
	binary.BigEndian.PutUint16(pkt[22:], 50000)
	pkt[33] = 0x10 // ACK
	other := newTuple(netip.MustParseAddrPort("10.0.0.1:6443"), netip.MustParseAddrPort("10.0.0.2:50000"))
	// One process attached, still running: the run goes on.
	a := &attacher{opt: Options{Rescan: time.Hour}, lastScan: time.Now(), verdicts: map[tuple]verdict{other: {}}, procs: []procnet.Process{{PID: os.Getpid()}}}
	tr := &tracked{a: a, src: &busySource{pkt: pkt}}
	start := time.Now()
	data, ci, _, err := tr.ReadPacket()
	took := time.Since(start)
	if err != nil || data != nil {
		t.Fatalf("ReadPacket: %d bytes, %v; want an idle turn", len(data), err)
	}
	if took < idleAfter {
		t.Errorf("the idle turn came after %v, before %v of other processes' packets", took, idleAfter)
	}
	if ci.Timestamp.Before(start.Add(idleAfter)) {
		t.Errorf("idle turn at %v, want the time now", ci.Timestamp)
	}
}

// TestTrackedDropped: the captures' drops go through to ReadLive, which
// reports them.
func TestTrackedDropped(t *testing.T) {
	tr := &tracked{a: &attacher{}, src: &busySource{dropped: 7}}
	if d := tr.Dropped(); d != 7 {
		t.Errorf("Dropped: %d, want the source's 7", d)
	}
}

// TestIndexOneTable: the processes of one network namespace share its
// socket table, read once (from the first process whose table reads):
// here the second process's own copy is missing, and its connection is
// found all the same.
func TestIndexOneTable(t *testing.T) {
	root := t.TempDir()
	old := procnet.Root
	procnet.Root = root
	defer func() { procnet.Root = old }()
	table := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:C350 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 11 1 0000000000000000 20 4 30 10 -1\n" +
		"   1: 0100007F:C351 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 22 1 0000000000000000 20 4 30 10 -1\n"
	mk := func(pid, inode string, withTable bool) procnet.Process {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("socket:["+inode+"]", filepath.Join(dir, "fd", "3")); err != nil {
			t.Fatal(err)
		}
		if withTable {
			if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "net", "tcp"), []byte(table), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		n, _ := strconv.Atoi(pid)
		return procnet.Process{PID: n, Comm: "p" + pid}
	}
	a, b := mk("101", "11", true), mk("102", "22", false)
	s, err := index([]procnet.Process{a, b})
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	for c, want := range map[[2]netip.AddrPort]int{
		{ap("127.0.0.1:50000"), ap("127.0.0.1:6443")}: 101,
		{ap("127.0.0.1:50001"), ap("127.0.0.1:6443")}: 102,
	} {
		if p, ok := s.conns[c]; !ok || p.PID != want {
			t.Errorf("%v: %v %v, want pid %d", c, p, ok, want)
		}
	}
}
