// TLS and mTLS with a throw-away CA, against `effectgate serve` with [server] tls.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Code } from "@connectrpc/connect";
import { EffectGateClient, EffectGateError, State, chargeCard, withRun, withStep } from "../src/index.js";

// A refused handshake never reaches the gateway: no ErrorInfo reason, and connect-node reports
// the closed HTTP/2 stream as CANCELED (or UNAVAILABLE when the connection fails earlier).
const refused = (e: unknown): boolean =>
  e instanceof EffectGateError && e.reason === "" && [Code.Canceled, Code.Unavailable].includes(e.code);
import { LiveGateway, type Tls, makeCA } from "./harness.js";

const card = chargeCard({ customer: "cus_tls", amount: 500, currency: "usd", paymentMethod: "pm_card_visa" });

describe("TLS", () => {
  let tls: Tls;
  let server: LiveGateway;
  let mutual: LiveGateway;
  let caDir: string;

  before(async () => {
    caDir = mkdtempSync(join(tmpdir(), "effectgate-ts-ca-"));
    tls = makeCA(caDir);
    [server, mutual] = await Promise.all([LiveGateway.start({ tls }), LiveGateway.start({ tls, mutual: true })]);
  });
  after(async () => {
    try {
      await Promise.all([server?.stop(), mutual?.stop()]);
    } finally {
      rmSync(caDir, { recursive: true, force: true });
    }
  });

  test("TLS with a CA file; plaintext is refused", async () => {
    const client = new EffectGateClient({ target: server.target, caFile: tls.ca });
    try {
      const answer = await withRun("ts-tls", () => withStep("s", () => client.execute("charge_card", card, { scope: "o:1" })));
      assert.equal(answer.action!.state, State.CONFIRMED);
    } finally {
      client.close();
    }
    const plain = new EffectGateClient({ target: server.target, tls: false, timeoutMs: 5000 });
    try {
      await assert.rejects(plain.get("act_x"), refused);
    } finally {
      plain.close();
    }
  });

  test("mTLS: a client certificate from the environment; none is refused", async () => {
    const env = { EFFECTGATE_TARGET: mutual.target, EFFECTGATE_TLS_CA: tls.ca, EFFECTGATE_TLS_CERT: tls.clientCert, EFFECTGATE_TLS_KEY: tls.clientKey };
    Object.assign(process.env, env);
    let client: EffectGateClient;
    try {
      client = new EffectGateClient();
    } finally {
      for (const key of Object.keys(env)) {
        delete process.env[key];
      }
    }
    try {
      const answer = await withRun("ts-mtls", () => withStep("s", () => client.execute("charge_card", card, { scope: "o:2" })));
      assert.equal(answer.action!.state, State.CONFIRMED);
    } finally {
      client.close();
    }
    const noCert = new EffectGateClient({ target: mutual.target, caFile: tls.ca, timeoutMs: 5000 });
    try {
      await assert.rejects(noCert.get("act_x"), refused);
    } finally {
      noCert.close();
    }
  });
});
