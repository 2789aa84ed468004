/**
 * One session: a child process plus the output waiting to be collected, its recent output by
 * offset, its live listeners and its metadata. Output is fanned out to the pending buffer (for
 * exec/write responses), the output ring (for readers that resume) and listeners alike, so no
 * consumer steals from another.
 *
 * It must never lose bytes between reads and responses: an incomplete UTF-8 sequence at the end
 * of a drain is carried to the next one until the child has closed.
 *
 * @module
 */

import type { Usage } from "../sandbox/containment/session_cgroup.ts";
import type { EndReason } from "../events/bus.ts";
import { BACKGROUND_NICE, setAutogroupNice } from "../pty/autogroup.ts";
import { Child, type ChildFds, type ChildSink, type ExitStatus } from "../pty/child.ts";
import type { Reactor } from "../io/reactor.ts";
import { concat, HeadTailBuffer } from "../output/head_tail.ts";
import { CharCarry } from "../output/carry.ts";
import { PlainRenderer } from "../output/plain.ts";
import type { Screen } from "../output/screen.ts";
import { OutputRing } from "../output/output_ring.ts";
import type { ResolvedPolicy } from "../sandbox/policy/policy.ts";

/** Public description of a live session. */
export interface SessionInfo {
  session_id: number;
  /** The node it runs on (`UEXEC_NODE_ID`). */
  node: string;
  /** The agent that started it (`operator` for the operator's own). */
  agent: string;
  command: string;
  workdir: string;
  tty: boolean;
  profile: string;
  /** True when a terminal emulator follows it (`screen: true`): `screen` output works. */
  screen: boolean;
  pid: number;
  started_at: string;
  last_used_at: string;
}

/** What a session was started with. */
export interface SessionMeta {
  id: number;
  /** The node it runs on. */
  node: string;
  /** Who started it: an agent's name, or `operator`. */
  owner: string;
  command: string;
  workdir: string;
  tty: boolean;
  /** Sandbox profile name and the policy resolved from it. */
  profile: string;
  policy: ResolvedPolicy;
  /** The terminal emulator to feed every output byte, for sessions that asked for one. */
  screen?: Screen;
}

/** Output taken from a session. */
export interface Taken {
  text: string;
  omittedBytes: number;
}

/** A listener for a session's raw output bytes and its end. */
export interface SessionListener {
  /**
   * Output arrived (the bytes are valid only during the call); `offset` is the byte offset of
   * its first byte in everything the session ever printed.
   */
  output?(bytes: Uint8Array, offset: number): void;
  /** The child ended and all its output was delivered. */
  ended?(status: ExitStatus): void;
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();

function join(...parts: Uint8Array[]): Uint8Array {
  return concat(parts.filter((p) => p.length > 0), parts.reduce((n, p) => n + p.length, 0));
}

/** A live (or just ended) session. */
export class Session implements ChildSink {
  readonly id: number;
  readonly owner: string;
  /** The node it runs on. */
  readonly node: string;
  readonly command: string;
  readonly workdir: string;
  readonly tty: boolean;
  readonly profile: string;
  readonly policy: ResolvedPolicy;
  readonly startedAt = new Date();
  readonly startedMs = performance.now();
  /** When a call last used it, in ms since the epoch. */
  lastUsedAt = Date.now();
  /** Why it ended, once decided by whoever ends it; defaults to a plain exit. */
  endReason: EndReason = "exit";
  /** What its whole process tree used, once it ended (where its cgroup accounts it). */
  usage?: Usage;
  #child?: Child;
  #pending = new HeadTailBuffer();
  #ring = new OutputRing();
  #carry = new CharCarry();
  /** Plain-mode state carried between calls (a split sequence, the line being drawn). */
  #plain?: PlainRenderer;
  #screen?: Screen;
  #listeners = new Set<SessionListener>();
  /** Calls waiting on it now (see {@link attend}). */
  #attending = 0;
  #exit?: ExitStatus;
  #closed = Promise.withResolvers<ExitStatus>();
  #onClose: (session: Session, status: ExitStatus) => void;

