/**
 * Process checks shared by tests.
 *
 * @module
 */

/** Whether `pid` runs (a zombie, ended but not yet reaped by its parent, does not). */
export function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}
