#!/usr/bin/env python3
"""Writes the container's seccomp profile: the engine's default profile
(podman: /usr/share/containers/seccomp.json; Docker's is the same format)
with the system calls isolate needs to set up a box allowed, which the
default allows only to a container with CAP_SYS_ADMIN:

  sethostname, setdomainname  the box's UTS namespace (hostname "isolate")
  setns                       joining a persistent box's namespaces

They act only on namespaces isolate made inside its own user namespaces:
without CAP_SYS_ADMIN in the container's, the kernel refuses them there.
Everything else stays as the default has it, and each box adds its own,
stricter filter for the program.

    deploy/seccomp.py [DEFAULT_PROFILE] > isolate-seccomp.json
"""
import json
import sys

NEEDED = ["sethostname", "setdomainname", "setns"]


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/containers/seccomp.json"
    with open(path) as f:
        profile = json.load(f)
    for rule in profile["syscalls"]:
        # Drop them from every conditional rule, allowed or refused.
        if rule.get("includes") or rule.get("excludes"):
            rule["names"] = [n for n in rule["names"] if n not in NEEDED]
    profile["syscalls"] = [r for r in profile["syscalls"] if r["names"]]
    profile["syscalls"].append({"names": NEEDED, "action": "SCMP_ACT_ALLOW", "args": [],
                                "comment": "isolate: box setup in its own namespaces"})
    json.dump(profile, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
