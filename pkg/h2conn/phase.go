package h2conn

// phase is what one direction of an HTTP/2 connection reads its next
// bytes as, or that it reads them no more. A client starts in
// phasePreface, a server in phaseFrames, both directions of a connection
// joined mid-connection (Options.Joined) in phaseSync; a direction changes
// phase only in enter.
//
// The HPACK decoder's state is not a phase: once it is out of step
// (direction.hpackBroken, RFC 7541 §2.3.2) frames and header blocks are
// still followed, in the phases below.
type phase uint8

const (
	// phasePreface: the client's connection preface, ClientPreface
	// (RFC 9113 §3.4), is still being matched.
	phasePreface phase = iota
	// phaseSync: a direction joined mid-connection holds its first bytes
	// (at most ScanBytes) until its FrameScan finds where its frames
	// start; the bytes before are the rest of a frame whose start was not
	// captured.
	phaseSync
	// phaseFrames: frames, each a 9-byte header and its payload (RFC 9113
	// §4.1), any type may come next.
	phaseFrames
	// phaseBlock: inside a header block: a HEADERS or PUSH_PROMISE
	// without END_HEADERS came, so the next frame should be a
	// CONTINUATION of the same stream (RFC 9113 §4.3, §6.10).
	phaseBlock
	// phaseDead: the direction's framing is lost (bytes missing, or no
	// preface): its bytes are counted, not decoded.
	phaseDead
	// phaseClosed: the direction's byte stream ended (CloseClient,
	// CloseServer), whether or not it was given up first.
	phaseClosed
)

// String names the phase for people (tests, debugging); no record carries
// it.
func (p phase) String() string {
	switch p {
	case phasePreface:
		return "reading the preface"
	case phaseSync:
		return "finding the first frame"
	case phaseFrames:
		return "reading frames"
	case phaseBlock:
		return "in a header block"
	case phaseDead:
		return "given up"
	case phaseClosed:
		return "closed"
	}
	return "phase?"
}

// enter moves the direction to phase next; it is the one place a
// direction's phase changes. A direction given up stays so until it
// closes, and a closed one stays closed (a peer's bad preface does not
// move it).
func (s *direction) enter(next phase) {
	if s.phase == phaseClosed || s.phase == phaseDead && next != phaseClosed {
		return
	}
	s.phase = next
}

// live says the direction's bytes are still decoded: neither given up nor
// closed.
func (s *direction) live() bool { return s.phase < phaseDead }
