package cmd

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

// TestPassedArgs: what decides what is decoded goes to kwatch on the
// nodes as given (a slice flag once per value); the output flags and
// kubectl's connection flags stay here, kwatch attach's --server (the API
// server) among them, while kwatch pcap's --server (a filter) goes.
func TestPassedArgs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attach bool
		args   []string
		want   []string
	}{
		{name: "attach", attach: true,
			args: []string{"--server", "https://10.0.0.1:6443", "--port", "8443", "--exe", "/a", "--exe", "/b", "-o", "json", "--node", "n1"},
			want: []string{"--exe=/a", "--exe=/b", "--port=8443"}},
		{name: "pcap", args: []string{"--server", "10.0.0.1:6443", "--gap-timeout", "3s", "--kubeconfig", "/k", "--all-nodes"},
			want: []string{"--gap-timeout=3s", "--server=10.0.0.1:6443"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cobra.Command{Use: "x"}
			var o nodeOptions
			o.addFlags(c.Flags(), tc.attach)
			fs := c.Flags()
			fs.StringP("output", "o", "pretty", "")
			fs.StringArray("exe", nil, "")
			fs.String("port", "", "")
			fs.String("gap-timeout", "", "")
			if !tc.attach {
				fs.String("server", "", "") // kwatch pcap's filter
			}
			if err := c.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			got := o.passedArgs(c)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("passed %q, want %q", got, tc.want)
			}
		})
	}
}
