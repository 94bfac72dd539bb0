"""A Python language host for the test harness: the `pulumi-language-python` executable the real Pulumi
CLI starts, so that `pulumi preview --save-plan` and `pulumi up --plan` (ci/preview.sh, ci/deploy.sh)
run the Python program for real on this machine, where Pulumi's own host cannot be built (the Go
module proxy serves no version of github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3:
cluster/versions.env).

    python -m cluster.langhost install DIR      # writes DIR/pulumi-language-python; put DIR on PATH

Test-harness code: nothing a user installs imports it (requirements.txt adds nothing for it: it needs
only `pulumi` and `grpcio`, which the program's own SDK brings), and nothing deployed imports `cluster/`.

What the CLI expects of a language host, read in the CLI's own source at its pinned release (v3.274.0,
cluster/versions.env: github.com/pulumi/pulumi/pkg/v3 and sdk/v3 as cluster/build.sh downloads them):

- pkg/resource/plugin/langruntime_plugin.go `NewLanguageRuntime`: the executable `pulumi-language-<runtime>`
  is found by sdk/go/common/workspace/plugins.go `getPluginInfoAndPath` (Pulumi.yaml's `plugins.languages`,
  then $PATH, then next to the `pulumi` binary) and started with the engine's address as its last
  argument (`buildArgsForNewPlugin`), after the logging flags (`--logtostderr`, `-v=N`, `--tracing X`,
  pkg/resource/plugin/plugin.go `buildPluginArguments`), in the program's directory.
- pkg/resource/plugin/plugin.go `newPlugin`: the host writes one line to stdout, the port its gRPC
  server listens on (127.0.0.1); everything it writes after that line, and all of stderr, the CLI
  shows as the program's output. The CLI then calls the `pulumirpc.LanguageRuntime` service the
  Python SDK ships generated (`pulumi.runtime.proto.language_pb2_grpc`; the client side is
  langruntime_plugin.go's `langhost` methods): `GetRequiredPackages`, `Run` (one per preview or update:
  the monitor's address, the project, stack, config and secret keys, dry run, parallelism, the program's
  root, directory and entry point), `RunPlugin` for a policy pack given as a directory
  (pkg/resource/plugin/analyzer_plugin.go `NewPolicyAnalyzer` starts the directory as a plugin, and
  plugin.go `ExecPlugin` runs a directory through its PulumiPolicy.yaml runtime's host), `GetPluginInfo`,
  `About`, `GetProgramDependencies`, `InstallDependencies` (`pulumi install`).

Pulumi's own Python host is a Go module of its own (sdk/python/cmd/pulumi-language-python), which the
proxy does not serve: it was read in the pulumi/pulumi repository snapshot of 2026-08 (v3.260
development; main.go `Run`, `constructArguments`, `RunPlugin`), not at v3.274.0.

How it runs a program: like Pulumi's own host, each `Run` starts a fresh Python process on `program.py` with the same
arguments (`--monitor`, `--engine`, `--project`, `--root_directory`, `--stack`, `--pwd`, `--dry_run`,
`--parallel`, `--organization`, the entry point) and the config in `PULUMI_CONFIG` /
`PULUMI_CONFIG_SECRET_KEYS`; `program.py` configures the SDK's runtime the way the Automation API's
inline server does (pulumi/automation/_server.py in the installed SDK: settings, config, an event
loop with the parallelism, `run_in_stack`) and runs the entry point with `runpy`. Exit code 32 means
"the program already reported the error" (bail), as with Pulumi's host.

What differs from Pulumi's own host (`pulumi-language-python` of the CLI's release):

- **Dependency installation**: none. `InstallDependencies` (`pulumi install`) fails, saying so; the
  host never creates a virtual environment, runs pip, uv or poetry, or a type checker
  (`typechecker` option ignored).
- **Which Python**: the `virtualenv` of Pulumi.yaml's runtime options (`.venv` here) when it exists;
  otherwise the interpreter the host runs on (the harness's environment) instead of Pulumi's error
  "The 'virtualenv' option ... doesn't exist". The `toolchain` option (pip, uv, poetry) is ignored.
- **Plugin discovery**: `GetRequiredPackages` and `GetRequiredPlugins` report nothing (Pulumi's host
  lists every installed package that ships a `pulumi-plugin.json`), so the CLI installs no provider
  up front: each provider is resolved when the program first uses it, from Pulumi.yaml's
  `plugins.providers` or $PATH (the simulated cluster's build), and nothing is downloaded.
- **Policy packs** run as Pulumi's host runs them (`python -u -m pulumi.policy ARGS PACK_DIR` in the
  pack's directory, the pack's own `venv` when it exists), without Pulumi's policy proxy, which also
  passes the stack's config to old packs through the environment: the pack gets it through the
  analyzer protocol only.
- No debugger attach, no tracing or OpenTelemetry, no `Pack`, `Link`, code generation or templates
  (UNIMPLEMENTED). The host exits when the CLI that started it goes away (its parent changes)
  instead of health-checking the engine's address.
"""
