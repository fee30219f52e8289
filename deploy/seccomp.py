#!/usr/bin/env python3
"""Writes the container's seccomp profile: the engine's default profile
(podman: /usr/share/containers/seccomp.json; Docker's is the same format)
with the system calls isolate needs to set up a box allowed, which the
default allows only to a container with CAP_SYS_ADMIN:

  sethostname, setdomainname  the box's UTS namespace (hostname "isolate")
  setns                       joining a persistent box's namespaces

and every other call the default would allow because the container has
CAP_SYS_ADMIN (deploy/run.sh grants it, in the container's own user
namespace, for mounting tmpfs) still refused: bpf, fanotify_init,
lookup_dcookie, perf_event_open, quotactl. isolate uses none of them.

The three allowed act only on namespaces isolate made inside its own user
namespaces. Everything else stays as the default has it, and each box adds
its own, stricter filter for the program.

    deploy/seccomp.py [DEFAULT_PROFILE] > isolate-seccomp.json
"""
import json
import sys

NEEDED = ["sethostname", "setdomainname", "setns"]


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/containers/seccomp.json"
    with open(path) as f:
        profile = json.load(f)
    refused = []
    rules = []
    for rule in profile["syscalls"]:
        names = [n for n in rule["names"] if n not in NEEDED]
        caps = rule.get("includes", {}).get("caps", []) + rule.get("excludes", {}).get("caps", [])
        if "CAP_SYS_ADMIN" in caps:
            # The pair "allowed with CAP_SYS_ADMIN" / "refused without":
            # refused whatever the capabilities.
            if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("args"):
                refused += [n for n in names if n not in refused]
            continue
        if rule.get("includes") or rule.get("excludes"):
            # Drop the needed ones from every other conditional rule.
            rule["names"] = names
        if rule["names"]:
            rules.append(rule)
    profile["syscalls"] = rules
    if refused:
        profile["syscalls"].append({
            "names": refused, "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args": [],
            "comment": "isolate: what CAP_SYS_ADMIN would allow and isolate does not use"})
    profile["syscalls"].append({"names": NEEDED, "action": "SCMP_ACT_ALLOW", "args": [],
                                "comment": "isolate: box setup in its own namespaces"})
    json.dump(profile, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
