/**
 * Runs commands under a sandbox policy in a fresh Worker that restricts its own thread with
 * `applySandbox` (tests/fixtures/sandbox/enforce_worker.ts) and spawns them from it.
 *
 * @module
 */

import type { WorkerReply, WorkerRequest } from "../fixtures/sandbox/enforce_worker.ts";

const WORKER = new URL("../fixtures/sandbox/enforce_worker.ts", import.meta.url);

/**
 * The worker's reply to `req`: the commands' results, or the error that stopped it. A root test
 * process gets a staging directory of its own for the mount view (`opts.view`) unless it names
 * one, with `req.cwd` as the workdir.
 */
export async function runSandboxed(req: WorkerRequest): Promise<WorkerReply> {
  const staging = req.opts.view || Deno.uid() !== 0 ? undefined : await Deno.makeTempDir();
  if (staging) req = { ...req, opts: { ...req.opts, view: { staging, workdir: req.cwd } } };
  const worker = new Worker(WORKER, { type: "module" });
  try {
    const reply = new Promise<WorkerReply>((resolve, reject) => {
      worker.onmessage = (e: MessageEvent<WorkerReply>) => resolve(e.data);
      worker.onerror = (e) => reject(new Error(e.message));
    });
    worker.postMessage(req);
    return await reply;
  } finally {
    worker.terminate();
    if (staging) await Deno.remove(staging);
  }
}
