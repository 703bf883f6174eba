package cmd

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"

	"github.com/spf13/cobra"
)

// profileNames are the values of --profile, as kubectl accepts them.
var profileNames = []string{"none", "cpu", "heap", "goroutine", "threadcreate", "block", "mutex"}

// profiling holds kubectl's --profile and --profile-output flags: a Go
// runtime profile of one run, for pprof (go tool pprof FILE).
type profiling struct {
	name, output string
	stop         func() error
}

func (p *profiling) addFlags(c *cobra.Command) {
	c.PersistentFlags().StringVar(&p.name, "profile", "none", "name of the profile to capture: one of none|cpu|heap|goroutine|threadcreate|block|mutex (as kubectl)")
	c.PersistentFlags().StringVar(&p.output, "profile-output", "profile.pprof", "file to write the --profile to")
	_ = c.RegisterFlagCompletionFunc("profile", cobra.FixedCompletions(profileNames, cobra.ShellCompDirectiveNoFileComp))
}

// start begins the profile; stop writes it. An unknown name or a file that
// cannot be created is a usage error.
func (p *profiling) start() error {
	if p.name == "none" {
		return nil
	}
	if !slices.Contains(profileNames, p.name) {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--profile %q: want one of %v", p.name, profileNames)}
	}
	f, err := os.Create(p.output)
	if err != nil {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--profile-output: %w", err)}
	}
	switch p.name {
	case "cpu":
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return &exitError{code: ExitUsage, err: fmt.Errorf("--profile cpu: %w", err)}
		}
		p.stop = func() error {
			pprof.StopCPUProfile()
			return f.Close()
		}
	case "block":
		runtime.SetBlockProfileRate(1)
	case "mutex":
		runtime.SetMutexProfileFraction(1)
	}
	if p.stop == nil {
		p.stop = func() error {
			if p.name == "heap" {
				runtime.GC() // up-to-date statistics, as kubectl does
			}
			err := pprof.Lookup(p.name).WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	return nil
}

// finish writes the profile started by start, if any.
func (p *profiling) finish() error {
	if p.stop == nil {
		return nil
	}
	err := p.stop()
	p.stop = nil
	if err != nil {
		return fmt.Errorf("--profile-output %s: %w", p.output, err)
	}
	return nil
}
