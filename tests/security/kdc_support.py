"""Test-only: a real MIT KDC (Debian krb5-kdc) on 127.0.0.1 with its database in a temp dir.

krb5.conf comes from kmirror.security.kerberos.render_krb5_conf, the file the app would render from the
topology's realm + kdcs; the KDC's own kdc.conf lives next to it (KRB5_KDC_PROFILE).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from kmirror.security.kerberos import write_krb5_conf
from kmirror_cli.local_brokers import free_port
from tests.security.background import BackgroundProcess

REALM = "KMIRROR.TEST"
MASTER_PASSWORD = "kdc-master-test-only"  # protects the throwaway test database, nothing else


class LocalKdc(BackgroundProcess):
    """`with LocalKdc(directory) as kdc:` runs krb5kdc -n on a free port until the block ends."""

    def __init__(self, directory: Path, realm: str = REALM) -> None:
        for tool in ("kdb5_util", "kadmin.local", "krb5kdc", "kinit"):
            assert shutil.which(tool), (
                f"{tool} is missing: run scripts/install-system-deps.sh (krb5-kdc krb5-admin-server krb5-user)"
            )
        self.directory, self.realm, self.port = directory, realm, free_port()
        self.kdcs = [f"127.0.0.1:{self.port}"]
        self.krb5_conf = write_krb5_conf(realm, self.kdcs, directory=directory)
        self.kdc_conf = directory / "kdc.conf"
        self.kdc_conf.write_text(
            f"[kdcdefaults]\n  kdc_ports = {self.port}\n  kdc_tcp_ports = {self.port}\n"
            f"[realms]\n  {realm} = {{\n    database_name = {directory}/principal\n"
            f"    key_stash_file = {directory}/stash\n    acl_file = {directory}/kadm5.acl\n"
            f"    kdc_ports = {self.port}\n    kdc_tcp_ports = {self.port}\n    max_life = 1h\n  }}\n"
            f"[logging]\n  kdc = FILE:{directory}/kdc.log\n"
        )
        (directory / "kadm5.acl").write_text("")

    @property
    def env(self) -> dict[str, str]:
        """Environment for the Kerberos tools: the rendered krb5.conf and the KDC profile."""
        return {**os.environ, "KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)}

    def __enter__(self) -> LocalKdc:
        subprocess.run(
            ["kdb5_util", "create", "-s", "-r", self.realm, "-P", MASTER_PASSWORD],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        self._start(["krb5kdc", "-n", "-r", self.realm], self.port, env=self.env)
        return self

    def log(self) -> str:
        path = self.directory / "kdc.log"
        deadline = time.monotonic() + 2
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return path.read_text(errors="replace") if path.exists() else ""
