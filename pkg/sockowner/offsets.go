package sockowner

// Where the programs find what they read in the kernel's structs: offsets
// taken from the running kernel's BTF at load time, never assumed, since
// they move between releases and configurations.

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// field is one struct member's place: its offset from the start of the
// struct it was looked up in, and its size, in bytes.
type field struct {
	off, size uint32
}

// offsets are the struct members the programs read, from kernel BTF.
type offsets struct {
	// struct sock_common (include/net/sock.h), at the start of struct
	// sock: the IPv4 addresses, the ports (skc_dport in network order,
	// skc_num in the host's), the address family, the network namespace
	// (skc_net, a possible_net_t whose net is a struct net *), the IPv6
	// addresses (also set, v4-mapped, for an IPv4 connection of an IPv6
	// socket).
	daddr, rcvSaddr, dport, num, family, net, v6daddr, v6rcvSaddr field
	// commonSize is how much of struct sock_common the programs copy: up
	// to the end of the last member above.
	commonSize uint32
	// struct inet_sock's inet_sport: the local port in network order,
	// which stays set when the port is given back as the socket closes
	// (__inet_put_port zeroes skc_num before the state becomes TCP_CLOSE).
	sport field
	// struct net's ns.inum: the network namespace's inode number, as
	// stat(2) of /proc/PID/ns/net gives it.
	netInum field
	// The executable of the current task: task_struct.mm,
	// mm_struct.exe_file, file.f_inode, inode.i_ino, inode.i_sb,
	// super_block.s_dev.
	taskMM, mmExeFile, fileInode, inodeIno, inodeSb, sbDev field
	// struct bpf_sock_ops, the sock_ops program's context
	// (include/uapi/linux/bpf.h): op, and sk, the socket.
	opsOp, opsSk field
}

// maxCommon bounds offsets.commonSize: the programs copy that much of
// struct sock_common to their stack, which is 512 bytes in all.
const maxCommon = 160

// errNoBTF is wrapped when the kernel's BTF cannot be read.
var errNoBTF = errors.New("no kernel BTF (/sys/kernel/btf/vmlinux: CONFIG_DEBUG_INFO_BTF)")

// loadOffsets reads the offsets from the running kernel's BTF
// (/sys/kernel/btf/vmlinux, through cilium/ebpf's btf package).
func loadOffsets() (*offsets, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoBTF, err)
	}
	return offsetsFrom(spec)
}

