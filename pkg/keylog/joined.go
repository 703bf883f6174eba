package keylog

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
)

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
	l.addJoined(j)
}

// addJoined is AddJoined with l.mu held.
func (l *Log) addJoined(j Joined) {
	if l.joined == nil || len(l.joined) >= maxJoined {
		l.joined = map[[2]netip.AddrPort]*Joined{}
	}
	cp := j
	cp.ClientTraffic = append([]byte(nil), j.ClientTraffic...)
	cp.ServerTraffic = append([]byte(nil), j.ServerTraffic...)
	cp.Master = append([]byte(nil), j.Master...)
	l.joined[joinKey(j.Client, j.Server)] = &cp
	if l.stage != nil {
		delete(l.stage.told, joinKey(j.Client, j.Server))
	}
	l.given = true
	l.gen++
}

// LookupJoined returns a copy of the state AddJoined kept for the
// connection between a and b (either way round), and whether there is one.
// With SetStaging, the first lookup that finds a state gives its line to
// StageOptions.Admitted.
func (l *Log) LookupJoined(a, b netip.AddrPort) (*Joined, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j, ok := l.joined[joinKey(a, b)]
	if !ok {
		return nil, false
	}
	l.tellJoined(j)
	cp := *j
	return &cp, true
}

// parseEnds reads the client and server endpoints (ADDR:PORT) of a kwatch
// comment line of kind ("kwatch-joined", "kwatch-process").
func parseEnds(kind string, client, server []byte) (netip.AddrPort, netip.AddrPort, error) {
	c, err := netip.ParseAddrPort(string(client))
	if err != nil {
		return c, c, fmt.Errorf("%s client: %v", kind, err)
	}
	s, err := netip.ParseAddrPort(string(server))
	if err != nil {
		return c, s, fmt.Errorf("%s server: %v", kind, err)
	}
	return c, s, nil
}

func joinKey(a, b netip.AddrPort) [2]netip.AddrPort {
	if a.Compare(b) > 0 {
		a, b = b, a
	}
	return [2]netip.AddrPort{a, b}
}

// JoinedPrefix starts the key log comment line that carries a Joined state
// (Joined.Line): a comment to every other reader of key logs (NSS's format
// has "#" comments), read back by kwatch.
const JoinedPrefix = "# kwatch-joined v1 "

// Line returns j as one key log comment line, LF-terminated, for a
// recording's Decryption Secrets Block (kwatch attach --record): a key log
// names a connection by its client random, which a connection joined
// mid-way never showed, so the state goes by the connection's endpoints:
// "# kwatch-joined v1 CLIENT SERVER VERSION SUITE CLIENT_SEQ SERVER_SEQ
// CLIENT_TRAFFIC SERVER_TRAFFIC MASTER CLIENT_RANDOM SERVER_RANDOM", the
// version and suite in hex, sequence numbers in decimal, secrets and
// randoms in hex ("-" when there is none). Source is not written.
func (j Joined) Line() []byte {
	hx := func(b []byte) string {
		if len(b) == 0 {
			return "-"
		}
		return hex.EncodeToString(b)
	}
	cr, sr := "-", "-"
	if len(j.Master) > 0 {
		cr, sr = hex.EncodeToString(j.ClientRandom[:]), hex.EncodeToString(j.ServerRandom[:])
	}
	return fmt.Appendf(nil, "%s%s %s %04x %04x %d %d %s %s %s %s %s\n", JoinedPrefix, j.Client, j.Server, j.Version, j.Suite,
		j.ClientSeq, j.ServerSeq, hx(j.ClientTraffic), hx(j.ServerTraffic), hx(j.Master), cr, sr)
}

// parseJoined reads a line Joined.Line wrote (without its LF); the
// state's Source names source, where the line was read.
func parseJoined(line []byte, source string) (Joined, error) {
	f := bytes.Fields(bytes.TrimPrefix(line, []byte(JoinedPrefix)))
	if len(f) != 11 {
		return Joined{}, fmt.Errorf("kwatch-joined line of %d fields, want 11", len(f))
	}
	var j Joined
	var err error
	if j.Client, j.Server, err = parseEnds("kwatch-joined", f[0], f[1]); err != nil {
		return Joined{}, err
	}
	v, err1 := strconv.ParseUint(string(f[2]), 16, 16)
	s, err2 := strconv.ParseUint(string(f[3]), 16, 16)
	cs, err3 := strconv.ParseUint(string(f[4]), 10, 64)
	ss, err4 := strconv.ParseUint(string(f[5]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return Joined{}, fmt.Errorf("kwatch-joined version, suite or sequence numbers do not parse")
	}
	j.Version, j.Suite, j.ClientSeq, j.ServerSeq = uint16(v), uint16(s), cs, ss
	// The secrets and randoms, in hex or "-" for none.
	var hexes [5][]byte
	for i := range hexes {
		if string(f[6+i]) == "-" {
			continue
		}
		b, err := hex.DecodeString(string(f[6+i]))
		if err != nil || len(b) > maxSecretBytes {
			return Joined{}, fmt.Errorf("kwatch-joined secret is not hex of at most %d bytes", maxSecretBytes)
		}
		hexes[i] = b
	}
	j.ClientTraffic, j.ServerTraffic, j.Master = hexes[0], hexes[1], hexes[2]
	cr, sr := hexes[3], hexes[4]
	if len(cr) != 0 && len(cr) != 32 || len(sr) != 0 && len(sr) != 32 {
		return Joined{}, fmt.Errorf("kwatch-joined randoms are not 32 bytes")
	}
	copy(j.ClientRandom[:], cr)
	copy(j.ServerRandom[:], sr)
	j.Source = "kwatch attach's recording of it (" + source + ")"
	return j, nil
}
