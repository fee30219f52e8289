"""Files back out of a box by glob: ``collect=["reports/*.xml"]``.

After the command, the box's own /bin/sh expands the patterns in the working directory and
packs the regular files they match (symlinks, FIFOs and the like skipped) into one archive in
/tmp, bounded in count and bytes; the archive is copied out and unpacked here. The archive is
made before the command starts, so it exists whatever the command does; a command the box
stopped (time, memory) collects nothing.
"""

import dataclasses
from typing import Dict, List, Sequence, Tuple

ARCHIVE = "/tmp/.isolate-collect"

# $1: the command; $2...: the patterns. Each file: "SIZE KEPT PATH\n" then its first KEPT bytes;
# "+ N" when more files matched than the count allows; "=" when packing ended. The command's exit
# status (or its signal, re-raised) is the box's.
SCRIPT = r'''
out=%(archive)s
: > "$out"
/bin/sh -c "$1"
s=$?
shift
n=0
total=0
for pat in "$@"; do
  for f in $pat; do
    case "$f" in *'
'*) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    n=$((n + 1))
    if [ "$n" -gt %(files)d ]; then printf '+ %%s\n' "$n" >> "$out"; break 2; fi
    size=$(wc -c < "$f") || continue
    take=$((%(bytes)d - total))
    [ "$take" -gt "$size" ] && take=$size
    printf '%%s %%s %%s\n' "$size" "$take" "$f" >> "$out"
    head -c "$take" "$f" >> "$out"
    total=$((total + take))
  done
done
printf '=\n' >> "$out"
if [ "$s" -gt 128 ] && [ "$s" -lt 160 ]; then kill -$((s - 128)) $$; fi
exit "$s"
'''


@dataclasses.dataclass(frozen=True)
class CollectLimits:
    """At most ``max_files`` files and ``max_bytes`` bytes of them all come back."""

    max_files: int = 100
    max_bytes: int = 16 << 20

    def __post_init__(self) -> None:
        if self.max_files <= 0 or self.max_bytes <= 0:
            raise ValueError("collect limits must be positive")


def collect_command(command: str, patterns: Sequence[str], limits: CollectLimits
                    ) -> Tuple[List[str], List[str]]:
    """The box's command that runs ``command`` under ``sh -c`` and then packs what the
    patterns match; and the box file to copy out."""
    for p in patterns:
        if not p or "\n" in p:
            raise ValueError(f"collect pattern {p!r}: a non-empty glob on one line")
    script = SCRIPT % {"archive": ARCHIVE, "files": limits.max_files,
                       "bytes": limits.max_bytes}
    return ["/bin/sh", "-c", script, "collect", command] + list(patterns), [ARCHIVE]


def unpack(files: Dict[str, bytes], errors: Dict[str, str], limits: CollectLimits
           ) -> Tuple[Dict[str, bytes], List[str]]:
    """The archive's files (path as matched -> bytes) and notes on what was cut or lost.

    The box wrote the archive, so it is read as untrusted: the bounds are enforced here again,
    and a path is only a name (never joined to a host path here)."""
    if ARCHIVE in errors:
        return {}, [f"collected files not returned: {errors[ARCHIVE]}"]
    data = files.get(ARCHIVE)
    if data is None:
        return {}, ["collected files not returned: the command did not finish"]
    out: Dict[str, bytes] = {}
    notes: List[str] = []
    total = pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            notes.append("collected files: none, the command did not finish" if not data
                         else "collected files: the archive ends early")
            break
        header = data[pos:end].decode("utf-8", "replace")
        pos = end + 1
        if header == "=":
            break
        if header.startswith("+ ") or len(out) == limits.max_files:
            notes.append(f"collected files cut at {limits.max_files} files")
            break
        try:
            size_text, length_text, path = header.split(" ", 2)
            size, length = int(size_text), int(length_text)
        except ValueError:
            size = length = -1
        if not 0 <= length <= size or pos + length > len(data):
            notes.append("collected files: the archive is malformed")
            break
        kept = min(length, limits.max_bytes - total)
        out[path] = data[pos:pos + kept]
        pos += length
        total += kept
        if kept < size:
            notes.append(f"collected file {path} cut to {kept} of {size} bytes "
                         f"(all files together at most {limits.max_bytes})")
    return out, notes
