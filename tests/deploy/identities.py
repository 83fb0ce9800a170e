"""Who runs `pulumi` against the test API server: the stack's kubeconfig names no identity of its
own. Like EKS's (`aws eks update-kubeconfig`: its user is `aws eks get-token`, whatever role the job
assumed), its user is an exec credential plugin, here one that prints the ExecCredential file named
by $KMIRROR_TEST_CREDENTIAL (default: the cluster admin's). So the deploy and a read-only preview
use the same stack config, and switching identity changes no provider input.

Identities other than the admin are ServiceAccounts of the `kmirror-ci` namespace, with tokens from
the TokenRequest API, bound by RoleBindings/ClusterRoleBindings as an EKS access entry binds a role.
"""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.apiserver import ControlPlane

CI_NS = "kmirror-ci"
CREDENTIAL_ENV = "KMIRROR_TEST_CREDENTIAL"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def credential_file(path: Path, token: str) -> Path:
    """An ExecCredential (client.authentication.k8s.io/v1) holding `token`, as `aws eks get-token` prints one."""
    cred = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token}}
    path.write_text(json.dumps(cred))
    path.chmod(0o600)
    return path


def exec_kubeconfig(cluster: ControlPlane, admin_credential: Path) -> str:
    """The cluster's kubeconfig whose user runs the credential plugin (no token inside)."""
    doc = yaml.safe_load(cluster.kubeconfig())
    script = f'cat "${{{CREDENTIAL_ENV}:-{admin_credential}}}"'
    doc["users"] = [
        {
            "name": "admin",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "/bin/sh",
                    "args": ["-c", script],
                    "interactiveMode": "Never",
                }
            },
        }
    ]
    return str(yaml.safe_dump(doc))


def _create(cluster: ControlPlane, collection: str, obj: dict[str, Any]) -> None:
    try:
        cluster.apply(obj, collection)
    except urllib.error.HTTPError as e:
        if e.code != 409:  # already there (a module set it up before)
            raise


def service_account_token(cluster: ControlPlane, name: str) -> str:
    """A token of ServiceAccount `kmirror-ci/NAME` (created if missing), valid for an hour."""
    _create(cluster, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CI_NS}})
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    _create(cluster, f"/api/v1/namespaces/{CI_NS}/serviceaccounts", sa)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    done = cluster.request("POST", f"/api/v1/namespaces/{CI_NS}/serviceaccounts/{name}/token", request)
    return str(done["status"]["token"])


def subject(name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": CI_NS}


def bind(cluster: ControlPlane, name: str, cluster_role: str, namespace: str | None = None) -> None:
    """Grant ClusterRole `cluster_role` to ServiceAccount `name`: in `namespace` only (a RoleBinding,
    as a namespace-scoped access entry), or cluster-wide (a ClusterRoleBinding)."""
    binding: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": {"name": f"{name}-{cluster_role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [subject(name)],
    }
    if namespace:
        binding["kind"] = "RoleBinding"
        _create(cluster, f"{RBAC}/namespaces/{namespace}/rolebindings", binding)
    else:
        binding["kind"] = "ClusterRoleBinding"
        _create(cluster, f"{RBAC}/clusterrolebindings", binding)


def cluster_role(cluster: ControlPlane, name: str, rules: list[dict[str, Any]]) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}}
    _create(cluster, f"{RBAC}/clusterroles", {**role, "rules": rules})
