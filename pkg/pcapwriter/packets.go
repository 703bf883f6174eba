package pcapwriter

import (
	"io"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// NewNgPackets writes a pcapng Section Header Block and one interface of
// link type link to w (draft-ietf-opsawg-pcapng §4.1, §4.2), for packets
// as a live capture took them (Packet) and TLS key logs (Write): kwatch
// attach --record. The error is the header's write error.
func NewNgPackets(w io.Writer, link layers.LinkType, snapLen int) (*Writer, error) {
	nw, err := pcapgo.NewNgWriterInterface(w, pcapgo.NgInterface{Name: "kwatch", LinkType: link, SnapLength: uint32(snapLen),
		TimestampResolution: 9}, pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "kwatch"}})
	if err != nil {
		return nil, err
	}
	if err := nw.Flush(); err != nil {
		return nil, err
	}
	return &Writer{w: nw, ng: nw, buf: gopacket.NewSerializeBuffer()}, nil
}

// Packet writes one captured packet as an Enhanced Packet Block
// (draft-ietf-opsawg-pcapng §4.3) of the file's one interface, buffered
// until Flush or the next Write. The error is the first write error, also
// kept for Err.
func (w *Writer) Packet(ci gopacket.CaptureInfo, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	ci.InterfaceIndex = 0
	ci.AncillaryData = nil
	if ci.Timestamp.IsZero() {
		ci.Timestamp = time.Now()
	}
	if err := w.w.WritePacket(ci, data); err != nil {
		w.err = err
		return err
	}
	return nil
}

// Flush writes what is buffered of a pcapng file to its writer. The
// error is the first write error, also kept for Err.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.ng == nil {
		return w.err
	}
	if err := w.ng.Flush(); err != nil {
		w.err = err
	}
	return w.err
}
