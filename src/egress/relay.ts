/**
 * The egress proxy's byte relay: copies one socket to another until the first ends, then
 * half-closes the second, telling its caller of every chunk (for the byte counts and the idle
 * timer). Buffers start small, so a request or a short answer costs no large allocation, and a
 * bulk transfer (a read that fills its buffer) moves to large ones: on loopback the relay's cost
 * is the kernel's (a copy out, a copy in and TCP's own work per call), and fewer, larger calls
 * are what a user-space relay can save (a `splice` between the sockets would need their raw
 * descriptors, which Deno does not hand out, and measured slower on loopback anyway).
 *
 * Large buffers come from one server-wide budget ({@link BULK_BUDGET}), so no number of
 * connections, from however many sessions, makes the proxy hold more than that in them; a bulk
 * transfer that finds the budget spent keeps its small buffers. A transfer that ended cleanly
 * (no read left in flight) gives its large buffers to a small pool ({@link POOL_MAX}) for the
 * next one: a fresh 2 MiB buffer costs its allocation and a page fault per 4 KiB at its first
 * read, which a download paid before its first byte went on (measured: 0.3-0.6 ms of the
 * proxy's added time to first byte on a 100 MB download). The first chunk is written before the
 * next read is started for the same reason: that read may fill a large buffer before the write
 * gets its turn.
 *
 * It must never pool a buffer a read may still fill (bytes of one connection must never reach
 * another), never hold a large buffer past the end of its transfer outside the pool, and never
 * throw: a socket that fails ends the relay.
 *
 * @module
 */

/**
 * The first buffer (the second is made once a first chunk came: a direction that never carries a
 * byte, as a forwarded request's client side, holds one small buffer only), and the large ones a
 * bulk transfer moves to.
 */
const FIRST_CHUNK = 16 * 1024;
const SMALL_CHUNK = 256 * 1024;
const BULK_CHUNK = 2 * 1024 * 1024;
/** The bytes all relays together may hold in large buffers (16 bulk transfers at once). */
export const BULK_BUDGET = 64 * 1024 * 1024;

/** Large buffers kept for the next bulk transfer (8 MiB), beside the budget. */
export const POOL_MAX = 4;

/** Large buffers lent now, in bytes. */
let lent = 0;
/** Large buffers no transfer holds, kept for the next. */
const pool: Uint8Array<ArrayBuffer>[] = [];

/** A large buffer: one from the pool, else a new one. */
function bulkBuffer(): Uint8Array<ArrayBuffer> {
  return pool.pop() ?? new Uint8Array(BULK_CHUNK);
}

/** A buffer of `BULK_CHUNK` bytes if the budget has room for two more, else a small one. */
function bulkPair(): [Uint8Array<ArrayBuffer>, number] {
  if (lent + 2 * BULK_CHUNK > BULK_BUDGET) return [new Uint8Array(SMALL_CHUNK), 0];
  lent += 2 * BULK_CHUNK;
  return [bulkBuffer(), 2 * BULK_CHUNK];
}

/** Keeps the large ones of `buffers` in the pool while it has room; no read may be filling them. */
function giveBack(buffers: (Uint8Array<ArrayBuffer> | undefined)[]): void {
  for (const b of buffers) if (b?.length === BULK_CHUNK && pool.length < POOL_MAX) pool.push(b);
}

/** The large-buffer bytes lent now (for tests). */
export function bulkBytesLent(): number {
  return lent;
}

/** The large buffers pooled now (for tests). */
export function bulkBuffersPooled(): number {
  return pool.length;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
}

/**
 * Copies `from` to `to` until `from` ends, then half-closes `to`; `onChunk(n)` is told of every
 * chunk written. Two buffers: the next read runs while the last chunk is written. Resolves (never
 * rejects) when `from` ended or either socket failed or was closed; the caller closes both.
 */
export async function relay(
  from: Deno.Conn,
  to: Deno.Conn,
  onChunk: (n: number) => void,
): Promise<void> {
  let current = new Uint8Array(FIRST_CHUNK);
  let spare: Uint8Array<ArrayBuffer> | undefined;
  let grown = false;
  let borrowed = 0;
  // Set once every read has returned: only then may the buffers go to the pool.
  let settled = false;
  try {
    let n = await from.read(current);
    let first = true;
    while (n !== null) {
      if (!grown && n === current.length) {
        // A bulk transfer: `spare` is free here (written out last round); `current` is replaced
        // once written, below.
        grown = true;
        [spare, borrowed] = bulkPair();
      }
      spare ??= new Uint8Array(FIRST_CHUNK);
      let next: Promise<number | null>;
      if (first) {
        // The first chunk goes out before anything else is read (see the module doc).
        first = false;
        await writeAll(to, current.subarray(0, n));
        next = from.read(spare);
      } else {
        next = from.read(spare);
        // If the write fails, the caller closes both sockets, which ends this read.
        next.catch(() => {});
        await writeAll(to, current.subarray(0, n));
      }
      onChunk(n);
      if (grown && current.length !== spare.length) {
        current = spare.length === BULK_CHUNK ? bulkBuffer() : new Uint8Array(spare.length);
      }
      [current, spare] = [spare, current];
      n = await next;
    }
    settled = true;
    await to.closeWrite();
  } catch {
    // One side went away or was closed (idle): the other side is closed by the caller. A read
    // may still be in flight here, so nothing goes to the pool.
  } finally {
    if (borrowed > 0 && settled) giveBack([current, spare]);
    lent -= borrowed;
  }
}
