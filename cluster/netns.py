"""A network namespace of its own for one process of the simulated cluster, the API server forwarded
into it: so that several simulated clusters run on one machine at once (docs/simulated-cluster.md
"Lanes").

The MPI operator serves its health check on `:8080` of every interface, a port no flag changes
(kubeflow/mpi-operator v0.8.0 cmd/mpi-operator/app/server.go: `healthCheckPort = 8080`, and
`klog.Fatalf` when it cannot listen), so a second operator on the same machine exits. Run in a
namespace of its own it has its own :8080; what it needs from outside is the API server, which this
forwarder serves inside the namespace on the same address (127.0.0.1:<port>, which the API server's
certificate names), connecting each accepted connection to the real one outside. TLS goes end to
end through it.

    python -m cluster.netns PORT     # prints "ready <pid>"; then: nsenter --net=/proc/<pid>/ns/net -- CMD

How: the forwarder leaves its network namespace (unshare(2) CLONE_NEWNET; the new namespace's
loopback is down until set up, SIOCSIFFLAGS) and listens on 127.0.0.1:PORT there; its main thread
stays in it, so /proc/<pid>/ns/net names it for nsenter. Each accepted connection is served by a
thread that first returns to the machine's namespace (setns(2) acts on the calling thread) and
connects out from there: a socket stays in the namespace it was made in (network_namespaces(7)).
The namespace lives as long as a process is in it. Both calls need CAP_SYS_ADMIN (root, as in CI);
without it `available()` is False and the caller runs the process in the machine's namespace, one
simulated cluster at a time.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading

CLONE_NEWNET = 0x40000000  # linux/sched.h
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # linux/sockios.h, linux/if.h
READY = "ready"


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether this machine lets us make a network namespace and enter it (a throwaway child tries)."""
    if not shutil.which("nsenter"):
        return False
    r = subprocess.run([sys.executable, "-c", "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(%d) != 0)"
                        % CLONE_NEWNET], capture_output=True)
    return r.returncode == 0


def nsenter(pid: int, argv: list[str]) -> list[str]:
    """argv run in the network namespace of process `pid` (util-linux nsenter execs it: same pid)."""
    return ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv]


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _serve(conn: socket.socket, port: int, home: int) -> None:
    if _libc().setns(home, CLONE_NEWNET) != 0:  # this thread only: out into the machine's namespace
        conn.close()
        return
    try:
        out = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        conn.close()
        return
    out.settimeout(None)
    back = threading.Thread(target=_pump, args=(out, conn), daemon=True)
    back.start()
    _pump(conn, out)
    back.join()
    conn.close()
    out.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m cluster.netns PORT", file=sys.stderr)
        return 2
    port = int(args[0])
    libc = _libc()
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    if libc.unshare(CLONE_NEWNET) != 0:
        print(f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    _loopback_up()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    print(f"{READY} {os.getpid()}", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, port, home), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
