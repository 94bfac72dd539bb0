"""A throw-away PKI for the simulated cluster, made with the openssl CLI at every start.

One CA signs: the API server's serving certificate (127.0.0.1, and the in-cluster names the
controllers put in kubeconfigs and tokens), the client certificates of the admin and of each
component, and Kueue's webhook serving certificate (127.0.0.1). The service-account token key pair
is separate (kube-apiserver --service-account-key-file / --service-account-signing-key-file).
P-256 keys: fast to make on a small machine, accepted by every Go TLS stack involved.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "7"
# The API server's addresses: loopback, and the first address of --service-cluster-ip-range
# (the `kubernetes` Service) with its DNS names.
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_SANS = ("IP:127.0.0.1", f"IP:{KUBERNETES_SERVICE_IP}", "DNS:localhost", "DNS:kubernetes",
            "DNS:kubernetes.default", "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local")


def _openssl(*args: str) -> None:
    r = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {r.stderr.strip()[-500:]}")


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path

    def cert_b64(self) -> str:
        return base64.b64encode(self.cert.read_bytes()).decode()

    def key_b64(self) -> str:
        return base64.b64encode(self.key.read_bytes()).decode()


class Pki:
    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = Pair(self.dir / "ca.crt", self.dir / "ca.key")

    def make_ca(self) -> Pair:
        _key(self.ca.key)
        _openssl("req", "-x509", "-new", "-key", str(self.ca.key), "-out", str(self.ca.cert), "-days", DAYS,
                 "-subj", "/CN=rltrain-sim-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
        return self.ca

    def issue(self, name: str, subject: str, *, server_sans: tuple[str, ...] = (), client: bool = False,
              directory: Path | None = None, cert_name: str | None = None, key_name: str | None = None) -> Pair:
        d = directory or self.dir
        d.mkdir(parents=True, exist_ok=True)
        pair = Pair(d / (cert_name or f"{name}.crt"), d / (key_name or f"{name}.key"))
        _key(pair.key)
        csr = self.dir / f"{name}.csr"
        ext = self.dir / f"{name}.ext"
        usages = (["serverAuth"] if server_sans else []) + (["clientAuth"] if client else [])
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
                 f"extendedKeyUsage={','.join(usages)}"]
        if server_sans:
            lines.append(f"subjectAltName={','.join(server_sans)}")
        ext.write_text("\n".join(lines) + "\n")
        _openssl("req", "-new", "-key", str(pair.key), "-subj", subject, "-out", str(csr))
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca.cert), "-CAkey", str(self.ca.key),
                 "-CAcreateserial", "-out", str(pair.cert), "-days", DAYS, "-extfile", str(ext))
        csr.unlink()
        ext.unlink()
        return pair

    def service_account_keys(self) -> Pair:
        pair = Pair(self.dir / "sa.pub", self.dir / "sa.key")
        _key(pair.key)
        _openssl("pkey", "-in", str(pair.key), "-pubout", "-out", str(pair.cert))
        return pair


def kubeconfig(server: str, ca: Pair, client: Pair, user: str, cluster: str = "rltrain-sim") -> str:
    """A kubeconfig with everything embedded (it is handed to Pulumi as a secret string)."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: {cluster}\n  cluster:\n    server: {server}\n"
        f"    certificate-authority-data: {ca.cert_b64()}\n"
        f"users:\n- name: {user}\n  user:\n    client-certificate-data: {client.cert_b64()}\n"
        f"    client-key-data: {client.key_b64()}\n"
        f"contexts:\n- name: {cluster}\n  context:\n    cluster: {cluster}\n    user: {user}\n"
        f"current-context: {cluster}\n"
    )
