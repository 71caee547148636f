/**
 * Starts a real Tenure server (which starts its own nats-server) for a test
 * file, and small helpers to await events with a bound.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before } from "node:test";
import { setTimeout as delay } from "node:timers/promises";

import { Reason, TenureClient, TenureError, type ClientOptions, type LeaseEvent } from "../src";

/** The repository root: the first parent folder holding proto/tenure. */
export const repoRoot: string = (() => {
  let dir = __dirname;
  while (!existsSync(join(dir, "proto", "tenure"))) {
    const parent = resolve(dir, "..");
    if (parent === dir) throw new Error(`no repository root above ${__dirname}`);
    dir = parent;
  }
  return dir;
})();

/** The compiled client's entry point, for child processes. */
export const clientEntry = resolve(__dirname, "..", "src", "index.js");

/** A free TCP port on 127.0.0.1 (free when asked; the server binds it right after). */
async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.unref();
    server.on("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? ok(address.port) : fail(new Error("no port"))));
    });
  });
}

/** One running Tenure server with a fresh data directory. */
export class TenureServer {
  /** "127.0.0.1:port" of the gRPC listener. */
  readonly address: string;
  /** Resolves with the exit code (or signal name) once the process has exited. */
  readonly exited: Promise<number | string>;
  readonly #child: ChildProcess;
  readonly #dataDir: string;
  readonly #logs: string[] = [];

  private constructor(address: string, child: ChildProcess, dataDir: string) {
    this.address = address;
    this.#child = child;
    this.#dataDir = dataDir;
    child.stdout?.on("data", (chunk: Buffer) => this.#logs.push(chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => this.#logs.push(chunk.toString()));
    this.exited = new Promise((ok) => child.once("exit", (code, signal) => ok(code ?? signal ?? "unknown")));
  }

  /**
   * Starts `tenure serve` on a free port (with `extraArgs`, e.g. TLS and
   * auth flags) and waits (at most 30 s) until a GetLease call from a
   * client with `probe` options gets a Tenure answer from it.
   */
  static async start(
    extraArgs: string[] = [],
    probe: ClientOptions = {},
    where: { address?: string; nats?: NatsServer } = {},
  ): Promise<TenureServer> {
    const bin = process.env.TENURE_BIN ?? join(repoRoot, "target", "debug", "tenure");
    const nats = natsBinary();
    for (const [what, path] of [["TENURE_BIN", bin], ["NATS_SERVER", nats]]) {
      if (!existsSync(path)) throw new Error(`${what} ${path} does not exist (cargo build; scripts/tools.sh)`);
    }
    // A free port can be taken before Tenure binds it (by the nats-server it
    // starts, which picks its own free port): then start again on another.
    for (let attempt = 1; ; attempt++) {
      const dataDir = mkdtempSync(join(tmpdir(), "tenure-ts-"));
      const address = where.address ?? `127.0.0.1:${await freePort()}`;
      // With `where.nats`, a shared nats-server that outlives this Tenure (restart tests).
      const natsArgs = where.nats ? ["--nats-url", where.nats.url] : ["--data-dir", dataDir, "--nats-server", nats];
      const child = spawn(
        bin,
        ["serve", "--listen", address, ...natsArgs, "--log-format", "json", "--shutdown-grace", "1s", ...extraArgs],
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      const server = new TenureServer(address, child, dataDir);
      try {
        await server.#waitReady(30_000, probe);
        return server;
      } catch (err) {
        await server.stop();
        const taken = server.logs().includes("Address already in use");
        if (!taken || where.address !== undefined || attempt >= 3) throw err;
      }
    }
  }

  /**
   * Retries GetLease until the server answers it with a Tenure reason
   * (LEASE_NOT_FOUND, or UNAUTHENTICATED / PERMISSION_DENIED with auth on),
   * the process dies, or time runs out.
   */
  async #waitReady(timeoutMs: number, probe: ClientOptions): Promise<void> {
    const client = new TenureClient(this.address, probe);
    const until = Date.now() + timeoutMs;
    let exited = false;
    void this.exited.then(() => (exited = true));
    try {
      for (;;) {
        try {
          await client.getLease("readiness.probe", { timeoutMs: 1000 });
          return;
        } catch (err) {
          if (err instanceof TenureError && err.reason !== Reason.UNSPECIFIED) return;
          if (exited) throw new Error(`tenure exited during startup:\n${this.logs()}`);
          if (Date.now() > until) throw new Error(`tenure not ready after ${timeoutMs} ms: ${err}\n${this.logs()}`);
        }
        await delay(100);
      }
    } finally {
      client.close();
    }
  }

  /** What the server printed so far. */
  logs(): string {
    return this.#logs.join("");
  }

  /** SIGKILLs the server (no goodbye to its clients) and awaits its exit. */
  async kill(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill("SIGKILL");
      await this.exited;
    }
  }

