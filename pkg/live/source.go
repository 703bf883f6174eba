package live

import (
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/kwatch/kwatch/pkg/pcapwriter"
)

// Source is a live packet source, as pkg/pcap's ReadLive reads it: a
// Capture, several merged (Merge), or one being recorded (Record).
type Source interface {
	// ReadPacket returns the next packet, valid until the next call; no
	// bytes and no error on an idle turn, with the time now.
	ReadPacket() (data []byte, ci gopacket.CaptureInfo, link layers.LinkType, err error)
}

// mergedQueue bounds the packets a Merge holds between its captures and its
// reader.
const mergedQueue = 256

// Merged is the Source of several captures (Merge), to which more can be
// added (Add).
type Merged struct {
	caps []*Capture
	in   chan mergedPacket
	poll time.Duration
	// reading counts the captures of caps read by goroutines of their
	// own (caps[:reading]); 0 while one capture is read directly.
	reading int
}

type mergedPacket struct {
	data []byte
	ci   gopacket.CaptureInfo
	err  error
}

// Merge returns the Source of the packets of every capture in caps, in the
// order they are read (captures of several network namespaces: kwatch
// attach to processes in pods). Each capture is read on a goroutine of
// its own, and its packets copied; a single one is read directly, until
// another is added. The first read error of any capture ends the Source
// with it; Close the captures to end it.
func Merge(caps ...*Capture) *Merged {
	m := &Merged{caps: caps, in: make(chan mergedPacket, mergedQueue), poll: 100 * time.Millisecond}
	if len(caps) > 1 {
		m.start()
	}
	return m
}

// Add adds a capture (of a network namespace met later: a process that
// started in a pod), read from the next ReadPacket on. It must be called
// from the goroutine that calls ReadPacket (a packet ReadPacket returned
// may still be in use: a capture read directly until now goes on a
// goroutine of its own only at the next ReadPacket).
func (m *Merged) Add(c *Capture) { m.caps = append(m.caps, c) }

// start reads each capture not read yet on a goroutine of its own.
func (m *Merged) start() {
	for _, c := range m.caps[m.reading:] {
		go func() {
			for {
				// Copied under the capture's lock: Close may unmap
				// the ring as soon as the read returns.
				data, ci, _, err := c.read(true)
				if err != nil {
					m.in <- mergedPacket{err: err}
					return
				}
				if data != nil {
					m.in <- mergedPacket{data: data, ci: ci}
				}
			}
		}()
	}
	m.reading = len(m.caps)
}

// Dropped sums the packets the kernels dropped of every capture.
func (m *Merged) Dropped() uint64 {
	var n uint64
	for _, c := range m.caps {
		n += c.Dropped()
	}
	return n
}

// ReadPacket returns the next packet of any of the captures.
func (m *Merged) ReadPacket() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	if m.reading == 0 && len(m.caps) == 1 {
		return m.caps[0].ReadPacket()
	}
	if m.reading < len(m.caps) {
		m.start()
	}
	t := time.NewTimer(m.poll)
	defer t.Stop()
	select {
	case p := <-m.in:
		return p.data, p.ci, layers.LinkTypeRaw, p.err
	case now := <-t.C:
		return nil, gopacket.CaptureInfo{Timestamp: now}, layers.LinkTypeRaw, nil
	}
}

// Recording is a Source whose packets are also written to a pcapng file,
// with the TLS secrets given to Secrets as Decryption Secrets Blocks.
type Recording struct {
	src   Source
	w     *pcapwriter.Writer
	mu    sync.Mutex
	held  []heldPacket
	bytes int
	lag   time.Duration
	err   error
}

type heldPacket struct {
	ci   gopacket.CaptureInfo
	data []byte
}

// RecordLag is how long a Recording holds packets before it writes them:
// a secret comes from its process a little after the packets that need it
// were captured (the ServerHello's flight is captured before the client
// derives its handshake secrets), and a reader that reads the file once
// (TShark) needs each secret before the records it decrypts.
const RecordLag = 500 * time.Millisecond

// maxHeldBytes bounds the packet bytes a Recording holds: past it the
// oldest are written at once.
const maxHeldBytes = 16 << 20

// Record returns src, with every packet read also written to w (made by
// pcapwriter.NewNgPackets with link type LINKTYPE_RAW) after RecordLag.
func Record(src Source, w *pcapwriter.Writer) *Recording {
	return &Recording{src: src, w: w, lag: RecordLag}
}

// Dropped is the packets the recorded Source's kernel dropped, when it
// counts them.
func (r *Recording) Dropped() uint64 {
	if d, ok := r.src.(interface{ Dropped() uint64 }); ok {
		return d.Dropped()
	}
	return 0
}

// ReadPacket reads the next packet of the Source recorded, and writes
// those held for RecordLag.
func (r *Recording) ReadPacket() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	data, ci, link, err := r.src.ReadPacket()
	r.mu.Lock()
	defer r.mu.Unlock()
	if data != nil {
		r.held = append(r.held, heldPacket{ci: ci, data: append([]byte(nil), data...)})
		r.bytes += len(data)
	}
	r.writeOlder(time.Now().Add(-r.lag))
	if data == nil && r.err == nil {
		r.err = r.w.Flush()
	}
	return data, ci, link, err
}

// writeOlder writes the packets captured before t, and the oldest past
// maxHeldBytes. r.mu is held.
func (r *Recording) writeOlder(t time.Time) {
	n := 0
	for n < len(r.held) && (r.held[n].ci.Timestamp.Before(t) || r.bytes > maxHeldBytes) {
		if r.err == nil {
			r.err = r.w.Packet(r.held[n].ci, r.held[n].data)
		}
		r.bytes -= len(r.held[n].data)
		r.held[n] = heldPacket{}
		n++
	}
	r.held = r.held[n:]
}

// Secrets writes TLS key log lines (RFC 9850) as a Decryption Secrets
// Block, ahead of the packets still held. It is safe to call from another
// goroutine than ReadPacket's.
func (r *Recording) Secrets(lines []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	_, r.err = r.w.Write(lines)
	return r.err
}

// Close writes the packets still held and flushes the file. The error is
// the recording's first write error.
func (r *Recording) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeOlder(time.Now().Add(time.Hour))
	if r.err == nil {
		r.err = r.w.Flush()
	}
	return r.err
}
