package keylog

import "net/netip"

// Joined is what a TLS connection whose handshake was not seen needs to be
// decrypted from the middle on (kwatch attach, from the process's memory):
// its version and cipher suite, each side's current traffic secret (TLS
// 1.3) or the master secret and randoms (TLS 1.2), and the
// sequence number of the next record each side sends (RFC 8446 §5.3:
// sequence numbers count the records protected with the current traffic
// secret, from 0).
type Joined struct {
	// Client and Server are the connection's endpoints: the traffic
	// secret of the bytes an endpoint sends is its side's.
	Client, Server netip.AddrPort
	// Version is the TLS version (0x0304: TLS 1.3); Suite the cipher
	// suite's IANA number.
	Version, Suite uint16
	// ClientTraffic and ServerTraffic are the current application traffic
	// secrets (the suite's hash length: 32 or 48 bytes).
	ClientTraffic, ServerTraffic []byte
	// Master, ClientRandom and ServerRandom are, for TLS 1.2 (no traffic
	// secrets), the master secret (48 bytes) and the hellos' randoms that
	// the key block is derived from (RFC 5246 §6.3).
	Master                     []byte
	ClientRandom, ServerRandom [32]byte
	// ClientSeq and ServerSeq are the sequence numbers of the next
	// record each side sends, when they were read: records captured
	// before have lower ones, records sent meanwhile higher ones.
	ClientSeq, ServerSeq uint64
	// Source names where they come from, e.g. "the memory of
	// kube-controller-manager (pid 812)".
	Source string
}

// maxJoined bounds the joined connections a Log holds; past it the memory
// is emptied (new ones are read again from their processes).
const maxJoined = 1 << 14

// AddJoined keeps the state of a connection to be joined mid-way, by its
// endpoints (either way round). A later call for the same connection
// replaces it.
func (l *Log) AddJoined(j Joined) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.joined == nil || len(l.joined) >= maxJoined {
		l.joined = map[[2]netip.AddrPort]*Joined{}
	}
	cp := j
	cp.ClientTraffic = append([]byte(nil), j.ClientTraffic...)
	cp.ServerTraffic = append([]byte(nil), j.ServerTraffic...)
	cp.Master = append([]byte(nil), j.Master...)
	l.joined[joinKey(j.Client, j.Server)] = &cp
	l.given = true
	l.gen++
}

// LookupJoined returns a copy of the state AddJoined kept for the
// connection between a and b (either way round), and whether there is one.
func (l *Log) LookupJoined(a, b netip.AddrPort) (*Joined, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j, ok := l.joined[joinKey(a, b)]
	if !ok {
		return nil, false
	}
	cp := *j
	return &cp, true
}

func joinKey(a, b netip.AddrPort) [2]netip.AddrPort {
	if a.Compare(b) > 0 {
		a, b = b, a
	}
	return [2]netip.AddrPort{a, b}
}
