// Package gotls takes TLS secrets from running Go programs: an eBPF uprobe
// on crypto/tls.(*Config).writeKeyLog (FuncName), which crypto/tls calls
// with every secret of every handshake, client and server side, whether or
// not the program set Config.KeyLogWriter. Each call becomes a Secret, whose
// KeyLogLine is the line the program would have written to a key log (NSS
// key log format), ready for pkg/keylog.
//
// Find locates the function in an executable, stripped or not (symbol
// table, else Go's function table .gopclntab). Open loads the BPF program
// (written with cilium/ebpf's asm package; no C compiler involved) and its
// maps; Probe.Attach places the uprobe on one executable, for one process or
// for all; Probe.Read returns the secrets as they come.
//
// A connection whose handshake came before the probe is read from the
// process instead. Probe.AttachConns places a second probe on
// crypto/tls.(*Conn).Read and (*Conn).Write, which reports the *Conn each
// time a connection is used (at most once a second each: ConnUse, from
// Probe.ReadConn); ReadConnState then reads that Conn's state from the
// process's memory (process_vm_readv(2)): for TLS 1.3 each direction's
// current traffic secret and record sequence number (crypto/tls's
// halfConn), for TLS 1.2 the master secret and randoms (from the closure
// of Conn.ekm) and the sequence numbers, the role, and the TCP socket
// under it, each value checked. Where the fields are comes from the
// program's DWARF, or, for a stripped program built by Go 1.21 to 1.27,
// from its own runtime type descriptors found through its module data,
// with section headers or none (LayoutFor); for a stripped program of
// another release, from kwatch's own crypto/tls when it is kwatch's
// release, else there is no layout, and nothing is guessed.
//
// Only entry probes are used: a return probe (uretprobe) rewrites the return
// address on the stack, and Go moves goroutine stacks, which crashes the
// program (golang/go#22008).
//
// Secrets are never logged or printed by this package.
package gotls

import (
	"encoding/hex"
)

// Secret is one call of writeKeyLog: one secret of one TLS connection.
type Secret struct {
	// PID and TID are the process (thread group) and the thread that made
	// the call, as bpf_get_current_pid_tgid gives them: in the initial PID
	// namespace, so for a process in a container they are its host IDs.
	PID, TID uint32
	// Label is the key log label (crypto/tls/common.go's keyLog*
	// constants): CLIENT_RANDOM for a TLS 1.2 master secret, or
	// CLIENT_HANDSHAKE_TRAFFIC_SECRET, SERVER_HANDSHAKE_TRAFFIC_SECRET,
	// CLIENT_TRAFFIC_SECRET_0 and SERVER_TRAFFIC_SECRET_0 for TLS 1.3. It
	// holds only A-Z, 0-9 and '_', at most 64 bytes.
	Label string
	// ClientRandom is the connection's client random (32 bytes, from the
	// ClientHello), which names the connection in a key log.
	ClientRandom [32]byte
	// Secret is the secret itself: 1-64 bytes (32 or 48 from Go).
	Secret []byte
}

// KeyLogLine returns the secret as a line of the NSS key log format
// (RFC 9850; what Config.KeyLogWriter receives, crypto/tls/common.go
// writeKeyLog): "LABEL <client random, 64 hex digits> <secret in hex>\n",
// lower-case hex. keylog.Log.Add reads it.
func (s Secret) KeyLogLine() []byte {
	b := make([]byte, 0, len(s.Label)+1+2*len(s.ClientRandom)+1+2*len(s.Secret)+1)
	b = append(b, s.Label...)
	b = append(b, ' ')
	b = hex.AppendEncode(b, s.ClientRandom[:])
	b = append(b, ' ')
	b = hex.AppendEncode(b, s.Secret)
	return append(b, '\n')
}
