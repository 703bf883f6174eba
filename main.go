// Command kwatch shows Kubernetes list-watch traffic as it travels on the
// wire: every watch event with the HTTP/1.1 chunks that carried it, from a
// packet capture (kwatch pcap) or a live watch (kwatch stream).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kwatch/kwatch/cmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first Ctrl-C ends kwatch with its summary; a second one, should
	// that take long, ends it at once (the default action).
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cmd.Execute(ctx, cmd.SystemStreams(), os.Args[1:])
	stop()
	os.Exit(code)
}
