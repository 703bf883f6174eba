// Package live captures packets as they travel, in pure Go: a Linux packet
// socket (AF_PACKET, packet(7)) with a TPACKET_V3 ring, through gopacket's
// afpacket package (cgo-free; pcapgo's EthernetHandle takes no "any" and
// buffers one MTU, too little for loopback's GRO frames), filtered in the
// kernel by a classic BPF program (filter.go). It is a packet source for
// pkg/pcap's ReadLive, as a capture file is for Read; kwatch pcap -i and
// kwatch attach use it. Capturing needs CAP_NET_RAW.
package live

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/afpacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"
)

// Options tune Open.
type Options struct {
	// Interface is the interface to capture on; "" or "any": every
	// interface of the network namespace.
	Interface string
	// NetNS is the path of the network namespace to capture in, such as
	// /proc/PID/ns/net for a process in a pod; "" is kwatch's own.
	NetNS string
	// Filter says which packets are kept (in the kernel).
	Filter Filter
	// Program, when set, is the kernel filter instead of Filter: an
	// eBPF socket filter (BPF_PROG_TYPE_SOCKET_FILTER, attached with
	// SO_ATTACH_BPF) for packets that start at their IP header, which
	// decides from BPF maps (pkg/sockowner's). Its packets are not checked
	// in Go again (Filter.Keeps): what came before it was attached is
	// handed on too. It must drop the outgoing copy of loopback packets
	// itself; the loopback interface must have index 1, as Linux gives
	// it in every network namespace (checked).
	Program *ebpf.Program
	// Poll is how long ReadPacket waits for a packet before it returns
	// none (an idle turn); 100 ms when 0.
	Poll time.Duration
	// RingBytes is the size of the ring the kernel fills, in bytes;
	// DefaultRingBytes when 0. Packets that come while it is full are
	// dropped by the kernel and counted (Stats).
	RingBytes int
}

// DefaultRingBytes is the ring's size when Options.RingBytes is 0: 64 MiB,
// 256 blocks (blockBytes), which hold 2.5 s and more of a stream below
// 25 MB/s (a 10 000 events/s watch of 1 KB events is about 12 MB/s), and
// 64 MiB of a faster one. The ring is the kernel's memory mapped into
// kwatch: all of it counts in kwatch's resident memory from the start.
const DefaultRingBytes = 64 << 20

// blockBytes is the size of one block of the TPACKET_V3 ring: SnapLen, so
// that a whole GRO frame fits in one. The kernel hands a block over when
// it is full or when the block timeout (10 ms) has passed with packets in
// it, so a slow stream fills each block only a little: the ring holds as
// many 10-20 ms of it as it has blocks, whatever their size. 1 MiB blocks
// made 64 of them in 64 MiB, 0.64 s of a 10 000 events/s watch stream;
// 256 KiB blocks make 128 in 32 MiB.
const blockBytes = SnapLen

// MinRingBytes is the smallest ring Open makes: 4 blocks.
const MinRingBytes = 4 * blockBytes

// Capture is a live capture on one interface (or all) of one network
// namespace. It is not safe for concurrent ReadPacket calls; SetFilter,
// Stats and Close may be called from another goroutine. Close waits for a
// ReadPacket under way (up to Options.Poll), since it unmaps the ring that
// ReadPacket reads.
type Capture struct {
	// readMu is held by a read (with its copy, for Merge) and by Close;
	// mu by SetFilter, Stats and Close. closed is set under both.
	readMu  sync.Mutex
	mu      sync.Mutex
	closed  bool
	tp      *afpacket.TPacket
	opt     Options
	loIndex int
	name    string
	// filter is the filter set last; ReadPacket checks every packet
	// against it too (Filter.Keeps): the socket receives from its
	// creation on, before its kernel filter is attached. fmu guards it.
	fmu    sync.Mutex
	filter Filter
}

// Open starts a capture. Packets come as their IP packets (a SOCK_DGRAM
// socket: no link-layer header, whatever the interface), so the link type
// is LINKTYPE_RAW. Errors: CAP_NET_RAW missing (ErrPermission), an
// interface or namespace that does not exist, a filter that does not
// compile.
func Open(opt Options) (*Capture, error) {
	if opt.Poll <= 0 {
		opt.Poll = 100 * time.Millisecond
	}
	if opt.RingBytes <= 0 {
		opt.RingBytes = DefaultRingBytes
	}
	iface := opt.Interface
	if iface == "any" {
		iface = ""
	}
	c := &Capture{opt: opt, name: opt.Interface}
	if c.name == "" {
		c.name = "any"
	}
	err := inNetNS(opt.NetNS, func() error {
		if lo, err := loopback(); err == nil {
			c.loIndex = lo
		}
		if iface != "" {
			if _, err := net.InterfaceByName(iface); err != nil {
				return fmt.Errorf("no interface named %s (ip link lists them; any is every interface)", iface)
			}
		}
		args := []any{afpacket.OptSocketType(afpacket.SocketDgram), afpacket.OptTPacketVersion(afpacket.TPacketVersion3),
			afpacket.OptFrameSize(SnapLen), afpacket.OptBlockSize(blockBytes), afpacket.OptNumBlocks(max(opt.RingBytes, MinRingBytes) / blockBytes),
			afpacket.OptPollTimeout(opt.Poll), afpacket.OptBlockTimeout(10 * time.Millisecond)}
		if iface != "" {
			args = append(args, afpacket.OptInterface(iface))
		}
		tp, err := afpacket.NewTPacket(args...)
		if err != nil {
			if errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission) {
				return fmt.Errorf("%w: a packet socket needs CAP_NET_RAW (run as root)", ErrPermission)
			}
			return err
		}
		c.tp = tp
		return nil
	})
	if err != nil {
		return nil, err
	}
	if opt.Program != nil {
		err = c.SetProgram(opt.Program)
	} else {
		err = c.SetFilter(opt.Filter)
	}
	if err != nil {
		c.tp.Close()
		return nil, err
	}
	if err := c.tp.InitSocketStats(); err != nil {
		c.tp.Close()
		return nil, err
	}
	return c, nil
}

