/**
 * `/proc/<pid>/mountinfo` read as a list of mounts: each line's mount point (its octal escapes
 * decoded), file system type, per-mount options and super block options, in the kernel's order
 * (stacked mounts bottom first). One parser for the mount view (enforce/), which wants the
 * per-mount flags, and for the cgroup hierarchies (containment/), which want the controllers a
 * `cgroup` mount holds in its super options. It only parses: it must never read a field from the
 * wrong side of the optional fields, and skips a line it cannot read rather than guess.
 *
 * @module
 */

/** One mount, as one line of mountinfo lists it. */
export interface MountInfo {
  /** Where it is mounted, escapes decoded. */
  mountPoint: string;
  /** Its file system type (`tmpfs`, `ext4`, `cgroup`, ...). */
  fsType: string;
  /** Per-mount options (`rw`, `nosuid`, `relatime`, ...). */
  mountOptions: string[];
  /** Super block options (for a v1 `cgroup` mount, its controllers among them). */
  superOptions: string[];
}

/** `\040` and the other octal escapes mountinfo writes for space, tab, newline, backslash. */
function unescape(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/**
 * The mounts a mountinfo text lists, in its order. A line is `id parent major:minor root
 * mount-point options [optional fields...] - type source super-options`: the separator `-` is
 * found after the six fixed fields, so an optional field never shifts what follows it.
 */
export function parseMountInfo(text: string): MountInfo[] {
  const mounts: MountInfo[] = [];
  for (const line of text.split("\n")) {
    const fields = line.split(" ");
    const dash = fields.indexOf("-", 6);
    if (dash < 0 || fields.length < dash + 2) continue;
    mounts.push({
      mountPoint: unescape(fields[4]),
      fsType: fields[dash + 1],
      mountOptions: fields[5].split(","),
      superOptions: fields[dash + 3]?.split(",") ?? [],
    });
  }
  return mounts;
}
