/**
 * File-system checks shared by tests.
 *
 * @module
 */

/** Whether `path` exists (a symbolic link counts when its target does). */
export function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}
