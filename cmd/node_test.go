package cmd

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kwatch/kwatch/pkg/node"
)

// TestPassedArgs: what decides what is decoded goes to kwatch on the
// nodes as given (a slice flag once per value), the filters among them;
// the output flags and kubectl's connection flags stay here, and so does
// -n when it names the namespace of pod/NAME.
func TestPassedArgs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attach bool
		pods   bool
		args   []string
		want   []string
	}{
		{name: "attach", attach: true,
			args: []string{"--server", "10.0.0.1:6443", "--port", "8443", "--exe", "/a", "--exe", "/b", "-o", "json", "--node", "n1", "--user-agent", "kubectl", "-n", "demo"},
			want: []string{"--exe=/a", "--exe=/b", "--namespace=demo", "--port=8443", "--server=10.0.0.1:6443", "--user-agent=kubectl"}},
		{name: "attach pod/NAME", attach: true, pods: true,
			args: []string{"-n", "my-system", "--resource", "configmaps", "--context", "prod"},
			want: []string{"--resource=configmaps"}},
		{name: "pcap", args: []string{"--server", "10.0.0.1:6443", "--gap-timeout", "3s", "--kubeconfig", "/k", "--all-nodes", "--client", "10.0.0.7"},
			want: []string{"--client=10.0.0.7", "--gap-timeout=3s", "--server=10.0.0.1:6443"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cobra.Command{Use: "x"}
			fs := c.Flags()
			var f filterOptions
			f.addFlags(fs, tc.attach)
			var o nodeOptions
			o.addFlags(fs, tc.attach)
			fs.StringP("output", "o", "pretty", "")
			fs.StringArray("exe", nil, "")
			fs.String("port", "", "")
			fs.String("gap-timeout", "", "")
			if err := c.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			if tc.pods {
				o.pods = []node.Target{{Kind: "pod", Namespace: "my-system", Name: "p", Arg: "pod/p"}}
			}
			got := o.passedArgs(c)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("passed %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTargetsNamespace: with pod/NAME, -n names the pod's namespace, as
// kubectl's does, and is no filter of the watches; without, it stays the
// filter's.
func TestTargetsNamespace(t *testing.T) {
	c := &cobra.Command{Use: "x"}
	var o nodeOptions
	o.addFlags(c.Flags(), true)
	ns := "my-system"
	names, err := o.targets([]string{"pod/my-controller", "deploy/other"}, &ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 0 || ns != "" || len(o.pods) != 2 || o.pods[0].Namespace != "my-system" || o.pods[1].Namespace != "my-system" || o.pods[1].Kind != "deployment" {
		t.Errorf("names %q, -n %q, pods %+v", names, ns, o.pods)
	}
	var p nodeOptions
	p.addFlags((&cobra.Command{Use: "y"}).Flags(), true)
	ns = "demo"
	if names, err := p.targets([]string{"kube-apiserver"}, &ns); err != nil || ns != "demo" || len(names) != 1 || len(p.pods) != 0 {
		t.Errorf("names %q, -n %q, pods %+v, err %v", names, ns, p.pods, err)
	}
}
