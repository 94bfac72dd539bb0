"""The test harness's language host (cluster/langhost) as the Pulumi CLI meets it, without the CLI: the
executable `python -m cluster.langhost install` writes, started with the flags and engine address the CLI
passes (pkg/resource/plugin/plugin.go `buildPluginArguments`, langruntime_plugin.go
`buildArgsForNewPlugin`), prints its port as its first line, and answers the `pulumirpc.LanguageRuntime`
calls the CLI makes before and around `Run`: plugin info, required packages (none: the CLI resolves each
provider when it is used), About, `pulumi install` refused with a reason, and a plugin run through
`RunPlugin` with its output streamed and its exit code last. `Run` itself, with the real CLI and engine:
tests/sim/test_sim_langhost.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from pulumi.runtime.proto import language_pb2, language_pb2_grpc

from cluster.langhost import __main__ as langhost
from cluster.langhost import host


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    bin_dir = tmp_path_factory.mktemp("langhost")
    exe = langhost.install(bin_dir)
    assert exe.name == "pulumi-language-python" and exe.stat().st_mode & 0o111
    proc = subprocess.Popen([str(exe), "--logtostderr", "-v=9", "--tracing", "127.0.0.1:1", "127.0.0.1:1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), (line, proc.stderr.read() if proc.poll() is not None else "")
        channel = grpc.insecure_channel(f"127.0.0.1:{int(line)}")
        grpc.channel_ready_future(channel).result(timeout=30)
        yield language_pb2_grpc.LanguageRuntimeStub(channel)
        channel.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_it_reports_the_sdk_version_and_no_required_packages(stub):
    from importlib.metadata import version
    from google.protobuf import empty_pb2

    assert stub.GetPluginInfo(empty_pb2.Empty()).version == version("pulumi")
    info = language_pb2.ProgramInfo(root_directory="/nonexistent", program_directory="/nonexistent", entry_point=".")
    assert list(stub.GetRequiredPackages(language_pb2.GetRequiredPackagesRequest(info=info)).packages) == []
    assert list(stub.GetRequiredPlugins(language_pb2.GetRequiredPluginsRequest(info=info)).plugins) == []
    about = stub.About(language_pb2.AboutRequest(info=info))
    assert about.executable == sys.executable and about.version == ".".join(map(str, sys.version_info[:3]))


def test_pulumi_install_is_refused_with_the_reason(stub):
    info = language_pb2.ProgramInfo(root_directory="/tmp", program_directory="/tmp", entry_point=".")
    with pytest.raises(grpc.RpcError) as refused:
        list(stub.InstallDependencies(language_pb2.InstallDependenciesRequest(info=info)))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "installs nothing" in refused.value.details()


def test_run_plugin_streams_the_output_then_the_exit_code(stub, tmp_path):
    # A plugin (a directory with __main__.py, run as `python -u DIR ARGS`) that writes its port line as a
    # plugin does, something on stderr, and exits 3.
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "__main__.py").write_text("import sys\nprint('4242', flush=True)\nprint('args', *sys.argv[1:], "
                                        "file=sys.stderr)\nsys.exit(3)\n")
    info = language_pb2.ProgramInfo(root_directory=str(plugin), program_directory=str(plugin), entry_point=".")
    out, err, codes = b"", b"", []
    for msg in stub.RunPlugin(language_pb2.RunPluginRequest(info=info, pwd=str(tmp_path), args=["a", "b"],
                                                            kind="resource")):
        which = msg.WhichOneof("output")
        if which == "stdout":
            out += msg.stdout
        elif which == "stderr":
            err += msg.stderr
        else:
            codes.append(msg.exitcode)
    assert out == b"4242\n" and err == b"args a b\n" and codes == [3]


def test_the_program_runs_in_its_virtualenv_when_there_is_one(tmp_path):
    assert host.interpreter(str(tmp_path), {"virtualenv": ".venv"}) == sys.executable  # none there: the harness's
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert host.interpreter(str(tmp_path), {"virtualenv": ".venv"}) == str(python)
    assert host.interpreter(str(tmp_path), {}) == sys.executable


def test_the_wrapper_names_this_interpreter_and_the_host(tmp_path):
    exe = langhost.install(tmp_path, python="/opt/py thon/bin/python3")
    assert exe.read_text() == f"#!/bin/sh\nexec '/opt/py thon/bin/python3' {Path(host.__file__).resolve()} \"$@\"\n"
