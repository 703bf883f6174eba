// Command kube-scheduler is the upstream scheduler built from the
// k8s.io/kubernetes Go module, so that pods without spec.nodeName (those of a
// Deployment, say) are placed on the stack's nodes as on a cluster. It does
// what upstream's cmd/kube-scheduler/scheduler.go does; it is a wrapper for
// the same reason as the kube-apiserver one.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
