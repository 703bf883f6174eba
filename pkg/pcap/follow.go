package pcap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// FollowPoll is how often a Follow reader looks for new bytes at the end of
// the file.
const FollowPoll = 100 * time.Millisecond

// Follow returns a reader that reads r like `tail -f`: at the end of the
// file it waits for the writer (tcpdump -w FILE) to append more bytes, every
// FollowPoll, instead of returning io.EOF. It returns io.EOF once ctx is
// done, so that Read can flush what it has and finish.
//
// When r is a file (it has Stat) that becomes shorter than what was read, as
// when tcpdump is restarted on the same file, Read returns an error saying
// so: the bytes that follow belong to another capture.
func Follow(ctx context.Context, r io.Reader) io.Reader {
	return &follower{ctx: ctx, r: r}
}

type follower struct {
	ctx  context.Context
	r    io.Reader
	read int64
}

// Read reads what the file has, waiting for more at its end until the
// context ends (then io.EOF).
func (f *follower) Read(p []byte) (int, error) {
	for {
		n, err := f.r.Read(p)
		f.read += int64(n)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		if st, ok := f.r.(interface{ Stat() (os.FileInfo, error) }); ok {
			if fi, err := st.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() < f.read {
				return 0, fmt.Errorf("the file shrank to %d bytes after %d were read (was tcpdump restarted on it?); run kwatch again to read the new capture", fi.Size(), f.read)
			}
		}
		select {
		case <-f.ctx.Done():
			return 0, io.EOF
		case <-time.After(FollowPoll):
		}
	}
}

// WaitForFile waits until path exists, looking every FollowPoll, as `tail
// -F` does for a file tcpdump -w has not created yet. It returns nil once
// the file exists, ctx's error once ctx is done, and any error of looking
// other than the file not existing.
func WaitForFile(ctx context.Context, path string) error {
	for {
		_, err := os.Stat(path)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(FollowPoll):
		}
	}
}
