// The raw Coordinator API over Connect's gRPC transport, with every error
// decoded into a CoordinatorError subclass.

import { createClient, type Client as ConnectClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type * as http2 from "node:http2";
import { Coordinator } from "./gen/coordinator/v1/coordinator_pb.js";
import { decodeError } from "./errors.js";

/** The Coordinator service's generated Connect client (unary calls return promises, streams async iterables). */
export type CoordinatorApi = ConnectClient<typeof Coordinator>;

/** TLS settings: PEM contents (not file names). */
export interface TlsOptions {
  /** CA certificate(s) to verify the coordinator with; default: the system roots. */
  ca?: string | Buffer | (string | Buffer)[];
  /** Client certificate (mTLS). */
  cert?: string | Buffer;
  /** Client certificate's private key (mTLS). */
  key?: string | Buffer;
  /** The name to verify the coordinator's certificate against; default: the address's host. */
  servername?: string;
}

export interface Connection {
  api: CoordinatorApi;
  close(): void;
}

/**
 * connect makes the transport to baseUrl ("http://host:port" or
 * "https://host:port"): HTTP/2 with keepalive pings (every 10s while
 * streams are open, within the coordinator's 5s minimum), and an interceptor
 * adding the bearer token.
 */
export function connect(baseUrl: string, tls: TlsOptions | undefined, token: string | undefined): Connection {
  const nodeOptions: http2.SecureClientSessionOptions = {};
  if (tls) {
    if (tls.ca !== undefined) nodeOptions.ca = tls.ca;
    if (tls.cert !== undefined) nodeOptions.cert = tls.cert;
    if (tls.key !== undefined) nodeOptions.key = tls.key;
    if (tls.servername !== undefined) nodeOptions.servername = tls.servername;
  }
  const sessionManager = new Http2SessionManager(
    baseUrl,
    { pingIntervalMs: 10_000, pingTimeoutMs: 5_000, idleConnectionTimeoutMs: 60_000 },
    nodeOptions,
  );
  const interceptors: Interceptor[] = [];
  if (token !== undefined) {
    const value = `Bearer ${token}`;
    interceptors.push((next) => (req) => {
      req.header.set("authorization", value);
      return next(req);
    });
  }
  const transport: Transport = createGrpcTransport({ baseUrl, sessionManager, interceptors });
  return {
    api: decoding(createClient(Coordinator, transport)),
    close: () => sessionManager.abort(),
  };
}

/** decoding wraps raw so that every call throws decoded errors. */
export function decoding(raw: CoordinatorApi): CoordinatorApi {
  const out: Record<string, unknown> = {};
  const fns = raw as unknown as Record<string, (...args: unknown[]) => unknown>;
  for (const [localName, method] of Object.entries(Coordinator.method)) {
    const fn = fns[localName]!;
    if ((method.methodKind as string) === "unary" || (method.methodKind as string) === "client_streaming") {
      out[localName] = async (...args: unknown[]) => {
        try {
          return await fn(...args);
        } catch (e) {
          throw decodeError(e);
        }
      };
    } else {
      out[localName] = (...args: unknown[]) => decodeStream(fn(...args) as AsyncIterable<unknown>);
    }
  }
  return out as CoordinatorApi;
}

async function* decodeStream<T>(it: AsyncIterable<T>): AsyncGenerator<T> {
  try {
    yield* it;
  } catch (e) {
    throw decodeError(e);
  }
}
