// Command etcd is etcd v3.7 built from its Go module, so that the test control
// plane does not depend on a distribution package or a downloaded binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
