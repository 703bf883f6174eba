package pcap

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/gopacket/gopacket/reassembly"

	"github.com/kwatch/kwatch/pkg/phrase"
)

// Endpoint is an address with an optional port (kwatch pcap --client,
// --server): it matches an endpoint of that address, and of that port
// unless Port is 0.
type Endpoint struct {
	Addr netip.Addr
	Port uint16
}

// ParseEndpoint parses ADDR or ADDR:PORT: an IPv4 address, an IPv6 address
// (in brackets when a port follows, as in [::1]:6443), with a port from 1 to
// 65535.
func ParseEndpoint(s string) (Endpoint, error) {
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil && !strings.Contains(s, "]:") {
		return Endpoint{Addr: a.Unmap()}, nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%q is not ADDR or ADDR:PORT (an IP address, e.g. 10.0.0.5, 10.0.0.5:6443 or [::1]:6443)", s)
	}
	if ap.Port() == 0 {
		return Endpoint{}, fmt.Errorf("%q: the port must be between 1 and 65535 (leave it out for every port)", s)
	}
	return Endpoint{Addr: ap.Addr().Unmap(), Port: ap.Port()}, nil
}

// IsZero reports whether e is unset (matches every endpoint).
func (e Endpoint) IsZero() bool { return !e.Addr.IsValid() }

// String returns ADDR or ADDR:PORT.
func (e Endpoint) String() string {
	if e.Port == 0 {
		return e.Addr.String()
	}
	return netip.AddrPortFrom(e.Addr, e.Port).String()
}

// Match reports whether a is the endpoint e names; an unset e matches all.
func (e Endpoint) Match(a netip.AddrPort) bool {
	return e.IsZero() || (a.Addr() == e.Addr && (e.Port == 0 || a.Port() == e.Port))
}

// filtered reports whether the options keep only some connections.
func (o Options) filtered() bool {
	return o.userFiltered() || len(o.SkipPorts) > 0
}

// userFiltered reports whether the filters a user gives (Port, Client,
// Server, ClientProcess) keep only some connections: those they leave out
// are counted (Stats.LeftOut, the summary's LeftOut), SkipPorts' are not.
func (o Options) userFiltered() bool {
	return o.Port != 0 || !o.Client.IsZero() || !o.Server.IsZero() || o.ClientProcess != ""
}

// skipped reports whether a packet between a and b is of a connection
// SkipPorts leaves out.
func (o Options) skipped(a, b netip.AddrPort) bool {
	return slices.Contains(o.SkipPorts, a.Port()) || slices.Contains(o.SkipPorts, b.Port())
}

// mayMatch reports whether a packet between a and b may belong to a
// connection the filters keep: --port on either side, --client and
// --server each on one side (which side is which is decided with the
// connection, roles).
func (o Options) mayMatch(a, b netip.AddrPort) bool {
	if o.Port != 0 && a.Port() != o.Port && b.Port() != o.Port {
		return false
	}
	return o.Client.Match(a) && o.Server.Match(b) || o.Client.Match(b) && o.Server.Match(a)
}

// keeps reports whether the filters keep a connection from client to
// server.
func (o Options) keeps(client, server netip.AddrPort) bool {
	return o.Client.Match(client) && o.Server.Match(server)
}

// ephemeralMin is where the ephemeral port range starts (Linux's default
// net.ipv4.ip_local_port_range, 32768-60999; IANA's is 49152-65535): a port
// below it is taken for a listening one.
const ephemeralMin = 32768

// maxListeners bounds reader.listeners; past it the set is emptied.
const maxListeners = 4096

// roleBy says how a connection's client was told from its server.
type roleBy int

const (
	// byBytes: the SYN, or the first bytes (a request line, a status
	// line, the HTTP/2 preface, a TLS ClientHello or ServerHello).
	byBytes roleBy = iota
	// byPort: a listening endpoint seen before, the ports, or --server
	// or --port between two ephemeral ports.
	byPort
	// guessed: none of those told: the lower of two ephemeral ports.
	guessed
)

