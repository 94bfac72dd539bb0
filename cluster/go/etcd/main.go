// Command etcd is etcd's own server entry point (go.etcd.io/etcd/server/v3/etcdmain), built as a
// dependency because the etcd server module's go.mod replaces its sibling modules with local
// paths, which `go install module@version` refuses (FACTS.md "A real cluster on one machine").
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
