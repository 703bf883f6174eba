package live

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// TestCompile runs the compiled filters in x/net/bpf's virtual machine
// over hand-made IPv4 and IPv6 packets. (The VM has no ancillary loads:
// the loopback rule is tested live, TestLoopbackOnce.)
func TestCompile(t *testing.T) {
	v4 := func(proto byte, frag uint16, ihl int, sport, dport uint16) []byte {
		p := make([]byte, ihl*4+20)
		p[0] = 0x40 | byte(ihl)
		binary.BigEndian.PutUint16(p[6:], frag)
		p[9] = proto
		binary.BigEndian.PutUint16(p[ihl*4:], sport)
		binary.BigEndian.PutUint16(p[ihl*4+2:], dport)
		p[ihl*4+13] = 0x10 // ACK
		return p
	}
	v6 := func(next byte, sport, dport uint16) []byte {
		p := make([]byte, 60)
		p[0] = 0x60
		p[6] = next
		binary.BigEndian.PutUint16(p[40:], sport)
		binary.BigEndian.PutUint16(p[42:], dport)
		p[53] = 0x10
		return p
	}
	syn := func(p []byte, off int) []byte { p[off] = 0x02; return p }
	for _, tc := range []struct {
		name   string
		f      Filter
		packet []byte
		keep   bool
	}{
		{"v4 dst port", Filter{Ports: []uint16{6443, 8001}}, v4(6, 0, 5, 50000, 8001), true},
		{"v4 src port", Filter{Ports: []uint16{6443}}, v4(6, 0, 5, 6443, 50000), true},
		{"v4 options", Filter{Ports: []uint16{6443}}, v4(6, 0, 8, 50000, 6443), true},
		{"v4 other port", Filter{Ports: []uint16{6443}}, v4(6, 0, 5, 50000, 443), false},
		{"v4 udp", Filter{Ports: []uint16{6443}}, v4(17, 0, 5, 50000, 6443), false},
		{"v4 later fragment", Filter{}, v4(6, 0x0010, 5, 50000, 6443), false},
		{"v4 any tcp", Filter{}, v4(6, 0x4000, 5, 1, 2), true},
		{"v6 port", Filter{Ports: []uint16{6443}}, v6(6, 6443, 50000), true},
		{"v6 other", Filter{Ports: []uint16{6443}}, v6(6, 1, 2), false},
		{"v6 extension header", Filter{}, v6(0, 6443, 50000), false},
		{"not ip", Filter{}, []byte{0x00, 1, 2, 3}, false},
		{"v4 SYN of another port", Filter{Ports: []uint16{6443}, SYN: true}, syn(v4(6, 0, 6, 50000, 443), 24+13), true},
		{"v4 ACK of another port", Filter{Ports: []uint16{6443}, SYN: true}, v4(6, 0, 6, 50000, 443), false},
		{"v4 SYN without the rule", Filter{Ports: []uint16{6443}}, syn(v4(6, 0, 5, 50000, 443), 20+13), false},
		{"v6 SYN of another port", Filter{Ports: []uint16{6443}, SYN: true}, syn(v6(6, 50000, 443), 53), true},
		{"v6 ACK of another port", Filter{Ports: []uint16{6443}, SYN: true}, v6(6, 50000, 443), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := Compile(tc.f, 0)
			if err != nil {
				t.Fatal(err)
			}
			ins, ok := bpf.Disassemble(raw)
			if !ok {
				t.Fatal("does not disassemble")
			}
			vm, err := bpf.NewVM(ins)
			if err != nil {
				t.Fatal(err)
			}
			n, err := vm.Run(tc.packet)
			if err != nil {
				t.Fatal(err)
			}
			if keep := n > 0; keep != tc.keep {
				t.Errorf("kept %v (returned %d), want %v", keep, n, tc.keep)
			}
			if tc.keep && n != SnapLen {
				t.Errorf("snap length %d, want %d", n, SnapLen)
			}
		})
	}
	many := make([]uint16, MaxPorts+1)
	for i := range many {
		many[i] = uint16(i + 1)
	}
	if _, err := Compile(Filter{Ports: many}, 1); err == nil {
		t.Errorf("%d ports compiled", len(many))
	}
	if _, err := Compile(Filter{Ports: many[:MaxPorts], SYN: true}, 1); err != nil {
		t.Errorf("%d ports: %v", MaxPorts, err)
	}
}
