package pcap

import (
	"context"
	"io"
	"time"
)

// FollowPoll is how often a Follow reader looks for new bytes at the end of
// the file.
const FollowPoll = 100 * time.Millisecond

// Follow returns a reader that reads r like `tail -f`: at the end of the
// file it waits for the writer (tcpdump -w FILE) to append more bytes, every
// FollowPoll, instead of returning io.EOF. It returns io.EOF once ctx is
// done, so that Read can flush what it has and finish.
func Follow(ctx context.Context, r io.Reader) io.Reader {
	return &follower{ctx: ctx, r: r}
}

type follower struct {
	ctx context.Context
	r   io.Reader
}

// Read reads what the file has, waiting for more at its end until the
// context ends (then io.EOF).
func (f *follower) Read(p []byte) (int, error) {
	for {
		n, err := f.r.Read(p)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		select {
		case <-f.ctx.Done():
			return 0, io.EOF
		case <-time.After(FollowPoll):
		}
	}
}
