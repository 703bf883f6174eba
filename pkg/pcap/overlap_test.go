package pcap

import (
	"bytes"
	"testing"
)

// TestOverlapGrow sends 300 KiB in 1000-byte segments, so that the window
// grows several times, then retransmits earlier segments: identical bytes
// pass, a changed byte is found at its stream offset.
func TestOverlapGrow(t *testing.T) {
	var o overlapCheck
	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(i * 7 % 251)
	}
	const isn = 0xfffff000 // wraps the 32-bit sequence space on the way
	if _, ok := o.add(isn, true, nil); !ok {
		t.Fatal("SYN")
	}
	for off := 0; off < len(data); off += 1000 {
		end := min(off+1000, len(data))
		if at, ok := o.add(uint32(isn+1+off), false, data[off:end]); !ok {
			t.Fatalf("first copy at %d reported as differing at %d", off, at)
		}
	}
	if len(o.ring) != overlapMaxWindow {
		t.Fatalf("window %d bytes, want %d", len(o.ring), overlapMaxWindow)
	}
	// A retransmission inside the window, identical.
	off := len(data) - 100000
	if at, ok := o.add(uint32(isn+1+off), false, data[off:off+3000]); !ok {
		t.Fatalf("identical retransmission reported at %d", at)
	}
	// The same with one byte changed.
	changed := bytes.Clone(data[off : off+3000])
	changed[1234] ^= 0xff
	if at, ok := o.add(uint32(isn+1+off), false, changed); ok || at != int64(off+1234) {
		t.Fatalf("changed retransmission: ok=%v at %d, want offset %d", ok, at, off+1234)
	}
}
