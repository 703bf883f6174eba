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

// TestKeepsAgreesWithCompile runs Filter.Keeps and the compiled program
// over the same packets: they agree on every one.
func TestKeepsAgreesWithCompile(t *testing.T) {
	filters := []Filter{{}, {Ports: []uint16{6443}}, {Ports: []uint16{6443, 8001}, SYN: true}}
	var packets [][]byte
	for _, ver := range []byte{0x45, 0x46, 0x4f, 0x60, 0x00} {
		for _, proto := range []byte{6, 17} {
			for _, flags := range []byte{0x02, 0x10, 0x12} {
				for _, ports := range [][2]uint16{{50000, 6443}, {8001, 1}, {1, 2}} {
					p := make([]byte, 80)
					p[0] = ver
					if ver == 0x60 {
						p[6] = proto
						binary.BigEndian.PutUint16(p[40:], ports[0])
						binary.BigEndian.PutUint16(p[42:], ports[1])
						p[53] = flags
					} else {
						p[9] = proto
						ihl := int(ver&0x0f) * 4
						binary.BigEndian.PutUint16(p[ihl:], ports[0])
						binary.BigEndian.PutUint16(p[ihl+2:], ports[1])
						p[ihl+13] = flags
					}
					packets = append(packets, p, p[:30], p[:50])
				}
			}
		}
	}
	for _, f := range filters {
		raw, err := Compile(f, 0)
		if err != nil {
			t.Fatal(err)
		}
		ins, _ := bpf.Disassemble(raw)
		vm, err := bpf.NewVM(ins)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range packets {
			n, _ := vm.Run(p)
			if keep := n > 0; keep != f.Keeps(p) {
				t.Errorf("filter %+v, packet % x: the program keeps it %v, Keeps says %v", f, p[:min(len(p), 24)], keep, !keep)
			}
		}
	}
}
