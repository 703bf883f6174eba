// Command kubelet is the upstream kubelet built from the k8s.io/kubernetes Go
// module, so that the test stack has real nodes: it registers with the
// stack's API server and runs pods through containerd's CRI. It does what
// upstream's cmd/kubelet/kubelet.go does; it is a wrapper for the same reason
// as the kube-apiserver one (k8s.io/kubernetes's staging modules are pinned
// in this module's go.mod). Built in the same Go build cache as
// kube-apiserver, it compiles little of its own.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
