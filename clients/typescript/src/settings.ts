// Where the gateway is and how to reach it: options first, then the environment.
// EFFECTGATE_TARGET (host:port), EFFECTGATE_TOKEN (bearer token; empty in development mode),
// EFFECTGATE_TLS_CA (PEM roots; set -> TLS), EFFECTGATE_TLS_CERT / EFFECTGATE_TLS_KEY (a client
// certificate for mTLS), EFFECTGATE_TLS=1 (TLS with the system's roots).
import { readFileSync } from "node:fs";
import type { SecureClientSessionOptions } from "node:http2";

export const DEFAULT_TARGET = "127.0.0.1:50051";

export interface ConnectionOptions {
  /** host:port of the gateway. */
  target?: string;
  /** Bearer token; empty (development mode) sends none. */
  token?: string;
  /** TLS with the system's roots, or with `caFile` / a client certificate. */
  tls?: boolean;
  caFile?: string;
  certFile?: string;
  keyFile?: string;
}

export interface Settings {
  target: string;
  token: string;
  tls: boolean;
  caFile: string;
  certFile: string;
  keyFile: string;
}

export function resolveSettings(opts: ConnectionOptions, env: NodeJS.ProcessEnv = process.env): Settings {
  const caFile = opts.caFile ?? env["EFFECTGATE_TLS_CA"] ?? "";
  const certFile = opts.certFile ?? env["EFFECTGATE_TLS_CERT"] ?? "";
  const keyFile = opts.keyFile ?? env["EFFECTGATE_TLS_KEY"] ?? "";
  if (Boolean(certFile) !== Boolean(keyFile)) {
    throw new Error("a client certificate needs both certFile and keyFile (EFFECTGATE_TLS_CERT/_KEY)");
  }
  const tls = opts.tls ?? Boolean(caFile || certFile || ["1", "true"].includes(env["EFFECTGATE_TLS"] ?? ""));
  if ((caFile || certFile) && !tls) {
    throw new Error("TLS files given but tls is false");
  }
  return {
    target: opts.target || env["EFFECTGATE_TARGET"] || DEFAULT_TARGET,
    token: opts.token ?? env["EFFECTGATE_TOKEN"] ?? "",
    tls,
    caFile,
    certFile,
    keyFile,
  };
}

export function baseUrl(settings: Settings): string {
  return `${settings.tls ? "https" : "http"}://${settings.target}`;
}

/** node:http2 options for TLS; the files are read when the client is made. */
export function tlsOptions(settings: Settings): SecureClientSessionOptions {
  if (!settings.tls) {
    return {};
  }
  const read = (path: string): Buffer | undefined => (path ? readFileSync(path) : undefined);
  return { ca: read(settings.caFile), cert: read(settings.certFile), key: read(settings.keyFile) };
}
