// Package browser starts the headless chromium that kwatch's report tests
// and bench/openreport open reports in, through chromedp (the DevTools
// protocol).
package browser

import (
	"context"
	"errors"
	"os/exec"
	"sync"

	"github.com/chromedp/chromedp"
)

// ErrNoChromium says that no chromium was found on PATH.
var ErrNoChromium = errors.New("no chromium to open the report in: apt-get install chromium (.ci/run installs it)")

// New returns a chromedp context whose first action starts chromium
// headless (Debian's chromium, chromium-browser or google-chrome, the first
// found on PATH) with a window of width × height pixels, and the function
// that stops it.
func New(parent context.Context, width, height int) (context.Context, context.CancelFunc, error) {
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		return nil, nil, ErrNoChromium
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(width, height))
	actx, cancelA := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	return ctx, func() { cancelC(); cancelA() }, nil
}

// Problems subscribes to the console of ctx's page (ctx has run once) and
// returns a function that lists, so far, every uncaught exception, console
// error and warning, and browser log error, as "type: text".
func Problems(ctx context.Context) func() []string {
	var mu sync.Mutex
	var got []string
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				mu.Lock()
				got = append(got, m.String())
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}