// offsetsFrom reads the offsets from spec, a kernel's BTF. The error names
// the first member it lacks.
func offsetsFrom(spec *btf.Spec) (*offsets, error) {
	o := &offsets{}
	var errs []error
	get := func(dst *field, typ string, path ...string) {
		f, err := memberOf(spec, typ, path...)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = f
	}
	get(&o.daddr, "sock_common", "skc_daddr")
	get(&o.rcvSaddr, "sock_common", "skc_rcv_saddr")
	get(&o.dport, "sock_common", "skc_dport")
	get(&o.num, "sock_common", "skc_num")
	get(&o.family, "sock_common", "skc_family")
	get(&o.net, "sock_common", "skc_net", "net")
	get(&o.v6daddr, "sock_common", "skc_v6_daddr")
	get(&o.v6rcvSaddr, "sock_common", "skc_v6_rcv_saddr")
	get(&o.sport, "inet_sock", "inet_sport")
	get(&o.netInum, "net", "ns", "inum")
	get(&o.taskMM, "task_struct", "mm")
	get(&o.mmExeFile, "mm_struct", "exe_file")
	get(&o.fileInode, "file", "f_inode")
	get(&o.inodeIno, "inode", "i_ino")
	get(&o.inodeSb, "inode", "i_sb")
	get(&o.sbDev, "super_block", "s_dev")
	get(&o.opsOp, "bpf_sock_ops", "op")
	get(&o.opsSk, "bpf_sock_ops", "sk")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// The sizes the programs load them with.
	for _, c := range []struct {
		name string
		f    field
		size uint32
	}{
		{"sock_common.skc_daddr", o.daddr, 4}, {"sock_common.skc_rcv_saddr", o.rcvSaddr, 4},
		{"sock_common.skc_dport", o.dport, 2}, {"sock_common.skc_num", o.num, 2},
		{"sock_common.skc_family", o.family, 2}, {"sock_common.skc_net.net", o.net, 8},
		{"sock_common.skc_v6_daddr", o.v6daddr, 16}, {"sock_common.skc_v6_rcv_saddr", o.v6rcvSaddr, 16},
		{"inet_sock.inet_sport", o.sport, 2}, {"net.ns.inum", o.netInum, 4}, {"task_struct.mm", o.taskMM, 8}, {"mm_struct.exe_file", o.mmExeFile, 8},
		{"file.f_inode", o.fileInode, 8}, {"inode.i_ino", o.inodeIno, 8}, {"inode.i_sb", o.inodeSb, 8},
		{"super_block.s_dev", o.sbDev, 4}, {"bpf_sock_ops.op", o.opsOp, 4}, {"bpf_sock_ops.sk", o.opsSk, 8},
	} {
		if c.f.size != c.size {
			return nil, fmt.Errorf("kernel BTF: %s is %d bytes, want %d", c.name, c.f.size, c.size)
		}
	}
	for _, f := range []field{o.daddr, o.rcvSaddr, o.dport, o.num, o.family, o.net, o.v6daddr, o.v6rcvSaddr} {
		o.commonSize = max(o.commonSize, f.off+f.size)
	}
	o.commonSize = (o.commonSize + 7) &^ 7
	if o.commonSize > maxCommon {
		return nil, fmt.Errorf("kernel BTF: struct sock_common's members end at byte %d, past the %d the programs copy", o.commonSize, maxCommon)
	}
	// The programs load the IPv6 addresses a 32-bit word at a time, and
	// the pointers a 64-bit word at a time, from a copy on the stack
	// (aligned to 8): their offsets must be so aligned.
	if o.v6daddr.off%4 != 0 || o.v6rcvSaddr.off%4 != 0 || o.net.off%8 != 0 || o.daddr.off%4 != 0 || o.rcvSaddr.off%4 != 0 ||
		o.dport.off%2 != 0 || o.num.off%2 != 0 || o.family.off%2 != 0 {
		return nil, errors.New("kernel BTF: struct sock_common's members are not aligned as expected")
	}
	return o, nil
}

// memberOf returns the place of the member at path in struct (or union)
// typ, members of anonymous structs and unions included, as C reaches them
// by name (sock_common's skc_daddr sits in an anonymous struct in an
// anonymous union). Bitfields are refused.
func memberOf(spec *btf.Spec, typ string, path ...string) (field, error) {
	var t btf.Type
	var err error
	if t, err = spec.AnyTypeByName(typ); err != nil {
		return field{}, fmt.Errorf("kernel BTF: struct %s: %w", typ, err)
	}
	var off uint32
	for _, name := range path {
		o, m, ok := lookupMember(t, name)
		if !ok {
			return field{}, fmt.Errorf("kernel BTF: struct %s has no member %s", typ, name)
		}
		if m.BitfieldSize != 0 || m.Offset%8 != 0 {
			return field{}, fmt.Errorf("kernel BTF: %s.%s is a bitfield", typ, name)
		}
		off += o
		t = m.Type
	}
	size, err := btf.Sizeof(t)
	if err != nil {
		return field{}, fmt.Errorf("kernel BTF: the size of %s.%v: %w", typ, path, err)
	}
	return field{off: off, size: uint32(size)}, nil
}

// lookupMember finds the member name of the struct or union t, searching
// anonymous members too; off is its offset in bytes from t's start.
func lookupMember(t btf.Type, name string) (off uint32, m btf.Member, ok bool) {
	var members []btf.Member
	switch v := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = v.Members
	case *btf.Union:
		members = v.Members
	default:
		return 0, btf.Member{}, false
	}
	for _, mem := range members {
		if mem.Name == name {
			return uint32(mem.Offset) / 8, mem, true
		}
	}
	for _, mem := range members {
		if mem.Name != "" {
			continue
		}
		if o, found, ok := lookupMember(mem.Type, name); ok {
			return uint32(mem.Offset)/8 + o, found, true
		}
	}
	return 0, btf.Member{}, false
}
