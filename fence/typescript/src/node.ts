/**
 * Serving a fetch-style handler (such as one wrapped by {@link fenced}) with
 * node:http, which speaks IncomingMessage and ServerResponse, not Request
 * and Response: `createServer(nodeListener(handler))`.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";

/** A fetch-style handler. */
export type FetchHandler = (request: Request) => Response | Promise<Response>;

/** Options of {@link nodeListener}. */
export interface NodeListenerOptions {
  /**
   * Called with an error the handler threw (the client gets a 500).
   * Default: `console.error`.
   */
  readonly onError?: (err: unknown) => void;
}

/**
 * A node:http request listener that turns each request into a fetch
 * `Request` (URL from the Host header, headers, streamed body, a signal
 * that aborts when the client goes away), calls `handler`, and writes its
 * `Response` back with backpressure. A request whose Host or headers a
 * `Request` cannot carry gets 400; a handler that throws, 500.
 *
 * ```ts
 * createServer(nodeListener(fenced(handler, { keyset, resource }))).listen(8080);
 * ```
 */
export function nodeListener(
  handler: FetchHandler,
  options: NodeListenerOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  const onError = options.onError ?? ((err: unknown) => console.error("fetch handler failed:", err));
  return (req, res) => void serve(handler, onError, req, res);
}

/** Serves one request. Never rejects. */
async function serve(
  handler: FetchHandler,
  onError: (err: unknown) => void,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const gone = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) gone.abort();
  });
  let request: Request;
  try {
    request = toRequest(req, gone.signal);
  } catch {
    plain(res, 400, "bad request: its Host or headers cannot form a URL and fetch headers\n");
    return;
  }
  let response: Response;
  try {
    response = await handler(request);
  } catch (err) {
    onError(err);
    if (res.headersSent) res.destroy();
    else plain(res, 500, "internal server error\n");
    return;
  }
  res.statusCode = response.status;
  if (response.statusText !== "") res.statusMessage = response.statusText;
  for (const [name, value] of response.headers) {
    if (name !== "set-cookie") res.setHeader(name, value);
  }
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) res.setHeader("set-cookie", cookies);
  if (response.body === null) {
    res.end();
    return;
  }
  try {
    await pipeline(Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>), res);
  } catch {
    // The client went away or the body failed mid-way: the connection is
    // closed by pipeline; nothing else can be told to the client.
  }
}

/** A fetch `Request` for a node:http request. Throws on a Host or header a Request refuses. */
export function toRequest(req: IncomingMessage, signal?: AbortSignal): Request {
  const tls = (req.socket as { encrypted?: boolean }).encrypted === true;
  const url = new URL(req.url ?? "/", `${tls ? "https" : "http"}://${req.headers.host ?? "localhost"}`);
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
  const method = req.method ?? "GET";
  const body = method === "GET" || method === "HEAD" ? null : (Readable.toWeb(req) as ReadableStream<Uint8Array>);
  const init: RequestInit & { duplex?: "half" } = { method, headers, body, signal: signal ?? null };
  if (body !== null) init.duplex = "half";
  return new Request(url, init);
}

/** A short plain-text answer. */
function plain(res: ServerResponse, status: number, text: string): void {
  res.statusCode = status;
  res.setHeader("content-type", "text/plain; charset=utf-8");
  res.end(text);
}
