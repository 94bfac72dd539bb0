"""The `pulumi-language-python` of the test harness: a `pulumirpc.LanguageRuntime` gRPC server the real
Pulumi CLI starts (what it expects and what differs from Pulumi's own host: cluster/langhost/__init__.py).

    python host.py [--logtostderr] [-v=N] [--tracing ENDPOINT] [ENGINE_ADDRESS]

Prints the port it listens on (127.0.0.1) as its first line of stdout, then serves until the CLI that
started it goes away. Each `Run` starts cluster/langhost/program.py in the program's interpreter;
`RunPlugin` starts a Python policy pack.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Iterator, Optional

import grpc
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2

PROGRAM = Path(__file__).resolve().with_name("program.py")
BAIL = 32  # program.py: the error is already reported (Pulumi's host: Bail)
# gRPC message size: the engine sends the whole config and receives plugin output in chunks.
MAX_MESSAGE = 400 * 1024 * 1024


def sdk_version() -> str:
    try:
        from importlib.metadata import version
        return version("pulumi")
    except Exception:  # noqa: BLE001 - a version is informative only
        return "0.0.0"


def interpreter(root: str, options: Any) -> str:
    """The program's Python: Pulumi.yaml's runtime option `virtualenv` (relative to the project root)
    when that environment exists, else the interpreter this host runs on (see __init__.py)."""
    opts = dict(options) if options is not None else {}
    venv = opts.get("virtualenv")
    if venv:
        path = Path(venv) if os.path.isabs(venv) else Path(root) / venv
        for name in ("bin/python", "bin/python3"):
            if (path / name).is_file():
                return str(path / name)
    return sys.executable


def _options(info: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict
    return MessageToDict(info.options) if info is not None and info.HasField("options") else {}


class Host(language_pb2_grpc.LanguageRuntimeServicer):
    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.children: set[subprocess.Popen] = set()
        self.lock = threading.Lock()

    # --- bookkeeping ----------------------------------------------------------------------------

    def _start(self, cmd: list[str], **kw: Any) -> subprocess.Popen:
        proc = subprocess.Popen(cmd, **kw)
        with self.lock:
            self.children.add(proc)
        return proc

    def _done(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.children.discard(proc)

    def stop_children(self) -> None:
        with self.lock:
            procs = list(self.children)
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()

    # --- the service --------------------------------------------------------------------------------

    def Handshake(self, request, context):
        if request.engine_address:
            self.engine = request.engine_address
        return language_pb2.LanguageHandshakeResponse()

    def GetPluginInfo(self, request, context):
        return plugin_pb2.PluginInfo(version=sdk_version())

    def GetRequiredPlugins(self, request, context):
        # Nothing up front: each provider is resolved when the program first uses it (__init__.py).
        return language_pb2.GetRequiredPluginsResponse()

    def GetRequiredPackages(self, request, context):
        return language_pb2.GetRequiredPackagesResponse()

    def About(self, request, context):
        info = request.info if request.HasField("info") else None
        python = interpreter(info.root_directory if info else os.getcwd(), _options(info))
        out = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, timeout=60)
        return language_pb2.AboutResponse(executable=python, version=out.stdout.strip(),
                                          metadata={"toolchain": "none (rltrain test-harness host)"})

    def GetProgramDependencies(self, request, context):
        info = request.info
        python = interpreter(info.root_directory, _options(info))
        script = ("import json, importlib.metadata as m; print(json.dumps(sorted({(d.metadata['Name'], d.version) "
                  "for d in m.distributions() if d.metadata['Name']})))")
        out = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=120)
        deps = json.loads(out.stdout or "[]")
        return language_pb2.GetProgramDependenciesResponse(
            dependencies=[language_pb2.DependencyInfo(name=n, version=v) for n, v in deps])

    def InstallDependencies(self, request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      "the rltrain test-harness language host installs nothing (cluster/langhost): the "
                      "program runs in Pulumi.yaml's virtualenv when it exists, else in the harness's own "
                      "environment")

    def Run(self, request, context):
        info = request.info
        root = info.root_directory or request.pwd
        entry = info.entry_point or request.program or "."
        # The entry point is relative to the program directory (Pulumi.yaml `main`, default ".").
        program = entry if os.path.isabs(entry) else os.path.join(info.program_directory or request.pwd, entry)
        cmd = [interpreter(root, _options(info)), "-u", str(PROGRAM)]
        for flag, value in (("monitor", request.monitor_address), ("engine", self.engine),
                            ("project", request.project), ("root_directory", root), ("stack", request.stack),
                            ("pwd", request.pwd), ("dry_run", "true" if request.dryRun else "false"),
                            ("parallel", str(request.parallel)), ("organization", request.organization)):
            if value:
                cmd += [f"--{flag}", value]
        cmd += [program, *request.args]
        env = dict(os.environ)
        env["PULUMI_CONFIG"] = json.dumps(dict(request.config))
        env["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(list(request.configSecretKeys))
        # The program's output goes where this host's goes: the CLI shows it (plugin.go runtrace).
        sys.stdout.flush()
        sys.stderr.flush()
        proc = self._start(cmd, env=env, cwd=request.pwd or None)
        context.add_callback(lambda: proc.poll() is None and proc.terminate())
        try:
            code = proc.wait()
        finally:
            self._done(proc)
        if code == 0:
            return language_pb2.RunResponse()
        if code == BAIL:
            return language_pb2.RunResponse(bail=True)
        return language_pb2.RunResponse(error=f"program exited with non-zero exit code: {code}")

    def RunPlugin(self, request, context) -> Iterator[Any]:
        info = request.info
        pack = info.program_directory
        python = interpreter(info.root_directory or pack, _options(info))
        if request.kind == "analyzer":
            # As Pulumi's host runs a policy pack (main.go RunPlugin): in the pack's directory.
            cmd, cwd = [python, "-u", "-m", "pulumi.policy", *request.args, pack], pack
        else:
            cmd, cwd = [python, "-u", pack, *request.args], request.pwd or pack
        env = dict(item.split("=", 1) for item in request.env if "=" in item) or dict(os.environ)
        proc = self._start(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        chunks: queue.Queue = queue.Queue()

        def pump(stream, field: str) -> None:
            for chunk in iter(lambda: stream.read1(65536), b""):
                chunks.put((field, chunk))
            chunks.put((field, None))

        for stream, field in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            threading.Thread(target=pump, args=(stream, field), daemon=True).start()
        # The engine cancels the stream when it is done with the plugin: stop it then.
        context.add_callback(lambda: proc.poll() is None and proc.terminate())
        open_streams = 2
        try:
            while open_streams:
                field, chunk = chunks.get()
                if chunk is None:
                    open_streams -= 1
                    continue
                yield language_pb2.RunPluginResponse(**{field: chunk})
            yield language_pb2.RunPluginResponse(exitcode=proc.wait())
        finally:
            if proc.poll() is None:
                proc.terminate()
            self._done(proc)

    def Cancel(self, request, context):
        self.stop_children()
        from google.protobuf import empty_pb2
        return empty_pb2.Empty()


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="pulumi-language-python", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tracing")
    ap.add_argument("--logtostderr", action="store_true")
    ap.add_argument("-v", dest="verbose")
    ap.add_argument("--use-executor", dest="executor")  # Pulumi's host's flag; this host has its own
    ap.add_argument("engine", nargs="?", default="")
    return ap.parse_args(argv)


def serve(argv: list[str], out=None) -> int:
    args = parse(argv)
    out = out or sys.stdout
    host = Host(args.engine)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)])
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    # The one line the CLI reads (plugin.go newPlugin): the port, then a newline.
    out.write(f"{port}\n")
    out.flush()
    parent = os.getppid()
    try:
        while os.getppid() == parent:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        host.stop_children()
        server.stop(grace=2)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    return serve(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
