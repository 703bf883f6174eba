package tlsconn

// phase is where one direction of a TLS connection is: what protects its
// records, or that it is no longer read. A direction starts in phaseClear
// and changes phase only in enter.
//
// What is not a phase stays a field of its own, since it can hold in any
// phase: direction.resync (a gap took the record framing; the search for
// the next record goes on under the phase's keys), direction.hsLost (the
// handshake's messages are not read any more), and the one-record flags
// direction.switchApp and direction.update (after this record, the
// application keys or their next generation).
type phase uint8

const (
	// phaseClear: records are in the clear (RFC 8446 §5.1, RFC 5246
	// §6.2.1): the hellos, and a TLS 1.2 direction until its
	// ChangeCipherSpec.
	phaseClear phase = iota
	// phaseProtected: records are protected, under keys known or still
	// to come. TLS 1.3: the handshake after the ServerHello, under the
	// handshake traffic keys (RFC 8446 §2, §7.3). TLS 1.2: everything
	// after ChangeCipherSpec (RFC 5246 §7.1), under the key block's keys
	// (§6.3); a TLS 1.2 direction stays here.
	phaseProtected
	// phaseTrial: TLS 1.3 without the handshake traffic secret in the key
	// log: protected handshake records are skipped until one opens under
	// the application traffic keys at sequence number 0 (RFC 8446 §5.3,
	// §7.3), the first after the handshake.
	phaseTrial
	// phaseApp: TLS 1.3 after the direction's Finished (RFC 8446 §4.4.4):
	// application traffic keys; a KeyUpdate (§4.6.3) moves to their next
	// generation within this phase.
	phaseApp
	// phaseDead: given up: the direction's bytes are counted, not read
	// (a problem, or the connection's note, said why).
	phaseDead
	// phaseClosed: the direction's byte stream ended (CloseClient,
	// CloseServer), whether or not it was given up first.
	phaseClosed
)

// String names the phase for people (tests, debugging); no record carries
// it.
func (p phase) String() string {
	switch p {
	case phaseClear:
		return "clear handshake"
	case phaseProtected:
		return "protected records"
	case phaseTrial:
		return "trial decryption"
	case phaseApp:
		return "application data"
	case phaseDead:
		return "given up"
	case phaseClosed:
		return "closed"
	}
	return "phase?"
}

// enter moves the direction to phase next; it is the one place a
// direction's phase changes. Phases go forward only: a direction given up
// stays so until it closes, and a closed one stays closed (the other
// direction's ServerHello, or the connection given up after the close,
// does not move it).
func (h *direction) enter(next phase) {
	if h.phase == phaseClosed || h.phase == phaseDead && next != phaseClosed {
		return
	}
	h.phase = next
}

// live says the direction's bytes are still read: neither given up nor
// closed.
func (h *direction) live() bool { return h.phase < phaseDead }

// protected says the direction's records are protected (TLS 1.2 after
// ChangeCipherSpec, TLS 1.3 after the ServerHello); meaningful while live.
func (h *direction) protected() bool { return h.phase != phaseClear }
