// Command kube-apiserver is the upstream API server built from the
// k8s.io/kubernetes Go module. It does what upstream's
// cmd/kube-apiserver/apiserver.go does; this wrapper exists because that
// package cannot be installed with `go install` (k8s.io/kubernetes replaces its
// staging modules with local paths, which this module pins instead).
package main

import (
	"os"
	_ "time/tzdata" // time zones for CronJob validation, as upstream embeds them

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
