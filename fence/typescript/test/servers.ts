/**
 * Real HTTP servers on 127.0.0.1 (free ports) that fence PUT /<lease name>
 * three ways: `fenced` served through `nodeListener`, `expressFence` in a
 * real Express app, and `expressFence` called with node:http's plain
 * (req, res, next). Each answers an admitted request with 200 and the
 * verified fence as JSON, and counts how often its handler ran.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import express, { type NextFunction, type Request as ExpressRequest, type Response as ExpressResponse } from "express";

import { expressFence, fenced, Keyset, MemoryTokenStore, nodeListener, type Advance, type TokenStore, type Verified } from "../src/index.js";
import { vectors } from "./vectors.js";

/** A running server. */
export interface Started {
  /** "http://127.0.0.1:port". */
  readonly url: string;
  /** The highest tokens the server admitted. */
  readonly store: MemoryTokenStore;
  /** How many requests reached the handler. */
  handled(): number;
  /** Errors the server saw (a failing store). */
  readonly errors: unknown[];
  /** Stops the server and its connections. */
  close(): Promise<void>;
}

/** The keyset of the vectors, as a store would pin it. */
export const keyset = Keyset.parse(vectors.keyset);

/** A memory store that fails for lease names starting with "broken", as a database that went away. */
class TestStore implements TokenStore {
  constructor(readonly memory: MemoryTokenStore) {}

  async advance(name: string, token: bigint): Promise<Advance> {
    if (name.startsWith("broken")) throw new Error(`token store unreachable for ${name}`);
    return this.memory.advance(name, token);
  }
}

/** The handler's answer: the verified fence, u64s in decimal. */
function fenceJson(verified: Verified, body?: string): Record<string, unknown> {
  const { fence } = verified;
  return { name: fence.name, token: String(fence.token), holder: fence.holder, keyId: verified.keyId, body };
}

/** Listens on a free port of 127.0.0.1. */
async function listen(server: Server, rest: Omit<Started, "url" | "close">): Promise<Started> {
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const { port } = server.address() as AddressInfo;
  return {
    ...rest,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((ok, fail) => {
        server.close((err) => (err ? fail(err) : ok()));
        server.closeAllConnections();
      }),
  };
}

/** `fenced` around a fetch-style handler, served by `nodeListener`. */
export async function startFetch(): Promise<Started> {
  const store = new MemoryTokenStore();
  const errors: unknown[] = [];
  let handled = 0;
  const handler = fenced(
    async (request, verified) => {
      handled++;
      return Response.json(fenceJson(verified, await request.text()));
    },
    {
      keyset,
      resource: (request) => decodeURIComponent(new URL(request.url).pathname.slice(1)),
      store: new TestStore(store),
    },
  );
  const server = createServer(nodeListener(handler, { onError: (err) => errors.push(err) }));
  return listen(server, { store, errors, handled: () => handled });
}

/** `expressFence` on a route of a real Express app. */
export async function startExpress(): Promise<Started> {
  const store = new MemoryTokenStore();
  const errors: unknown[] = [];
  let handled = 0;
  const app = express();
  app.put(
    "/:name",
    expressFence({ keyset, resource: (req: ExpressRequest) => String(req.params.name), store: new TestStore(store) }),
    (_req: ExpressRequest, res: ExpressResponse) => {
      handled++;
      res.json(fenceJson(res.locals.tenureFence!));
    },
  );
  app.use((err: unknown, _req: ExpressRequest, res: ExpressResponse, _next: NextFunction) => {
    errors.push(err);
    res.status(500).json({ error: String(err) });
  });
  return listen(createServer(app), { store, errors, handled: () => handled });
}

/** `expressFence` called by hand from a node:http listener, with a plain next(). */
export async function startPlainNode(): Promise<Started> {
  const store = new MemoryTokenStore();
  const errors: unknown[] = [];
  let handled = 0;
  const fence = expressFence({
    keyset,
    resource: (req: IncomingMessage) => decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname.slice(1)),
    store: new TestStore(store),
  });
  const server = createServer((req: IncomingMessage, res: ServerResponse & { locals?: Record<string, unknown> }) => {
    fence(req, res, (err?: unknown) => {
      if (err !== undefined) {
        errors.push(err);
        res.statusCode = 500;
        res.end();
        return;
      }
      handled++;
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(fenceJson(res.locals!.tenureFence as Verified)));
    });
  });
  return listen(server, { store, errors, handled: () => handled });
}
