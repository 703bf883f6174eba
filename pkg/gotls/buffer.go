package gotls

// Reading one of the probe's buffers in the kernel: a BPF ring buffer, or
// the perf event array used instead on kernels without ring buffers.

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
)

// buffer is the reading end of one BPF buffer: ring or perf is set.
type buffer struct {
	ring     *ringbuf.Reader
	perf     *perf.Reader
	deadline atomic.Int64 // SetDeadline's, in Unix nanoseconds; 0 for none
	what     string       // what the records are, for errors: "secrets"
}

// read returns the next record's bytes, looking at the buffer at least
// every pollInterval until the deadline.
func (b *buffer) read() ([]byte, error) {
	for {
		tick := time.Now().Add(pollInterval)
		d := b.deadline.Load()
		if d != 0 && d < tick.UnixNano() {
			tick = time.Unix(0, d)
		}
		var raw []byte
		var err error
		if b.ring != nil {
			b.ring.SetDeadline(tick)
			var rec ringbuf.Record
			rec, err = b.ring.Read()
			raw = rec.RawSample
		} else {
			b.perf.SetDeadline(tick)
			var rec perf.Record
			rec, err = b.perf.Read()
			// rec.LostSamples is not counted again: the program
			// already counted each failed bpf_perf_event_output.
			if err == nil && (rec.LostSamples > 0 || len(rec.RawSample) == 0) {
				continue
			}
			raw = rec.RawSample
		}
		switch {
		case err == nil:
			return raw, nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			if d := b.deadline.Load(); d == 0 || time.Now().UnixNano() < d {
				continue
			}
			return nil, fmt.Errorf("reading %s: %w", b.what, err)
		case errors.Is(err, os.ErrClosed):
			return nil, fmt.Errorf("reading %s: the probe is closed: %w", b.what, os.ErrClosed)
		}
		return nil, fmt.Errorf("reading %s: %w", b.what, err)
	}
}

// setDeadline is SetDeadline for this buffer.
func (b *buffer) setDeadline(t time.Time) { b.deadline.Store(deadlineNanos(t)) }

// deadlineNanos is t as buffer.deadline holds it: Unix nanoseconds, 0 for
// the zero time (no deadline).
func deadlineNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}

// close interrupts a blocked read; later ones return os.ErrClosed.
func (b *buffer) close() error {
	if b.ring != nil {
		return b.ring.Close()
	}
	if b.perf != nil {
		return b.perf.Close()
	}
	return nil
}
