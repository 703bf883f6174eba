package cmd

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kwatch/kwatch/pkg/filter"
	"github.com/kwatch/kwatch/pkg/pcap"
)

// filterOptions are the filters kwatch pcap and kwatch attach share: which
// connections are decoded (--client, --server) and which watches are shown
// (--user-agent, --resource, -n).
type filterOptions struct {
	client, server string
	userAgent      string
	resource       string
	namespace      string
	// The flags, parsed by validate.
	clientEnd, serverEnd pcap.Endpoint
	clientProcess        string
	watches              filter.Options
}

// addFlags adds the filter flags; attach: kwatch attach's, whose --client
// also takes a process name.
func (f *filterOptions) addFlags(fs *pflag.FlagSet, attach bool) {
	client := "only connections whose client is ADDR or ADDR:PORT (e.g. 10.0.0.7, [::1]:50312): the others are not decoded"
	if attach {
		client = "only connections whose client is the process NAME (as each connection's process note names it: kube-controller-manager), or ADDR or ADDR:PORT: the others are not decoded"
	}
	fs.StringVar(&f.client, "client", "", client)
	fs.StringVar(&f.server, "server", "", "only connections whose server is ADDR or ADDR:PORT (e.g. 10.0.0.2:6443): the others are not decoded")
	fs.StringVar(&f.userAgent, "user-agent", "", "only the watches whose request's User-Agent holds this text, in any letter case (e.g. kube-controller-manager, kubectl/v1.37); the others are not decoded")
	fs.StringVar(&f.resource, "resource", "", "only the watches of this resource, as kubectl names it: RESOURCE[.VERSION][.GROUP] (e.g. configmaps, deployments.apps); the others are not decoded")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "only the watches of this namespace (their path's /namespaces/NS/; a watch of all namespaces is not one); the others are not decoded")
}

// validate parses the filter flags; attach: kwatch attach's (a process
// name for --client).
func (f *filterOptions) validate(attach bool) error {
	if f.client != "" {
		e, err := pcap.ParseEndpoint(f.client)
		switch {
		case err == nil:
			f.clientEnd = e
		case !processName(f.client):
			return fmt.Errorf("--client: %w", err)
		case !attach:
			return fmt.Errorf("--client %s: not ADDR or ADDR:PORT; a client process's name works with kwatch attach, which knows each connection's processes", f.client)
		default:
			f.clientProcess = f.client
		}
	}
	if f.server != "" {
		e, err := pcap.ParseEndpoint(f.server)
		if err != nil {
			return fmt.Errorf("--server: %w", err)
		}
		f.serverEnd = e
	}
	f.watches = filter.Options{UserAgent: f.userAgent, Namespace: f.namespace}
	if f.resource != "" {
		r, err := filter.ParseResource(f.resource)
		if err != nil {
			return fmt.Errorf("--resource %w", err)
		}
		f.watches.Resource = r
	}
	if f.namespace != "" {
		if err := filter.ValidateNamespace(f.namespace); err != nil {
			return fmt.Errorf("-n: %w", err)
		}
	}
	return nil
}

// processName reports whether s may be a process's name rather than a
// mistyped address: it holds no '/', no ':' (an IPv6 address, a port), and
// is not digits and dots alone (an IPv4 address).
func processName(s string) bool {
	if strings.ContainsAny(s, "/:[] ") {
		return false
	}
	return strings.Trim(s, "0123456789.") != ""
}

// apply sets the connection filters and the request judge of opt.
func (f *filterOptions) apply(opt *pcap.Options) {
	opt.Client, opt.Server, opt.ClientProcess = f.clientEnd, f.serverEnd, f.clientProcess
	if f.watches.Active() {
		opt.HTTP.Omit = f.watches.Omit
	}
}
