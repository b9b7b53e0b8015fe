"""A throwaway MIT Kerberos KDC on a loopback port (Debian's ``krb5-kdc``), for tests of Kerberos clients.

``with Kdc(tmp_dir) as kdc:`` creates realm ``INLET.TEST`` under ``tmp_dir`` (database, stash,
``krb5.conf`` naming only this KDC over TCP), runs ``krb5kdc -n`` in its own process group and stops it
on exit. :meth:`keytab` adds principals with random keys and exports their keys. :func:`missing` names
what is not installed (the KDC binaries, the ``kerberos`` Python bindings) or returns None.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from inlet.services.stack.processes import free_port, port_is_open

REALM = "INLET.TEST"
_TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local")


def missing() -> str | None:
    """Why a Kerberos test cannot run here (None: it can)."""
    absent = [t for t in _TOOLS if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if absent:
        return f"no KDC: {', '.join(absent)} not installed (Debian packages krb5-kdc, krb5-admin-server)"
    try:
        import kerberos  # noqa: F401
    except ImportError:
        return "no 'kerberos' Python bindings (inlet-services[kerberos], built with Debian libkrb5-dev)"
    return None


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class Kdc:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = free_port()
        self.krb5_conf = directory / "krb5.conf"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.dir / "kdc.conf")}

    def start(self) -> Kdc:
        d = self.dir
        d.mkdir(parents=True, exist_ok=True)
        self.krb5_conf.write_text(
            f"[libdefaults]\n default_realm = {REALM}\n dns_lookup_kdc = false\n dns_lookup_realm = false\n"
            " rdns = false\n dns_canonicalize_hostname = false\n udp_preference_limit = 1\n"
            f"[realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{self.port}\n }}\n"
        )
        (d / "kdc.conf").write_text(
            f"[kdcdefaults]\n kdc_ports = {self.port}\n kdc_tcp_ports = {self.port}\n"
            f"[realms]\n {REALM} = {{\n  database_name = {d / 'principal'}\n"
            f"  key_stash_file = {d / 'stash'}\n  acl_file = {d / 'kadm5.acl'}\n"
            f"  kdc_ports = {self.port}\n  kdc_tcp_ports = {self.port}\n }}\n"
            f"[logging]\n kdc = FILE:{d / 'kdc.log'}\n"
        )
        (d / "kadm5.acl").write_text("")
        env = {**os.environ, **self.env}
        subprocess.run(
            [_tool("kdb5_util"), "create", "-s", "-r", REALM, "-P", "inlet-master"],
            env=env,
            check=True,
            capture_output=True,
        )
        self._proc = subprocess.Popen(
            [_tool("krb5kdc"), "-n"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while not port_is_open("127.0.0.1", self.port, timeout_s=0.2):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"krb5kdc did not start: {(d / 'kdc.log').read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.05)
        return self

    def keytab(self, path: Path, *principals: str) -> Path:
        """Add ``principals`` (random keys) and export them into the keytab at ``path``."""
        env = {**os.environ, **self.env}
        for p in principals:
            for query in (f"addprinc -randkey {p}", f"ktadd -k {path} {p}"):
                subprocess.run(
                    [_tool("kadmin.local"), "-r", REALM, "-q", query],
                    env=env,
                    check=True,
                    capture_output=True,
                )
        return path

    def stop(self) -> None:
        if self._proc is not None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            self._proc.wait(timeout=10)
            self._proc = None

    def __enter__(self) -> Kdc:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
