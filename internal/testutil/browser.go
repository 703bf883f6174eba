package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kwatch/kwatch/internal/browser"
)

// Browser starts Debian's chromium headless (chromedp drives it over the
// DevTools protocol) and collects every script error and console error of
// the pages it opens.
func Browser(t testing.TB) (context.Context, func() []string) {
	t.Helper()
	ctx, stop, err := browser.New(context.Background(), 1400, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// A bound for a browser that hangs; no assertion depends on it.
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelT(); stop() })
	// Start the browser, then subscribe to its console: exceptions,
	// console errors and warnings, the browser log's errors.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	return ctx, browser.Problems(ctx)
}

// Do runs browser steps; a failure ends the test.
func Do(t testing.TB, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// Get runs one browser action and returns its value; a failure ends the
// test.
func Get[T any](t testing.TB, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
