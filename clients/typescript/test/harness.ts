// A real gateway for the tests: the Stripe simulator and `effectgate serve` as child processes
// of the project's Python (EFFECTGATE_PYTHON, default ../../.venv/bin/python), on loopback.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..", "..", "..");
export const python = process.env["EFFECTGATE_PYTHON"] || join(root, ".venv", "bin", "python");
const API_KEY = "sk_test_effectgate_ts";

/** Starts a child and resolves with the first stdout line matching `pattern`. */
function startChild(args: string[], pattern: RegExp, env: NodeJS.ProcessEnv = {}, cwd?: string): Promise<[ChildProcess, RegExpMatchArray]> {
  const child = spawn(python, args, { cwd, env: { ...process.env, ...env, PYTHONUNBUFFERED: "1" }, stdio: ["ignore", "pipe", "pipe"] });
  const seen: string[] = [];
  child.stderr!.on("data", (chunk: Buffer) => seen.push(chunk.toString()));
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`${args.join(" ")} did not start:\n${seen.join("")}`)), 60000);
    const lines = createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      seen.push(line + "\n");
      const found = line.match(pattern);
      if (found) {
        clearTimeout(timer);
        ok([child, found]);
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`${args.join(" ")} exited ${code}:\n${seen.join("")}`));
    });
  });
}

export interface Tls {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

/** A throw-away CA with a server certificate (127.0.0.1, localhost) and a client certificate. */
export function makeCA(folder: string): Tls {
  const ssl = (...args: string[]): void => {
    execFileSync("openssl", args, { stdio: "ignore" });
  };
  const p = (name: string): string => join(folder, name);
  ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=effectgate ts test CA", "-keyout", p("ca.key"), "-out", p("ca.crt"));
  const signed = (name: string, ext: string): void => {
    writeFileSync(p(`${name}.ext`), ext + "\n");
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", `/CN=${name}`, "-keyout", p(`${name}.key`), "-out", p(`${name}.csr`));
    ssl("x509", "-req", "-in", p(`${name}.csr`), "-CA", p("ca.crt"), "-CAkey", p("ca.key"), "-CAcreateserial", "-days", "1", "-extfile", p(`${name}.ext`), "-out", p(`${name}.crt`));
  };
  signed("gateway", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth");
  signed("agent", "extendedKeyUsage=clientAuth");
  return { ca: p("ca.crt"), serverCert: p("gateway.crt"), serverKey: p("gateway.key"), clientCert: p("agent.crt"), clientKey: p("agent.key") };
}

export class LiveGateway {
  private constructor(
    readonly target: string,
    readonly simUrl: string,
    private readonly children: ChildProcess[],
    private readonly dir: string,
  ) {}

  /** `env`: more environment for `effectgate serve` (OTEL_* for the tracing test). Its config
   * and store live in a directory of its own under the temporary directory, removed by stop(). */
  static async start(options: { tls?: Tls; mutual?: boolean; simLatency?: number; env?: NodeJS.ProcessEnv } = {}): Promise<LiveGateway> {
    const dir = mkdtempSync(join(tmpdir(), "effectgate-ts-"));
    try {
      return await LiveGateway.startIn(dir, options);
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }

  private static async startIn(dir: string, options: { tls?: Tls; mutual?: boolean; simLatency?: number; env?: NodeJS.ProcessEnv }): Promise<LiveGateway> {
    const simArgs = ["-m", "effectgate_lab.simulators", "stripe", "--api-key", API_KEY, "--search-lag", "0.3"];
    if (options.simLatency) {
      simArgs.push("--latency", String(options.simLatency));
    }
    const [sim, simLine] = await startChild(simArgs, /(http:\/\/127\.0\.0\.1:\d+)/);
    const tls = options.tls
      ? `tls = { cert_file = "${options.tls.serverCert}", key_file = "${options.tls.serverKey}"${options.mutual ? `, client_ca_file = "${options.tls.ca}"` : ""} }\n`
      : "";
    const config = join(dir, "effectgate.toml");
    writeFileSync(
      config,
      `[server]\nlisten = "127.0.0.1:0"\n${tls}[store]\nurl = "sqlite:///${dir}/eg.db"\n` +
        `[gateway]\nlease_ttl = "5s"\nreconcile_interval = "0.5s"\n` +
        `[adapters.stripe]\napi_base = "${simLine[1]}"\napi_key_env = "EG_TS_STRIPE_KEY"\n` +
        `[tools.charge_card]\nadapter = "stripe"\nconsistency_window = "1s"\nattempt_timeout = "3s"\n` +
        `[tools.charge_approved]\nadapter = "stripe"\nconsistency_window = "1s"\nattempt_timeout = "3s"\napproval = "required"\n`,
    );
    try {
      const [gateway, found] = await startChild(
        ["-m", "effectgate.gateway", "--log-level", "WARNING", "serve", "--config", config],
        /serving on port (\d+)/,
        { ...options.env, EG_TS_STRIPE_KEY: API_KEY },
      );
      return new LiveGateway(`127.0.0.1:${found[1]}`, simLine[1]!, [gateway, sim], dir);
    } catch (error) {
      sim.kill("SIGKILL");
      throw error;
    }
  }

  /** Payment intents the simulator's ledger holds for `customer`: the effects that happened. */
  async effects(customer: string): Promise<number> {
    const response = await fetch(`${this.simUrl}/_sim/ledger`);
    const { ledger } = (await response.json()) as { ledger: { kind: string; params: Record<string, string> }[] };
    return ledger.filter((e) => e.kind === "payment_intent" && e.params["customer"] === customer).length;
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.children.map(
        (child) =>
          new Promise<void>((done) => {
            if (child.exitCode !== null) {
              return done();
            }
            child.once("exit", () => done());
            child.kill("SIGTERM");
          }),
      ),
    );
    rmSync(this.dir, { recursive: true, force: true }); // the processes that wrote there are gone
  }
}

export interface ReceivedSpan {
  service: string;
  name: string;
  kind: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
}

/** The project's OTLP/HTTP receiver (tests/otlp_receiver.py) as a child process. */
export class OtlpReceiver {
  private constructor(
    readonly endpoint: string,
    private readonly child: ChildProcess,
  ) {}

  static async start(): Promise<OtlpReceiver> {
    const [child, found] = await startChild(["-m", "tests.otlp_receiver"], /otlp receiver on (http:\/\/\S+)/, {}, root);
    return new OtlpReceiver(found[1]!, child);
  }

  /** Every span received so far, with its resource's service.name. */
  async spans(): Promise<ReceivedSpan[]> {
    return (await (await fetch(`${this.endpoint}/spans`)).json()) as ReceivedSpan[];
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null) {
      await new Promise<void>((done) => {
        this.child.once("exit", () => done());
        this.child.kill("SIGTERM");
      });
    }
  }
}