// ErrPermission is wrapped by Open's error when kwatch may not open a
// packet socket (no CAP_NET_RAW).
var ErrPermission = errors.New("not permitted to capture packets")

// Name is the interface captured on, "any" for all.
func (c *Capture) Name() string { return c.name }

// SetFilter replaces the kernel filter; packets already in the ring were
// filtered by the one before.
func (c *Capture) SetFilter(f Filter) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("capture on %s: %w", c.name, os.ErrClosed)
	}
	lo := c.loIndex
	if c.opt.Interface != "" && c.opt.Interface != "any" && c.opt.Interface != "lo" {
		lo = 0 // no loopback packets on another interface
	}
	raw, err := Compile(f, lo)
	if err != nil {
		return err
	}
	c.fmu.Lock()
	c.filter = Filter{Ports: slices.Clone(f.Ports), SYN: f.SYN}
	c.fmu.Unlock()
	return c.tp.SetBPF(raw)
}

// SetProgram replaces the kernel filter by the eBPF socket filter p (see
// Options.Program); from then on ReadPacket checks no packet in Go. The
// error is for a loopback interface whose index is not 1, and the
// kernel's.
func (c *Capture) SetProgram(p *ebpf.Program) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("capture on %s: %w", c.name, os.ErrClosed)
	}
	if c.loIndex != 0 && c.loIndex != 1 {
		return fmt.Errorf("capture on %s: the loopback interface has index %d, not 1: the eBPF filter cannot tell its packets", c.name, c.loIndex)
	}
	if err := c.tp.SetEBPF(int32(p.FD())); err != nil {
		return fmt.Errorf("capture on %s: attaching the eBPF filter: %w", c.name, err)
	}
	c.fmu.Lock()
	c.filter = Filter{}
	c.fmu.Unlock()
	return nil
}

// ReadPacket returns the next packet (pkg/pcap's Packets): its IP packet,
// valid until the next call, and when it was captured. After Options.Poll
// with no packet it returns no bytes, no error and the time now. Every
// packet is checked against the filter in Go too (Filter.Keeps): the
// kernel put packets in the ring before the filter was set. After Close
// the error wraps os.ErrClosed.
func (c *Capture) ReadPacket() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	return c.read(false)
}

// read is ReadPacket; with copied the packet is copied out of the ring
// before a Close may unmap it.
func (c *Capture) read(copied bool) ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed {
		return nil, gopacket.CaptureInfo{}, layers.LinkTypeRaw, fmt.Errorf("capture on %s: %w", c.name, os.ErrClosed)
	}
	for {
		data, ci, err := c.tp.ZeroCopyReadPacketData()
		if errors.Is(err, afpacket.ErrTimeout) {
			return nil, gopacket.CaptureInfo{Timestamp: time.Now()}, layers.LinkTypeRaw, nil
		}
		if err != nil {
			return nil, ci, layers.LinkTypeRaw, err
		}
		c.fmu.Lock()
		keep := c.filter.Keeps(data)
		c.fmu.Unlock()
		if !keep {
			continue
		}
		if copied {
			data = append([]byte(nil), data...)
		}
		return data, ci, layers.LinkTypeRaw, nil
	}
}

// Stats returns the packets the kernel put in the ring and those it
// dropped because the ring was full, since Open (PACKET_STATISTICS).
func (c *Capture) Stats() (received, dropped uint64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, 0, fmt.Errorf("capture on %s: %w", c.name, os.ErrClosed)
	}
	_, v3, err := c.tp.SocketStats()
	if err != nil {
		return 0, 0, err
	}
	return uint64(v3.Packets()), uint64(v3.Drops()), nil
}

// Dropped returns the packets the kernel dropped since Open (Stats), 0
// when they cannot be read.
func (c *Capture) Dropped() uint64 {
	_, d, _ := c.Stats()
	return d
}

// Close ends the capture, once a ReadPacket under way has returned.
// Closing twice does nothing.
func (c *Capture) Close() {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.tp.Close()
	}
}

// loopback returns the index of the loopback interface of the current
// network namespace.
func loopback() (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			return i.Index, nil
		}
	}
	return 0, errors.New("no loopback interface")
}

// inNetNS runs f on an OS thread in the network namespace at path ("":
// the current one), then puts the thread back. A socket opened in f stays
// in that namespace (network_namespaces(7)).
func inNetNS(path string, f func() error) error {
	if path == "" {
		return f()
	}
	ns, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("network namespace: %w", err)
			return
		}
		defer self.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("network namespace %s: %w", path, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and ends with this goroutine: it
			// must not run other goroutines in the wrong namespace.
			errc <- errors.Join(ferr, fmt.Errorf("network namespace: back to kwatch's: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
