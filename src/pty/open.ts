/**
 * Opening and sizing pseudo-terminals, and the pipes used instead when `tty` is false.
 *
 * The parent keeps only the master (or its pipe ends), non-blocking and close-on-exec. The slave
 * is never opened here: the child opens it as its controlling terminal, so the master reports
 * EOF (EIO) as soon as the last process holding the slave is gone. A PTY belongs to the devpts
 * instance of the thread that opens it: each sandbox domain's spawner has its own.
 *
 * @module
 */

import { check, libc, O, OsError } from "../ffi/libc.ts";

const TIOCSWINSZ = 0x5414;
const FIONBIO = 0x5421;

/** A PTY: the master (non-blocking, close-on-exec) and the path of its slave. */
export interface Pty {
  readonly master: number;
  readonly slavePath: string;
}

/** A terminal size in character cells. */
export interface WindowSize {
  cols: number;
  rows: number;
}

/** Open a new PTY pair of the given size. */
export function openPty(size: WindowSize): Pty {
  const c = libc();
  const master = check("posix_openpt", c.posix_openpt(O.RDWR | O.NOCTTY | O.CLOEXEC | O.NONBLOCK));
  try {
    check("grantpt", c.grantpt(master));
    check("unlockpt", c.unlockpt(master));
    const name = new Uint8Array(128);
    const rc = c.ptsname_r(master, name, BigInt(name.length));
    if (rc !== 0) throw new OsError("ptsname_r", rc);
    const slavePath = new TextDecoder().decode(name.subarray(0, name.indexOf(0)));
    resizePty(master, size);
    return { master, slavePath };
  } catch (err) {
    c.close(master);
    throw err;
  }
}

/** Set the window size of a PTY through its master; the foreground group gets SIGWINCH. */
export function resizePty(master: number, size: WindowSize): void {
  const ws = new Uint16Array([size.rows, size.cols, 0, 0]);
  check("ioctl(TIOCSWINSZ)", libc().ioctl(master, BigInt(TIOCSWINSZ), new Uint8Array(ws.buffer)));
}

/** A pipe: `[readEnd, writeEnd]`, both close-on-exec. */
export function openPipe(): [number, number] {
  const fds = new Int32Array(2);
  check("pipe2", libc().pipe2(new Uint8Array(fds.buffer), O.CLOEXEC));
  return [fds[0], fds[1]];
}

/** Make `fd` non-blocking (for the parent's ends of pipes). */
export function setNonBlocking(fd: number): void {
  check(
    "ioctl(FIONBIO)",
    libc().ioctl(fd, BigInt(FIONBIO), new Uint8Array(new Int32Array([1]).buffer)),
  );
}
