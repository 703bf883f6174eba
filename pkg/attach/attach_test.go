package attach

import (
	"encoding/binary"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/kwatch/kwatch/pkg/live"
	"github.com/kwatch/kwatch/pkg/procnet"
)

// synFlood is a live.Source whose every packet is the SYN of a new
// connection of some other process, one each millisecond.
type synFlood struct{ port uint16 }

func (s *synFlood) ReadPacket() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	time.Sleep(time.Millisecond)
	s.port++
	p := make([]byte, 40)
	p[0], p[9] = 0x45, 6
	copy(p[12:], []byte{127, 0, 0, 1})
	copy(p[16:], []byte{127, 0, 0, 1})
	binary.BigEndian.PutUint16(p[20:], 30000+s.port%20000)
	binary.BigEndian.PutUint16(p[22:], 6443)
	p[33] = 0x02
	return p, gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(p), Length: len(p)}, layers.LinkTypeRaw, nil
}

var _ live.Source = (*synFlood)(nil)

// TestEndsWhenAllExited: once every process attached to has exited, the
// run ends, even while SYNs of other processes' new connections (which
// the kernel filter keeps, and which each re-read the sockets) keep
// coming faster than the rescan interval.
func TestEndsWhenAllExited(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	gone := procnet.Process{PID: cmd.Process.Pid, Comm: "true"}
	a := &attacher{opt: Options{Rescan: 50 * time.Millisecond, Notice: func(string) {}}, names: map[uint32]string{}, attached: map[int]bool{}}
	a.remember(gone)
	a.caps, a.nsOf, a.socks, a.verdicts, a.open = map[uint64]*live.Capture{}, map[int]uint64{}, map[uint64]*sockets{}, map[tuple]verdict{}, map[tuple]bool{}
	a.lastScan = time.Now()
	src := &tracked{a: a, src: &synFlood{}}
	done := make(chan error, 1)
	go func() {
		for {
			if _, _, _, err := src.ReadPacket(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != io.EOF || !a.exited {
			t.Errorf("ended with %v, exited %v", err, a.exited)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("still reading 3 s after the only process attached to exited")
	}
}
