// Command pulumi-resource-kubernetes serves the Kubernetes provider, like the module's own
// cmd/pulumi-resource-kubernetes/main.go, whose embedded schema-embed.json and
// terraform-mapping-embed.json are generated files that the published module does not contain.
// cluster/build.sh writes them into a build copy of this module, outside the repository, from the
// module's cmd/pulumi-resource-kubernetes/{schema.json,terraform-mapping.json} with the schema's
// "version" set (what the module's generate.go does). Nothing upstream is kept in the repository.
//
// provider.Serve(providerName, version, pulumiSchema, terraformMapping) is the signature in
// provider/v4 pkg/provider/serve.go at v4.25.0 (later releases add a Helm mapping argument).
package main

import (
	_ "embed"
	"fmt"
	"os"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	// `-version` prints the version and exits: for people and the simulated-cluster tests (the
	// engine never passes it; provider.Main itself knows only -tracing and the engine address).
	if len(os.Args) == 2 && (os.Args[1] == "-version" || os.Args[1] == "--version") {
		fmt.Println(version.Version)
		return
	}
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