// sentByClient tells from the first bytes a direction sent whether that
// side is the client (client true) or the server (ok true either way); ok
// is false when the bytes do not say (TLS application data, HTTP/2 frames,
// the middle of a body).
func sentByClient(data []byte) (client, ok bool) {
	switch {
	case bytes.HasPrefix(data, []byte("HTTP/")):
		return false, true
	case isRequestStart(data), bytes.HasPrefix(data, []byte("PRI * HTTP/2.0\r\n")):
		return true, true
	case len(data) >= 6 && data[0] == 0x16 && data[1] == 0x03:
		// A TLS handshake record (RFC 8446 §5.1) whose first message
		// is a ClientHello (1) or a ServerHello (2), §4.
		switch data[5] {
		case 1:
			return true, true
		case 2:
			return false, true
		}
	}
	return false, false
}

// decideRoles decides which side of a connection whose SYN was not
// captured is the client, from the first bytes data that direction dir
// sent (none for a gap or a problem before any), else from the endpoints
// seen listening in the capture, else from the ports: the lower port
// listens when it is below the ephemeral range; between two ephemeral
// ports, the one --server or --port names, else the lower, a guess.
func (s *stream) decideRoles(dir reassembly.TCPFlowDirection, data []byte) roleBy {
	if client, ok := sentByClient(data); ok {
		s.clientDir = dir
		if !client {
			s.clientDir = dir.Reverse()
		}
		return byBytes
	}
	// a sent the capture's first packet of the connection, b received it.
	a := endpoint(s.net.Src().Raw(), s.tcp.Src().Raw())
	b := endpoint(s.net.Dst().Raw(), s.tcp.Dst().Raw())
	aServes := func(yes bool) roleBy {
		s.clientDir = reassembly.TCPDirClientToServer
		if yes {
			s.clientDir = reassembly.TCPDirServerToClient
		}
		return byPort
	}
	if la, lb := s.rd.listeners[a], s.rd.listeners[b]; la != lb {
		return aServes(la)
	}
	if lo := min(a.Port(), b.Port()); lo < ephemeralMin && a.Port() != b.Port() {
		return aServes(a.Port() == lo)
	}
	// Both ports are ephemeral: the side --server or --port names.
	o := s.rd.opt
	for _, e := range []Endpoint{o.Server, {Port: o.Port}} {
		if e.IsZero() && e.Port == 0 {
			continue
		}
		if ma, mb := e.matchPort(a), e.matchPort(b); ma != mb {
			return aServes(ma)
		}
	}
	aServes(a.Port() < b.Port())
	return guessed
}

// matchPort is Match for an Endpoint that may give a port alone (--port:
// Addr unset).
func (e Endpoint) matchPort(a netip.AddrPort) bool {
	if !e.Addr.IsValid() {
		return a.Port() == e.Port
	}
	return e.Match(a)
}

// listening remembers that server listens (a SYN went to it, or a
// connection's bytes showed it the server).
func (rd *reader) listening(server netip.AddrPort) {
	if rd.listeners == nil || len(rd.listeners) >= maxListeners {
		rd.listeners = map[netip.AddrPort]bool{}
	}
	rd.listeners[server] = true
}

// guessedText is what the no-SYN note adds when which side is the client
// could not be decided: the side taken for it.
func guessedText(client netip.AddrPort) string {
	return "; which side is the client is not known (neither side's first bytes say, and both ports are ephemeral): " +
		client.String() + " is taken for it, the side of the higher port"
}

// byPackets lists m's keys by their counts of one, many, most first, then
// by name: "127.0.0.1:6443 (120 packets), 10.0.0.5 (3 packets)".
func byPackets[K comparable](m map[K]int64, name func(K) string, one, many string) string {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return name(keys[i]) < name(keys[j])
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = name(k) + " (" + phrase.Count(int(m[k]), one, many) + ")"
	}
	return strings.Join(parts, ", ")
}
