"""The Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards/), as
Pod Security admission enforces them (k8s.io/pod-security-admission, policy/check_*.go), for a pod
template: `violations(template, level)` lists every rule the pod breaks, each naming the rule and
the field, so a namespace labelled `pod-security.kubernetes.io/enforce: restricted` would admit a
pod made from the template exactly when the list is empty.

Written from the published rules, one function per rule; the checks read the fields as admission
reads them (a container's own setting overrides its pod's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Object = dict[str, Any]

BASELINE, RESTRICTED = "baseline", "restricted"

# Capabilities the baseline level lets containers add (check_capabilities_baseline.go).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# The only capability the restricted level lets containers add.
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# Sysctls every level allows (check_sysctls.go, as of Kubernetes 1.29).
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
# SELinux types every level allows (check_seLinuxOptions.go).
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
# Volume sources the restricted level allows (check_restrictedVolumes.go).
RESTRICTED_VOLUME_SOURCES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})


def containers(spec: Object) -> Iterator[tuple[str, Object]]:
    """(field path, container) of every container, init and ephemeral ones included."""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(spec.get(field) or []):
            yield f"spec.{field}[{index}]", container


def _context(container: Object) -> Object:
    return container.get("securityContext") or {}


def security_contexts(spec: Object) -> list[tuple[str, Object]]:
    """(field path, securityContext) of the pod and of every container."""
    contexts = [("spec.securityContext", spec.get("securityContext") or {})]
    return contexts + [(f"{path}.securityContext", _context(c)) for path, c in containers(spec)]


# --- Baseline ------------------------------------------------------------------------------------


def host_process(template: Object) -> list[str]:
    spec, found = template["spec"], []
    pod = (spec.get("securityContext") or {}).get("windowsOptions") or {}
    if pod.get("hostProcess"):
        found.append("spec.securityContext.windowsOptions.hostProcess is true")
    for path, container in containers(spec):
        if (_context(container).get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{path}.securityContext.windowsOptions.hostProcess is true")
    return found


def host_namespaces(template: Object) -> list[str]:
    spec = template["spec"]
    return [
        f"spec.{field} is true"
        for field in ("hostNetwork", "hostPID", "hostIPC")
        if spec.get(field)
    ]


def privileged(template: Object) -> list[str]:
    return [
        f"{path}.securityContext.privileged is true"
        for path, container in containers(template["spec"])
        if _context(container).get("privileged")
    ]


def _capabilities_beyond(template: Object, allowed: frozenset[str]) -> list[str]:
    found = []
    for path, container in containers(template["spec"]):
        added = (_context(container).get("capabilities") or {}).get("add") or []
        beyond = sorted(set(added) - allowed)
        if beyond:
            found.append(f"{path}.securityContext.capabilities.add has {', '.join(beyond)}")
    return found


def baseline_capabilities(template: Object) -> list[str]:
    return _capabilities_beyond(template, BASELINE_CAPABILITIES)


def host_path_volumes(template: Object) -> list[str]:
    return [
        f"spec.volumes[{index}] ({volume.get('name')}) is a hostPath"
        for index, volume in enumerate(template["spec"].get("volumes") or [])
        if "hostPath" in volume
    ]


def host_ports(template: Object) -> list[str]:
    return [
        f"{path}.ports[{index}].hostPort is {port['hostPort']}"
        for path, container in containers(template["spec"])
        for index, port in enumerate(container.get("ports") or [])
        if port.get("hostPort")
    ]


def app_armor(template: Object) -> list[str]:
    found = []
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    for key, value in annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            found.append(f"metadata.annotations[{key}] is {value}")
    spec = template["spec"]
    contexts = security_contexts(spec)
    for path, context in contexts:
        profile = (context.get("appArmorProfile") or {}).get("type")
        if profile not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"{path}.appArmorProfile.type is {profile}")
    return found


def se_linux(template: Object) -> list[str]:
    found = []
    spec = template["spec"]
    contexts = security_contexts(spec)
    for path, context in contexts:
        options = context.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES:
            found.append(f"{path}.seLinuxOptions.type is {options['type']}")
        for field in ("user", "role"):
            if options.get(field):
                found.append(f"{path}.seLinuxOptions.{field} is set")
    return found


def proc_mount(template: Object) -> list[str]:
    return [
        f"{path}.securityContext.procMount is {_context(container)['procMount']}"
        for path, container in containers(template["spec"])
        if _context(container).get("procMount") not in (None, "Default")
    ]


def seccomp_not_unconfined(template: Object) -> list[str]:
    spec = template["spec"]
    contexts = security_contexts(spec)
    return [
        f"{path}.seccompProfile.type is Unconfined"
        for path, context in contexts
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined"
    ]


def sysctls(template: Object) -> list[str]:
    pod = template["spec"].get("securityContext") or {}
    return [
        f"spec.securityContext.sysctls has {sysctl['name']}, outside the safe set"
        for sysctl in pod.get("sysctls") or []
        if sysctl["name"] not in SAFE_SYSCTLS
    ]


# --- Restricted ----------------------------------------------------------------------------------


def volume_types(template: Object) -> list[str]:
    found = []
    for index, volume in enumerate(template["spec"].get("volumes") or []):
        sources = set(volume) - {"name"}
        if not sources <= RESTRICTED_VOLUME_SOURCES:
            kinds = ", ".join(sorted(sources - RESTRICTED_VOLUME_SOURCES))
            found.append(f"spec.volumes[{index}] ({volume.get('name')}) is {kinds}")
    return found


def privilege_escalation(template: Object) -> list[str]:
    return [
        f"{path}.securityContext.allowPrivilegeEscalation is not false"
        for path, container in containers(template["spec"])
        if _context(container).get("allowPrivilegeEscalation") is not False
    ]


def run_as_non_root(template: Object) -> list[str]:
    pod = (template["spec"].get("securityContext") or {}).get("runAsNonRoot")
    found = []
    if pod is False:
        found.append("spec.securityContext.runAsNonRoot is false")
    for path, container in containers(template["spec"]):
        own = _context(container).get("runAsNonRoot")
        if own is False:
            found.append(f"{path}.securityContext.runAsNonRoot is false")
        elif own is None and pod is not True:
            found.append(f"{path}: runAsNonRoot is set neither on it nor on the pod")
    return found


def run_as_user(template: Object) -> list[str]:
    spec = template["spec"]
    found = []
    if (spec.get("securityContext") or {}).get("runAsUser") == 0:
        found.append("spec.securityContext.runAsUser is 0")
    for path, container in containers(spec):
        if _context(container).get("runAsUser") == 0:
            found.append(f"{path}.securityContext.runAsUser is 0")
    return found


def seccomp_restricted(template: Object) -> list[str]:
    spec = template["spec"]
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    found = []
    if pod is not None and pod not in SECCOMP_ALLOWED:
        found.append(f"spec.securityContext.seccompProfile.type is {pod}")
    for path, container in containers(spec):
        own = (_context(container).get("seccompProfile") or {}).get("type")
        if own is not None and own not in SECCOMP_ALLOWED:
            found.append(f"{path}.securityContext.seccompProfile.type is {own}")
        elif own is None and pod not in SECCOMP_ALLOWED:
            found.append(f"{path}: seccompProfile is set neither on it nor on the pod")
    return found


def restricted_capabilities(template: Object) -> list[str]:
    found = _capabilities_beyond(template, RESTRICTED_CAPABILITIES)
    for path, container in containers(template["spec"]):
        dropped = (_context(container).get("capabilities") or {}).get("drop") or []
        if "ALL" not in dropped:
            found.append(f"{path}.securityContext.capabilities.drop lacks ALL")
    return found


Rule = Callable[[Object], list[str]]
BASELINE_RULES: dict[str, Rule] = {
    "hostProcess": host_process,
    "host namespaces": host_namespaces,
    "privileged containers": privileged,
    "capabilities (baseline)": baseline_capabilities,
    "hostPath volumes": host_path_volumes,
    "host ports": host_ports,
    "AppArmor": app_armor,
    "SELinux": se_linux,
    "/proc mount type": proc_mount,
    "seccomp (baseline)": seccomp_not_unconfined,
    "sysctls": sysctls,
}
RESTRICTED_RULES: dict[str, Rule] = {
    **BASELINE_RULES,
    "volume types": volume_types,
    "privilege escalation": privilege_escalation,
    "running as non-root": run_as_non_root,
    "running as non-root user": run_as_user,
    "seccomp (restricted)": seccomp_restricted,
    "capabilities (restricted)": restricted_capabilities,
}
LEVELS = {BASELINE: BASELINE_RULES, RESTRICTED: RESTRICTED_RULES}


def violations(template: Object, level: str = RESTRICTED) -> list[str]:
    """Every rule of the level that a pod made from `template` breaks, as `rule: field ...`."""
    return [
        f"{rule}: {finding}" for rule, check in LEVELS[level].items() for finding in check(template)
    ]
