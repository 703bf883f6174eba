package sockowner

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Kind says what an Event reports.
type Kind uint8

// The kinds of Event.
const (
	// Connect: a followed process connected (its SYN is about to leave).
	Connect Kind = 1 + iota
	// Accept: a connection to a followed process's listening socket was
	// established (its handshake completed, in no process's context: PID
	// is the listening process's, Comm empty).
	Accept
	// Listen: a followed process started to listen.
	Listen
	// Close: a connection of the connections map closed (TCP_CLOSE).
	Close
	// Unlisten: a followed process's listening socket closed.
	Unlisten
	// Peer: a process that is not followed connected to a port a
	// followed process listens on (in any network namespace): the client
	// of a followed server, named.
	Peer
)

func (k Kind) String() string {
	switch k {
	case Connect:
		return "connect"
	case Accept:
		return "accept"
	case Listen:
		return "listen"
	case Close:
		return "close"
	case Unlisten:
		return "unlisten"
	case Peer:
		return "peer"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// Event is one record of the programs.
type Event struct {
	Kind Kind
	// PID is the process (thread group ID, as the kernel's initial PID
	// namespace numbers it): the one that connected or listened; for
	// Accept the listening one; for Close and Unlisten the one the
	// connection or listener was kept for. TID is the thread (0 for
	// Accept, Close and Unlisten).
	PID, TID uint32
	// Comm is the thread's command name (at most 15 bytes: TASK_COMM_LEN),
	// "" for Accept, Close and Unlisten (which come in no process's
	// context).
	Comm string
	// NetNS is the inode number of the socket's network namespace, as
	// stat(2) of /proc/PID/ns/net gives it.
	NetNS uint64
	// Local and Remote are the socket's endpoints (the listening one
	// only for Listen and Unlisten: Remote is then the zero value's
	// address, port 0); an IPv4 connection of an IPv6 socket has its IPv4
	// addresses (unmapped).
	Local, Remote netip.AddrPort
	// ByExe says that this process was followed for its executable
	// (FollowExe) from this event on: a process not seen before.
	ByExe bool
	// Client and Server say, for Close, whether the connection was kept
	// as a followed process's connect or accept.
	Client, Server bool
}

// decode reads a record the programs wrote.
func decode(b []byte) (Event, error) {
	if len(b) < recordSize {
		return Event{}, fmt.Errorf("record of %d bytes, want %d", len(b), recordSize)
	}
	bo := binary.NativeEndian
	k := Kind(b[evKind])
	if k < Connect || k > Peer {
		return Event{}, fmt.Errorf("record of kind %d", k)
	}
	pidTGID := bo.Uint64(b[evPIDTGID:])
	e := Event{Kind: k, PID: uint32(pidTGID >> 32), TID: uint32(pidTGID), NetNS: uint64(bo.Uint32(b[evNetNS:]))}
	comm := b[evComm : evComm+16]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	e.Comm = string(comm)
	flags := b[evFlags]
	if k == Close {
		e.Client, e.Server = flags&connClient != 0, flags&connServer != 0
	} else {
		e.ByExe = flags&1 != 0
	}
	local := netip.AddrFrom16([16]byte(b[evLocal : evLocal+16])).Unmap()
	remote := netip.AddrFrom16([16]byte(b[evRemote : evRemote+16])).Unmap()
	e.Local = netip.AddrPortFrom(local, binary.BigEndian.Uint16(b[evLPort:]))
	e.Remote = netip.AddrPortFrom(remote, binary.BigEndian.Uint16(b[evRPort:]))
	return e, nil
}

// connKey is the connections map's key of the direction src → dst in
// network namespace netns.
func connKey(netns uint64, src, dst netip.AddrPort) [keySize]byte {
	var k [keySize]byte
	binary.NativeEndian.PutUint32(k[kNetNS:], uint32(netns))
	binary.BigEndian.PutUint16(k[kSPort:], src.Port())
	binary.BigEndian.PutUint16(k[kDPort:], dst.Port())
	s, d := src.Addr().As16(), dst.Addr().As16()
	copy(k[kSrc:], s[:])
	copy(k[kDst:], d[:])
	return k
}

// portKey is the ports map's key of port in network namespace netns (0:
// any).
func portKey(netns uint64, port uint16) [portKeySize]byte {
	var k [portKeySize]byte
	binary.NativeEndian.PutUint32(k[0:], uint32(netns))
	binary.BigEndian.PutUint16(k[4:], port)
	return k
}

// connValue is a connections map value.
type connValue struct {
	TGID   uint32
	Flags  uint32
	Closed uint64
}
