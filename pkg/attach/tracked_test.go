package attach

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/kwatch/kwatch/pkg/live"
	"github.com/kwatch/kwatch/pkg/procnet"
)

// fakeSource returns its packets one by one, then idle turns.
type fakeSource struct{ packets [][]byte }

func (f *fakeSource) ReadPacket() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	if len(f.packets) == 0 {
		return nil, gopacket.CaptureInfo{Timestamp: time.Now()}, layers.LinkTypeRaw, nil
	}
	p := f.packets[0]
	f.packets = f.packets[1:]
	return p, gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(p), Length: len(p)}, layers.LinkTypeRaw, nil
}

// segment is an IPv4 TCP segment from src to dst with flags and payload.
func segment(src, dst netip.AddrPort, flags byte, payload string) []byte {
	p := make([]byte, 40+len(payload))
	p[0], p[9] = 0x45, 6
	copy(p[12:], src.Addr().AsSlice())
	copy(p[16:], dst.Addr().AsSlice())
	binary.BigEndian.PutUint16(p[20:], src.Port())
	binary.BigEndian.PutUint16(p[22:], dst.Port())
	p[32], p[33] = 5<<4, flags
	copy(p[40:], payload)
	return p
}

// TestTrackedHolds feeds packets of this test process's own connection
// right after a scan, when no new scan may come yet: they are held, not
// dropped, and come out in order once the next scan finds the
// connection; a connection of no process followed never comes out.
func TestTrackedHolds(t *testing.T) {
	// The server is another process, not followed (python3).
	srv := exec.Command("python3", "-c", "import socket,sys,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\nprint(s.getsockname()[1],flush=True)\nc=s.accept()\ntime.sleep(60)")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("python3: %v", err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	var port int
	if _, err := fmt.Fscan(out, &port); err != nil {
		t.Fatal(err)
	}
	self, err := procnet.Get(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	_, ino, err := procnet.NetNS(self.PID)
	if err != nil {
		t.Fatal(err)
	}
	a := &attacher{opt: Options{Rescan: time.Hour, Notice: func(string) {}}, names: map[uint32]string{}, attached: map[int]bool{},
		caps: map[uint64]*live.Capture{ino: nil}, nsOf: map[int]uint64{self.PID: ino}, socks: map[uint64]*sockets{}, verdicts: map[tuple]verdict{},
		scanGap: time.Hour} // no scan for unknown connections until the test says
	a.remember(self)
	a.scan() // the scan before the connection and its packets
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	remote := netip.MustParseAddrPort(c.RemoteAddr().String())
	src := &fakeSource{packets: [][]byte{
		segment(local, remote, 0x18, "first"),
		segment(netip.MustParseAddrPort("127.0.0.1:10"), netip.MustParseAddrPort("127.0.0.1:9"), 0x18, "not ours"),
		segment(remote, local, 0x18, "second"),
	}}
	tr := &tracked{a: a, src: src}
	if _, decided := a.decide(local, remote, false, time.Now()); decided {
		t.Fatal("the connection made after the last scan was decided before the next scan")
	}
	// The packets are held (the first two reads return none), then come
	// out once a scan may be made.
	for range 2 {
		if data, _, _, _ := tr.ReadPacket(); data != nil {
			t.Fatalf("a packet came out before its connection was decided: %q", data[40:])
		}
	}
	if len(tr.held) != 3 {
		t.Fatalf("%d packets held, want 3", len(tr.held))
	}
	a.scanGap = 0
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 2 {
		data, _, _, err := tr.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		if data != nil {
			got = append(got, string(data[40:]))
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %q", got)
		}
	}
	if got[0] != "first" || got[1] != "second" {
		t.Errorf("got %q, want the connection's two packets in order", got)
	}
	for range 5 {
		if data, _, _, _ := tr.ReadPacket(); data != nil {
			t.Errorf("a packet of no process followed came out: %q", data[40:])
		}
	}
}

// TestTrackedCloseLag: a FIN of the processes' connection, and what of it
// follows, is handed on closeLag after it came, behind it; other packets at
// once.
func TestTrackedCloseLag(t *testing.T) {
	c := netip.MustParseAddrPort("127.0.0.1:50000")
	s := netip.MustParseAddrPort("127.0.0.1:6443")
	ours := newTuple(c, s)
	a := &attacher{opt: Options{Rescan: time.Hour}, lastScan: time.Now(), scanGap: time.Hour,
		verdicts: map[tuple]verdict{ours: {ends: []end{{local: c}}}}, procs: []procnet.Process{{PID: os.Getpid()}}}
	src := &fakeSource{packets: [][]byte{
		segment(c, s, 0x18, "data"),
		segment(c, s, 0x11, "fin"),
		segment(s, c, 0x18, "after"),
	}}
	tr := &tracked{a: a, src: src}
	start := time.Now()
	var got []string
	for len(got) < 3 {
		data, _, _, err := tr.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		if data == nil {
			continue
		}
		got = append(got, string(data[40:]))
		if len(got) == 1 && time.Since(start) >= closeLag {
			t.Log("the first packet came late (a loaded machine)")
		}
		if len(got) == 2 && time.Since(start) < closeLag {
			t.Errorf("the FIN was handed on %v after it came, before closeLag (%v)", time.Since(start), closeLag)
		}
	}
	if got[0] != "data" || got[1] != "fin" || got[2] != "after" {
		t.Errorf("got %q, want data, fin, after", got)
	}
}
