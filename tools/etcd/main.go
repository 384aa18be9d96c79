// Command etcd is the etcd server the e2e control plane runs, built from
// go.etcd.io/etcd/server/v3 so the test bed needs no downloaded release.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
