// Command kubectl is kubectl built from k8s.io/kubectl at the same version as
// the API server, so `kubectl proxy` and the server match whatever the machine
// image ships (or does not ship).
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
