package gotls

// An executable read where it lies: mapped read-only (mmap(2)) instead of
// copied to the heap. kube-apiserver's function table alone is tens of
// MiB; read with (*elf.Section).Data it was copied (twice over, as
// internal/saferio grows its buffer), once for each of Find, AttachConns
// and LayoutFor: about 350 MB allocated for one attach, a peak RSS near
// 300 MB, where a node agent runs under a pod's memory limit. Mapped pages
// are the page cache's, counted only while kwatch reads them and given
// back when the mapping goes.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"syscall"
)

// mappedFile is a file mapped read-only, shared with the page cache
// (MAP_SHARED, PROT_READ: kwatch never writes it). A file that shrinks
// while it is mapped makes a read past its new end fault (SIGBUS): the
// functions that read one call readMapped, which turns such a fault into
// an error.
type mappedFile struct {
	f    *os.File
	fi   os.FileInfo
	data []byte // nil for an empty file
}

// openMapped opens and maps the file at path, which must be a regular
// file (else an error wrapping ErrNotELF). It is opened without waiting
// (O_NONBLOCK): opening a named pipe for reading waits for a writer, and
// the path comes from the process attached to or its user. The caller
// closes it.
func openMapped(path string) (*mappedFile, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w: a %s, not a regular file", path, ErrNotELF, fileKind(fi.Mode()))
	}
	m := &mappedFile{f: f, fi: fi}
	if n := fi.Size(); n > 0 && int64(int(n)) == n {
		data, err := syscall.Mmap(int(f.Fd()), 0, int(n), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: mapping it to read: %w", path, err)
		}
		m.data = data
	}
	return m, nil
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// Close unmaps and closes the file.
func (m *mappedFile) Close() error {
	var err error
	if m.data != nil {
		err = syscall.Munmap(m.data)
		m.data = nil
	}
	return errors.Join(err, m.f.Close())
}

// ReadAt reads from the mapping (io.ReaderAt), or from the file itself
// when it is not mapped (an empty file).
func (m *mappedFile) ReadAt(p []byte, off int64) (int, error) {
	if m.data == nil {
		return m.f.ReadAt(p, off)
	}
	if off < 0 || off > int64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(p, m.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// slice returns the n bytes at offset off of the mapping, without copying
// them; false when they lie past its end or the file is not mapped.
func (m *mappedFile) slice(off, n uint64) ([]byte, bool) {
	if m.data == nil || off > uint64(len(m.data)) || n > uint64(len(m.data))-off {
		return nil, false
	}
	return m.data[off : off+n : off+n], true
}

// readMapped runs read, which reads a mapped file, and returns its error,
// or, when reading faulted (the file shrank since it was mapped: a
// rebuild writing it in place), an error that says so and names path.
func readMapped(path string, read func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if f, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("%s: the file changed while kwatch read it (a fault at %#x): try again", path, f.Addr())
				return
			}
			panic(r)
		}
	}()
	return read()
}
