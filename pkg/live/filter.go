package live

import (
	"encoding/binary"
	"fmt"
	"slices"

	"golang.org/x/net/bpf"
)

// Filter says which packets a Capture keeps. The kernel applies it (a
// classic BPF socket filter, compiled by Compile), so that what is left out
// costs no copy into the ring.
type Filter struct {
	// Ports keeps the TCP segments with either port among these; none
	// keeps every TCP segment. At most MaxPorts.
	Ports []uint16
	// SYN also keeps every segment with SYN set (RFC 9293 §3.1), whatever
	// its ports: the first packet of every new connection, so that a
	// connection to a port not in Ports yet is known from its start.
	SYN bool
}

// MaxPorts bounds Filter.Ports: a classic BPF jump reaches at most 255
// instructions on.
const MaxPorts = 32

// SnapLen is the most bytes of one packet a Capture keeps: a whole
// GRO/TSO frame of loopback (MTU 65536) or of a NIC (64 KiB), with room.
const SnapLen = 256 << 10

// Packet types of a packet socket (linux/if_packet.h, sll_pkttype).
const (
	packetHost     = 0
	packetOutgoing = 4
)

// asm builds a classic BPF program with named jump targets.
type asm struct {
	ins    []bpf.Instruction
	labels map[string]int
	jumps  []jumpFix
}

// jumpFix is a jump whose targets are labels, resolved by done.
type jumpFix struct {
	at          int
	true, false string // targets; false is "" for an unconditional jump
}

func (a *asm) add(in ...bpf.Instruction) { a.ins = append(a.ins, in...) }

func (a *asm) label(name string) { a.labels[name] = len(a.ins) }

// jumpIf adds a conditional jump to label t when cond holds, else to f
// ("" for the next instruction).
func (a *asm) jumpIf(cond bpf.JumpTest, val uint32, t, f string) {
	a.jumps = append(a.jumps, jumpFix{at: len(a.ins), true: t, false: f})
	a.ins = append(a.ins, bpf.JumpIf{Cond: cond, Val: val})
}

// jump adds an unconditional jump to label t.
func (a *asm) jump(t string) {
	a.jumps = append(a.jumps, jumpFix{at: len(a.ins), true: t})
	a.ins = append(a.ins, bpf.Jump{})
}

// done resolves the jumps and assembles the program.
func (a *asm) done() ([]bpf.RawInstruction, error) {
	skip := func(from int, label string) (int, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		if !ok || to <= from {
			return 0, fmt.Errorf("filter: bad jump to %q", label)
		}
		return to - from - 1, nil
	}
	for _, j := range a.jumps {
		t, err := skip(j.at, j.true)
		if err != nil {
			return nil, err
		}
		switch in := a.ins[j.at].(type) {
		case bpf.Jump:
			in.Skip = uint32(t)
			a.ins[j.at] = in
		case bpf.JumpIf:
			f, err := skip(j.at, j.false)
			if err != nil {
				return nil, err
			}
			if t > 255 || f > 255 {
				return nil, fmt.Errorf("filter: a jump of %d instructions is too long for classic BPF", max(t, f))
			}
			in.SkipTrue, in.SkipFalse = uint8(t), uint8(f)
			a.ins[j.at] = in
		}
	}
	return bpf.Assemble(a.ins)
}

