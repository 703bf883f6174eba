package cmd

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/printer"
)

// outputOptions are the output flags shared by kwatch pcap and kwatch stream.
type outputOptions struct {
	Output        string
	Color         string
	Wire          bool
	ShowSecrets   bool
	MaxEventBytes int64
}

func (o *outputOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Output, "output", "o", "pretty", "output format: pretty or json (JSON Lines)")
	fs.StringVar(&o.Color, "color", "auto", "color output: auto, always or never (auto: only on a terminal, not when NO_COLOR is set or TERM=dumb)")
	fs.BoolVar(&o.Wire, "wire", false, "show the framing bytes of each chunk in hex (e.g. 33 61 61 0d 0a for \"3aa\\r\\n\")")
	fs.BoolVar(&o.ShowSecrets, "show-secrets", false, "show the data of Secrets instead of REDACTED")
	fs.Int64Var(&o.MaxEventBytes, "max-event-bytes", event.DefaultMaxEventBytes, "largest watch event decoded, in bytes; larger ones are reported and skipped")
}

func (o *outputOptions) validate() error {
	switch o.Output {
	case "pretty", "json":
	default:
		return fmt.Errorf("--output must be pretty or json, not %q", o.Output)
	}
	switch o.Color {
	case "auto", "always", "never":
	default:
		return fmt.Errorf("--color must be auto, always or never, not %q", o.Color)
	}
	if o.MaxEventBytes <= 0 {
		return fmt.Errorf("--max-event-bytes must be positive")
	}
	return nil
}

// useColor decides once whether to color output: --color always/never win;
// auto colors only a terminal, and not with NO_COLOR set or TERM=dumb
// (https://no-color.org).
func useColor(mode string, streams IOStreams) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	if streams.Getenv != nil {
		if streams.Getenv("NO_COLOR") != "" || strings.EqualFold(streams.Getenv("TERM"), "dumb") {
			return false
		}
	}
	return streams.OutTTY
}

func (o *outputOptions) printer(streams IOStreams, allHTTP bool) printer.Printer {
	opt := printer.Options{Color: useColor(o.Color, streams), Wire: o.Wire, AllHTTP: allHTTP, Terminal: streams.OutTTY}
	if o.Output == "json" {
		return printer.NewJSON(streams.Out, opt)
	}
	return printer.NewPretty(streams.Out, opt)
}
