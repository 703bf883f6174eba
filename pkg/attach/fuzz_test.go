package attach

import (
	"encoding/binary"
	"testing"
)

// FuzzPacketTuple: packetTuple reads any bytes a capture hands over
// (truncated, garbage, another protocol) without a panic, and the
// endpoints it gives come from an IPv4 or IPv6 TCP header within them.
func FuzzPacketTuple(f *testing.F) {
	v4 := make([]byte, 40)
	v4[0], v4[9] = 0x45, 6
	binary.BigEndian.PutUint16(v4[20:], 50000)
	binary.BigEndian.PutUint16(v4[22:], 6443)
	v4[33] = 0x02
	f.Add(v4)
	f.Add(v4[:33])
	opts := append([]byte{0x4f}, make([]byte, 80)...)
	opts[9] = 6
	f.Add(opts)
	f.Add([]byte{0x4f, 0, 0, 0, 0, 0, 0, 0, 0, 6})
	f.Add([]byte{0x41, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	v6 := make([]byte, 60)
	v6[0], v6[6] = 0x60, 6
	f.Add(v6)
	f.Add(v6[:53])
	f.Add([]byte{})
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, p []byte) {
		src, dst, _, ok := packetTuple(p)
		if !ok {
			return
		}
		if !src.IsValid() || !dst.IsValid() {
			t.Fatalf("endpoints %v %v", src, dst)
		}
		switch p[0] >> 4 {
		case 4:
			if ihl := int(p[0]&0x0f) * 4; ihl < 20 || len(p) < ihl+20-6 || p[9] != 6 {
				t.Fatalf("IPv4 header of %d bytes in %d, protocol %d, taken", ihl, len(p), p[9])
			}
		case 6:
			if len(p) < 54 || p[6] != 6 {
				t.Fatalf("IPv6 packet of %d bytes, next header %d, taken", len(p), p[6])
			}
		default:
			t.Fatalf("IP version %d taken", p[0]>>4)
		}
	})
}
