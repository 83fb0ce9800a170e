// Command etcd is etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain), which etcd's
// root module wraps the same way; the root module itself has local replaces.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
