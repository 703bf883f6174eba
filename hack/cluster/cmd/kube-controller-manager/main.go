// Command kube-controller-manager is the upstream controller manager built
// from the k8s.io/kubernetes Go module, so that the test control plane runs
// real controllers (namespace deletion, garbage collection, service accounts,
// ...) with their informers. It does what upstream's
// cmd/kube-controller-manager/controller-manager.go does, for the same reason
// as the kube-apiserver wrapper: that package cannot be installed with
// `go install`.
package main

import (
	"os"
	_ "time/tzdata" // time zones for the CronJob controller, as upstream embeds them

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