// Compile returns the classic BPF program (Linux socket filter, as
// SO_ATTACH_FILTER takes it) of f, for packets that start at their IP
// header (a SOCK_DGRAM packet socket). loIndex, when not 0, is the
// loopback interface's index: the copies of its packets that a packet
// socket sees as they are sent (packet type OUTGOING) are dropped, since
// each is seen again as it is received (HOST), as libpcap does for lo and
// "any". IPv4 fragments after the first, IPv4 headers shorter than 20
// bytes, IPv6 packets with extension headers and everything not TCP are
// dropped. The error is for more than
// MaxPorts ports.
func Compile(f Filter, loIndex int) ([]bpf.RawInstruction, error) {
	ports := slices.Clone(f.Ports)
	slices.Sort(ports)
	ports = slices.Compact(ports)
	if len(ports) > MaxPorts {
		return nil, fmt.Errorf("filter: %d ports, at most %d", len(ports), MaxPorts)
	}
	a := &asm{labels: map[string]int{}}
	if loIndex > 0 {
		a.add(bpf.LoadExtension{Num: bpf.ExtInterfaceIndex})
		a.jumpIf(bpf.JumpNotEqual, uint32(loIndex), "ip", "")
		a.add(bpf.LoadExtension{Num: bpf.ExtType})
		a.jumpIf(bpf.JumpEqual, packetOutgoing, "reject", "")
	}
	a.label("ip")
	a.add(bpf.LoadAbsolute{Off: 0, Size: 1}, bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4})
	a.jumpIf(bpf.JumpEqual, 4, "v4", "")
	a.jumpIf(bpf.JumpEqual, 6, "v6", "reject")
	// ports2 tests the ports loaded by src and dst, and the TCP flags
	// loaded by flags.
	ports2 := func(src, dst, flags bpf.Instruction) {
		if len(ports) == 0 {
			a.jump("accept")
			return
		}
		if f.SYN {
			a.add(flags)
			a.jumpIf(bpf.JumpBitsSet, 0x02, "accept", "")
		}
		for _, in := range []bpf.Instruction{src, dst} {
			a.add(in)
			for _, p := range ports {
				a.jumpIf(bpf.JumpEqual, uint32(p), "accept", "")
			}
		}
		a.jump("reject")
	}
	// IPv4 (RFC 791): protocol at 9, fragment offset in 6-7, header
	// length in the low nibble of 0.
	a.label("v4")
	a.add(bpf.LoadAbsolute{Off: 9, Size: 1})
	a.jumpIf(bpf.JumpNotEqual, 6, "reject", "")
	a.add(bpf.LoadAbsolute{Off: 6, Size: 2})
	a.jumpIf(bpf.JumpBitsSet, 0x1fff, "reject", "")
	// X = the header length; under 20 bytes the packet is not IPv4 (the
	// ports would be read from its own header).
	a.add(bpf.LoadMemShift{Off: 0}, bpf.TXA{})
	a.jumpIf(bpf.JumpLessThan, 20, "reject", "")
	ports2(bpf.LoadIndirect{Off: 0, Size: 2}, bpf.LoadIndirect{Off: 2, Size: 2}, bpf.LoadIndirect{Off: 13, Size: 1})
	// IPv6 (RFC 8200): next header at 6, TCP right after the 40 bytes.
	a.label("v6")
	a.add(bpf.LoadAbsolute{Off: 6, Size: 1})
	a.jumpIf(bpf.JumpNotEqual, 6, "reject", "")
	ports2(bpf.LoadAbsolute{Off: 40, Size: 2}, bpf.LoadAbsolute{Off: 42, Size: 2}, bpf.LoadAbsolute{Off: 53, Size: 1})
	a.label("accept")
	a.add(bpf.RetConstant{Val: SnapLen})
	a.label("reject")
	a.add(bpf.RetConstant{Val: 0})
	return a.done()
}

// Keeps reports whether f keeps the IP packet p, as the program Compile
// makes decides it (but for the loopback rule, which needs the packet
// type): the same test in Go, load by load (a load past the packet's end
// drops it, as in the kernel), for the packets a socket received before
// its kernel filter was attached, or under the filter it replaced.
func (f Filter) Keeps(p []byte) bool {
	if len(p) < 1 {
		return false
	}
	var tcp int // where the TCP header starts
	switch p[0] >> 4 {
	case 4:
		if len(p) < 10 || p[9] != 6 || binary.BigEndian.Uint16(p[6:])&0x1fff != 0 {
			return false
		}
		tcp = int(p[0]&0x0f) * 4
	case 6:
		if len(p) < 7 || p[6] != 6 {
			return false
		}
		tcp = 40
	default:
		return false
	}
	if len(f.Ports) == 0 {
		return true
	}
	if f.SYN {
		if len(p) < tcp+14 {
			return false
		}
		if p[tcp+13]&0x02 != 0 {
			return true
		}
	}
	if len(p) < tcp+2 {
		return false
	}
	if slices.Contains(f.Ports, binary.BigEndian.Uint16(p[tcp:])) {
		return true
	}
	return len(p) >= tcp+4 && slices.Contains(f.Ports, binary.BigEndian.Uint16(p[tcp+2:]))
}