  /**
   * Stops the server with SIGTERM (it stops its nats-server too), SIGKILL
   * after 10 s, awaits the exit and removes the data directory.
   */
  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill("SIGTERM");
      const timer = setTimeout(() => this.#child.kill("SIGKILL"), 10_000);
      await this.exited;
      clearTimeout(timer);
    }
    rmSync(this.#dataDir, { recursive: true, force: true });
  }
}

/** The nats-server binary. */
function natsBinary(): string {
  return process.env.NATS_SERVER ?? join(repoRoot, ".tools", "bin", "nats-server");
}

/** A nats-server with JetStream that several Tenure processes share (restart tests). */
export class NatsServer {
  /** "nats://127.0.0.1:port". */
  readonly url: string;
  readonly #child: ChildProcess;
  readonly #dir: string;
  readonly #exited: Promise<unknown>;

  private constructor(url: string, child: ChildProcess, dir: string) {
    this.url = url;
    this.#child = child;
    this.#dir = dir;
    this.#exited = new Promise((ok) => child.once("exit", ok));
  }

  /** Starts it on a free port and waits (at most 30 s) until it accepts connections. */
  static async start(): Promise<NatsServer> {
    const dir = mkdtempSync(join(tmpdir(), "tenure-ts-nats-"));
    const port = await freePort();
    const child = spawn(natsBinary(), ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", dir], {
      stdio: ["ignore", "ignore", "ignore"],
    });
    const nats = new NatsServer(`nats://127.0.0.1:${port}`, child, dir);
    const until = Date.now() + 30_000;
    for (;;) {
      const up = await new Promise<boolean>((ok) => {
        const socket = connect(port, "127.0.0.1", () => (socket.destroy(), ok(true)));
        socket.on("error", () => ok(false));
      });
      if (up) return nats;
      if (Date.now() > until) {
        await nats.stop();
        throw new Error("nats-server did not listen within 30 s");
      }
      await delay(50);
    }
  }

  /** Stops it and removes its store. */
  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill("SIGTERM");
      await this.#exited;
    }
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

/** Rejects after `ms` with a message naming what was awaited. */
export async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, fail) => {
    timer = setTimeout(() => fail(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves with the signal's reason once it aborts (at once if it has). */
export function aborted(signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  return new Promise((ok) => signal.addEventListener("abort", () => ok(signal.reason), { once: true }));
}

/** Reads events from a watch until one matches, at most `ms` milliseconds. */
export async function nextMatching(
  events: AsyncIterator<LeaseEvent>,
  what: string,
  match: (event: LeaseEvent) => boolean,
  ms = 10_000,
): Promise<LeaseEvent> {
  return within(ms, what, (async () => {
    for (;;) {
      const next = await events.next();
      if (next.done) throw new Error(`watch ended while waiting for ${what}`);
      if (match(next.value)) return next.value;
    }
  })());
}

/** A lease name unique to this process and call, under `prefix`. */
let counter = 0;
export function uniqueName(prefix: string): string {
  counter += 1;
  return `${prefix}.p${process.pid}-${counter}`;
}

/**
 * Starts one server (with `extraArgs`) and one client for the calling test
 * file (before its tests) and stops both after them; `ready` receives them.
 */
export function serverPerFile(ready: (server: TenureServer, client: TenureClient) => void, extraArgs: string[] = []): void {
  let server: TenureServer | undefined;
  let client: TenureClient | undefined;
  before(async () => {
    server = await TenureServer.start(extraArgs);
    client = new TenureClient(server.address);
    ready(server, client);
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });
}
