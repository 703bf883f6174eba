// Command openreport opens a kwatch HTML report in headless chromium (over
// the DevTools protocol, with chromedp) and says how long the page took to
// load and draw; -png writes a screenshot of the page, -click chooses the
// event of that index first (its bytes show under the timeline).
//
//	go run ./bench/openreport -png docs/report.png report.html
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kwatch/kwatch/internal/browser"
)

func main() {
	png := flag.String("png", "", "write a screenshot of the page to this PNG file")
	width := flag.Int("width", 1400, "window width in pixels")
	height := flag.Int("height", 1000, "window height in pixels (the screenshot is of the window)")
	click := flag.Int("click", -1, "choose this event (its index in the page) before the screenshot")
	zoom := flag.Int("zoom", 0, "zoom in this many times before the screenshot")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: openreport [-png FILE] REPORT.html")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *png, *width, *height, *click, *zoom); err != nil {
		fmt.Fprintln(os.Stderr, "openreport:", err)
		os.Exit(1)
	}
}

func run(report, png string, width, height, click, zoom int) error {
	abs, err := filepath.Abs(report)
	if err != nil {
		return err
	}
	ctx, stop, err := browser.New(context.Background(), width, height)
	if err != nil {
		return err
	}
	defer stop()
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		return err
	}
	problems := browser.Problems(ctx)
	defer func() {
		for _, p := range problems() {
			fmt.Fprintln(os.Stderr, "openreport: the page's console:", p)
		}
		if len(problems()) > 0 {
			os.Exit(1)
		}
	}()
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+abs), chromedp.WaitVisible(chromedp.CSS("#timeline"))); err != nil {
		return err
	}
	// The page draws in its load script: once kwatchReport exists, all is drawn.
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`typeof kwatchReport === "object"`))
	if err != nil || !ok {
		return fmt.Errorf("the page's script did not finish (%v)", err)
	}
	took := time.Since(start)
	marks, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline rect").length`))
	if err != nil {
		return err
	}
	fi, _ := os.Stat(abs)
	fmt.Printf("%s: %d bytes, opened and drawn in %s (%d rects in the timeline)\n", report, fi.Size(), took.Round(time.Millisecond), marks)
	for range zoom {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#zoom-in"))); err != nil {
			return err
		}
	}
	if click >= 0 {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](fmt.Sprintf(`kwatchReport.choose(%d)`, click))); err != nil {
			return err
		}
	}
	if png != "" {
		b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			return err
		}
		return os.WriteFile(png, b, 0o644)
	}
	return nil
}
