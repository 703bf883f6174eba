package live

import (
	"encoding/binary"
	"slices"
	"testing"

	"golang.org/x/net/bpf"
)

// FuzzFilter runs compiled filters (up to MaxPorts ports, duplicates and
// port 0 among them, with and without the SYN rule) in x/net/bpf's VM over
// any bytes: it never fails, and what it keeps is a well-formed IPv4 or
// IPv6 TCP segment start (a header length of at least 20 bytes, no later
// fragment) of a port kept, or a SYN under the SYN rule.
func FuzzFilter(f *testing.F) {
	v4 := make([]byte, 40)
	v4[0], v4[9] = 0x45, 6
	binary.BigEndian.PutUint16(v4[20:], 50000)
	binary.BigEndian.PutUint16(v4[22:], 6443)
	v6 := make([]byte, 60)
	v6[0], v6[6] = 0x60, 6
	binary.BigEndian.PutUint16(v6[40:], 6443)
	for _, p := range [][]byte{v4, v4[:21], v4[:23], v6, v6[:41], v6[:53], {0x40}, {0x41, 0, 0, 0, 0x19, 0x2b, 0, 0, 0, 6}, {}} {
		f.Add([]byte{0x19, 0x2b, 0, 0, 0x19, 0x2b}, false, p)
		f.Add([]byte{}, true, p)
	}
	f.Fuzz(func(t *testing.T, portBytes []byte, syn bool, p []byte) {
		var ports []uint16
		for i := 0; i+1 < len(portBytes) && len(ports) < MaxPorts; i += 2 {
			ports = append(ports, binary.BigEndian.Uint16(portBytes[i:]))
		}
		raw, err := Compile(Filter{Ports: ports, SYN: syn}, 0)
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
		n, err := vm.Run(p)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		var tcp []byte
		switch p[0] >> 4 {
		case 4:
			ihl := int(p[0]&0x0f) * 4
			if ihl < 20 || len(p) < 10 || p[9] != 6 || binary.BigEndian.Uint16(p[6:])&0x1fff != 0 {
				t.Fatalf("kept an IPv4 packet with a %d-byte header, protocol %d: %x", ihl, p[9], p)
			}
			tcp = p[min(ihl, len(p)):]
		case 6:
			if p[6] != 6 {
				t.Fatalf("kept an IPv6 packet of next header %d", p[6])
			}
			tcp = p[min(40, len(p)):]
		default:
			t.Fatalf("kept a packet of IP version %d", p[0]>>4)
		}
		if len(ports) == 0 {
			return
		}
		if syn && len(tcp) > 13 && tcp[13]&0x02 != 0 {
			return
		}
		// The source port is tested first: a segment cut after it is
		// kept by it alone.
		src := len(tcp) >= 2 && slices.Contains(ports, binary.BigEndian.Uint16(tcp))
		dst := len(tcp) >= 4 && slices.Contains(ports, binary.BigEndian.Uint16(tcp[2:]))
		if !src && !dst {
			t.Fatalf("kept a segment of no port kept (%v): %x", ports, p)
		}
	})
}
