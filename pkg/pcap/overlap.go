package pcap

import "bytes"

// Overlap window bounds, in bytes. The window grows from the minimum as a
// direction carries more bytes, so short connections stay small (a
// connection that sends one request costs 512 bytes).
const (
	overlapMinWindow = 512
	overlapMaxWindow = 256 << 10
)

// overlapBudget bounds the bytes of all overlap windows of one Read
// together: 64 MiB, 256 connections at the full window. Past it, windows
// stop growing, so that retransmissions are compared over fewer bytes
// rather than memory growing with the number of connections.
const overlapBudget = 64 << 20

// overlapCheck remembers the most recent bytes of one TCP direction, so that
// a retransmitted segment can be compared with the first copy. gopacket's
// reassembly splices overlapping data without saying whether the copies
// agreed; a difference means an endpoint may have seen other bytes than the
// capture shows (e.g. injected segments).
type overlapCheck struct {
	init      bool
	lastSeq   uint32
	lastRel   int64 // stream offset of lastSeq
	contig    int64 // bytes [validFrom, contig) are in ring
	validFrom int64
	ring      []byte
	// budget, shared by the windows of a Read, counts the bytes they
	// may still take; nil means no bound.
	budget *int64
}

// release gives the window's bytes back to the budget.
func (o *overlapCheck) release() {
	if o.budget != nil {
		*o.budget += int64(len(o.ring))
	}
	o.ring = nil
}

// rel converts a sequence number to a stream offset, following wrap-around
// of the 32-bit sequence space (RFC 9293 §3.4).
func (o *overlapCheck) rel(seq uint32) int64 {
	r := o.lastRel + int64(int32(seq-o.lastSeq))
	if r > o.lastRel {
		o.lastSeq, o.lastRel = seq, r
	}
	return r
}

// add records a segment. It returns ok=false and the stream offset of the
// first differing byte when payload overlaps earlier bytes with other
// content.
func (o *overlapCheck) add(seq uint32, syn bool, payload []byte) (int64, bool) {
	if syn {
		seq++ // the SYN occupies one sequence number (RFC 9293 §3.4)
	}
	if !o.init {
		o.init = true
		o.lastSeq = seq
	}
	if len(payload) == 0 {
		return 0, true
	}
	r := o.rel(seq)
	if r < 0 {
		return 0, true
	}
	end := r + int64(len(payload))
	n := int64(len(o.ring))
	lo, hi := max(r, o.validFrom, o.contig-n), min(end, o.contig)
	for x := lo; x < hi; {
		// Compare run by run up to the ring's wrap point.
		i := x % n
		k := min(hi-x, n-i)
		a, b := o.ring[i:i+k], payload[x-r:x-r+k]
		if !bytes.Equal(a, b) {
			for j := range a {
				if a[j] != b[j] {
					return x + int64(j), false
				}
			}
		}
		x += k
	}
	if r > o.contig {
		// A gap: bytes before r are unknown.
		o.validFrom, o.contig = r, r
	}
	if end <= o.contig {
		return 0, true
	}
	o.grow(end)
	n = int64(len(o.ring))
	if n == 0 {
		// No window (over the budget): nothing is known before end.
		o.validFrom, o.contig = end, end
		return 0, true
	}
	from := max(o.contig, end-n) // only the last n bytes fit
	for x := from; x < end; {
		i := x % n
		k := min(end-x, n-i)
		copy(o.ring[i:i+k], payload[x-r:x-r+k])
		x += k
	}
	o.contig = end
	return 0, true
}

// grow enlarges the ring, up to overlapMaxWindow, when the stream has
// carried more bytes than it holds.
func (o *overlapCheck) grow(end int64) {
	n := int64(len(o.ring))
	if n >= overlapMaxWindow || (n > 0 && end-o.validFrom <= n) {
		return
	}
	size := max(n*2, overlapMinWindow)
	for size < end-o.validFrom && size < overlapMaxWindow {
		size *= 2
	}
	size = min(size, overlapMaxWindow)
	if o.budget != nil {
		if *o.budget < size-n {
			return // over the budget: keep the window as it is
		}
		*o.budget -= size - n
	}
	ring := make([]byte, size)
	// Copy the kept bytes run by run, up to the wrap point of either ring.
	for x := max(o.validFrom, o.contig-n); x < o.contig; {
		i, j := x%n, x%size
		k := min(o.contig-x, n-i, size-j)
		copy(ring[j:j+k], o.ring[i:i+k])
		x += k
	}
	o.ring = ring
}