  constructor(meta: SessionMeta, onClose: (session: Session, status: ExitStatus) => void) {
    this.id = meta.id;
    this.owner = meta.owner;
    this.node = meta.node;
    this.command = meta.command;
    this.workdir = meta.workdir;
    this.tty = meta.tty;
    this.profile = meta.profile;
    this.policy = meta.policy;
    this.#screen = meta.screen;
    if (this.#screen) this.#screen.ondrain = () => this.#child?.resume();
    this.#onClose = onClose;
  }

  /** Attach the started child; from now on the reactor delivers its output here. */
  attach(reactor: Reactor, fds: ChildFds): void {
    this.#child = new Child(reactor, fds, this);
  }

  /** The child process. */
  get child(): Child {
    return this.#child!;
  }

  /** The exit status once the child closed. */
  get exit(): ExitStatus | undefined {
    return this.#exit;
  }

  /** Resolves with the exit status once the child closed. */
  get closed(): Promise<ExitStatus> {
    return this.#closed.promise;
  }

  /** Output bytes the session printed so far (the offset of the next byte). */
  get offset(): number {
    return this.#ring.end;
  }

  /** Mark the session used now. */
  touch(): void {
    this.lastUsedAt = Date.now();
  }

  /** Listen to raw output and the end from now on; returns the unsubscribe function. */
  listen(listener: SessionListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The bytes waiting to be collected (with any carried partial character), without taking them. */
  peekBytes(): Uint8Array {
    if (this.#pending.size === 0) return this.#carry.rest;
    const { head, tail } = this.#pending.peek();
    return join(this.#carry.rest, head, tail);
  }

  /** Take the output waiting to be collected. */
  take(): Taken {
    const { head, tail, omitted } = this.#pending.drain();
    const final = this.#exit !== undefined;
    if (omitted > 0) {
      const first = join(this.#carry.rest, head);
      this.#carry.drop();
      const rest = this.#carry.complete(tail, final);
      return {
        text: `${decoder.decode(first)}\n…${omitted} bytes omitted…\n${decoder.decode(rest)}`,
        omittedBytes: omitted,
      };
    }
    return { text: decoder.decode(this.#carry.complete(join(head, tail), final)), omittedBytes: 0 };
  }

  /**
   * Taken text as a reader sees it (`plain`); what a sequence or line split at the end
   * leaves unfinished carries to the next call.
   */
  plain(text: string): string {
    this.#plain ??= new PlainRenderer();
    this.#plain.feed(text);
    return this.#plain.take();
  }

  /** Output was taken without plain rendering: the carried plain state no longer follows. */
  forgetPlain(): void {
    this.#plain = undefined;
  }

  /** The terminal emulator, for sessions started with `screen: true`. */
  get screen(): Screen | undefined {
    return this.#screen;
  }

  /**
   * A call waits on this session until the returned function is called (once). A screen
   * session runs in the background otherwise: its emulator at the lowest weight (see
   * output/screen.ts) and its processes' session at the weakest autogroup nice, since its child
   * runs at its emulator's pace and no one is waiting for it; while a call waits, both at their
   * normal weight.
   */
  attend(): () => void {
    if (!this.#screen) return () => {};
    const endScreen = this.#screen.attend();
    if (this.#attending++ === 0) this.#weigh(0);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      endScreen();
      if (--this.#attending === 0) this.#weigh(BACKGROUND_NICE);
    };
  }

  /** Set the autogroup nice of the child's session while its pid is still ours. */
  #weigh(nice: number): void {
    const child = this.#child;
    if (child && !child.exited) setAutogroupNice(child.pid, nice);
  }

  /** The session left the store: drop what it holds beyond its output (its emulator). */
  dispose(): void {
    this.#screen?.close();
    this.#screen = undefined;
  }

  /**
   * Put back output a call took but could not deliver (its caller went away): it comes first in
   * the next take, before whatever arrived since.
   */
  restore(text: string): void {
    const since = this.#pending.drain();
    const carried = this.#carry.rest;
    this.#carry.drop();
    for (const part of [encoder.encode(text), carried, since.head, since.tail]) {
      if (part.length > 0) this.#pending.push(part);
    }
  }

  /** Recent output by offset, for readers that resume; reading it takes nothing away. */
  get ring(): OutputRing {
    return this.#ring;
  }

  /** ChildSink: output arrived. */
  output(bytes: Uint8Array): void {
    const offset = this.#ring.end;
    this.#pending.push(bytes);
    this.#ring.push(bytes);
    // A screen that falls behind pauses the child (as a slow terminal does) until it caught up.
    if (this.#screen && !this.#screen.feed(bytes)) this.#child?.pause();
    for (const listener of this.#listeners) listener.output?.(bytes, offset);
  }

  /** ChildSink: the child ended and its output is drained. */
  ended(status: ExitStatus): void {
    this.#exit = status;
    this.#onClose(this, status);
    this.#closed.resolve(status);
    for (const listener of this.#listeners) listener.ended?.(status);
  }

  /** Description for the sessions API. */
  info(): SessionInfo {
    return {
      session_id: this.id,
      node: this.node,
      agent: this.owner,
      command: this.command,
      workdir: this.workdir,
      tty: this.tty,
      profile: this.profile,
      screen: this.#screen !== undefined,
      pid: this.child.pid,
      started_at: this.startedAt.toISOString(),
      last_used_at: new Date(this.lastUsedAt).toISOString(),
    };
  }
}
