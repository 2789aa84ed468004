/**
 * Reads /proc through libc over FFI: Deno lets scripts read /proc only under --allow-all, and
 * `deno task bench` runs with explicit permissions (FFI among them). Text files and directory
 * listings only.
 * @module
 */

const libc = Deno.dlopen("libc.so.6", {
  open: { parameters: ["buffer", "i32"], result: "i32" },
  read: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
  opendir: { parameters: ["buffer"], result: "pointer" },
  readdir: { parameters: ["pointer"], result: "pointer" },
  closedir: { parameters: ["pointer"], result: "i32" },
});

const O_RDONLY_CLOEXEC = 0o2000000;
/** Offset of d_name in glibc's struct dirent on 64-bit Linux (d_ino, d_off, d_reclen, d_type). */
const D_NAME_OFFSET = 19;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const chunk = new Uint8Array(64 * 1024);

function cString(path: string): Uint8Array<ArrayBuffer> {
  return encoder.encode(`${path}\0`);
}

/** The whole text of a /proc file; throws (like Deno.readTextFileSync) when it cannot be opened. */
export function readProcText(path: string): string {
  const fd = libc.symbols.open(cString(path), O_RDONLY_CLOEXEC);
  if (fd < 0) throw new Deno.errors.NotFound(`cannot open ${path}`);
  try {
    const parts: Uint8Array[] = [];
    for (;;) {
      const n = Number(libc.symbols.read(fd, chunk, BigInt(chunk.length)));
      if (n < 0) throw new Error(`cannot read ${path}`);
      if (n === 0) break;
      parts.push(chunk.slice(0, n));
    }
    const all = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.length;
    }
    return decoder.decode(all);
  } finally {
    libc.symbols.close(fd);
  }
}

/** Names in a /proc directory (without "." and ".."). */
export function listProcDir(path: string): string[] {
  const dir = libc.symbols.opendir(cString(path));
  if (dir === null) throw new Deno.errors.NotFound(`cannot open ${path}`);
  try {
    const names: string[] = [];
    for (let ent = libc.symbols.readdir(dir); ent !== null; ent = libc.symbols.readdir(dir)) {
      const name = Deno.UnsafePointerView.getCString(ent, D_NAME_OFFSET);
      if (name !== "." && name !== "..") names.push(name);
    }
    return names;
  } finally {
    libc.symbols.closedir(dir);
  }
}
