// Run context for agent runtimes: set once per run, inherited by subagents, carried across
// `await` by AsyncLocalStorage. The runtime (not the model) owns these ids: `runId` names one user
// request; `stepId` names a logical step and stays the same when the model re-plans or the run
// resumes - name steps after what they are ("charge-deposit"), never after a tool-call counter.
import { AsyncLocalStorage } from "node:async_hooks";
import { createHash, randomUUID } from "node:crypto";

export interface RunContext {
  readonly runId: string;
  readonly stepId: string;
  readonly parentRunId: string;
  readonly agent: string;
}

const storage = new AsyncLocalStorage<RunContext>();

export function currentContext(): RunContext {
  const ctx = storage.getStore();
  if (ctx === undefined) {
    throw new Error("no effectgate run context: wrap the agent run in withRun(...)");
  }
  return ctx;
}

export interface RunOptions {
  runId?: string;
  agent?: string;
  parentRunId?: string;
}

/** One agent run. Pass the id your runtime persists, so a resumed run keeps it. */
export function withRun<T>(run: string | RunOptions, fn: () => T): T {
  const opts = typeof run === "string" ? { runId: run } : run;
  const ctx: RunContext = {
    runId: opts.runId || `run-${randomUUID().replaceAll("-", "")}`,
    stepId: "",
    parentRunId: opts.parentRunId ?? "",
    agent: opts.agent ?? "",
  };
  return storage.run(ctx, fn);
}

/** The logical step the tool calls inside `fn` belong to. */
export function withStep<T>(stepId: string, fn: () => T): T {
  if (!stepId) {
    throw new Error("stepId must not be empty");
  }
  return storage.run({ ...currentContext(), stepId }, fn);
}

/** A subagent keeps the run and the step: two subagents that both believe they own a step make
 * one action. Only `agent` changes, for tracing. */
export function withSubagent<T>(agent: string, fn: () => T): T {
  return storage.run({ ...currentContext(), agent }, fn);
}

/** A step id from stable parts (node name, loop index, business ids): same parts, same id. */
export function stableStepId(...parts: unknown[]): string {
  const digest = createHash("sha256").update(parts.map(String).join("\x1f")).digest("hex");
  return `step-${digest.slice(0, 24)}`;
}
