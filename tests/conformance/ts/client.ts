// The TypeScript conformance client: connect-node over gRPC to the palyra daemon,
// using the generated descriptors in generated/ts.
//
// Two ways to run it (both print JSON, one result per line):
//   npx tsx tests/conformance/ts/client.ts <op> '<json args>' --port P [--token T] [--principal p] [--device-id d]
//   npx tsx tests/conformance/ts/client.ts stdio --port P ...   (one JSON op per stdin line)
// The Python conformance suite drives the stdio mode, so every scenario is written
// once (in Python) and executed through this client exactly like the grpc and http ones.
//
// ops:
//   {"op": "call",   "service": "GatewayService", "method": "GetRun", "request": {...}}
//   {"op": "stream", "service": "GatewayService", "method": "WatchRun", "request": {...},
//                    "max_events": N, "until": ["tool_approval_request"], "timeout_ms": T}
//   {"op": "bidi",   "service": "GatewayService", "method": "RunStream", "requests": [{...}], ...same limits}
// Any op may carry "headers" to override/remove ("" value) the default call headers.
import { createInterface } from "node:readline";
import { fromJson, toJson, type DescMessage, type DescMethod, type DescService, type JsonValue } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { ApprovalsService } from "../../../generated/ts/palyra/v1/approvals_pb.js";
import { GatewayService } from "../../../generated/ts/palyra/v1/gateway_pb.js";
import { JournalService } from "../../../generated/ts/palyra/v1/journal_pb.js";
import { UsageService } from "../../../generated/ts/palyra/v1/usage_pb.js";

type Json = { [key: string]: unknown };
const SERVICES: Record<string, DescService> = {
  GatewayService, ApprovalsService, JournalService, UsageService,
};

interface Options { port: number; host: string; headers: Record<string, string> }

function parseOptions(argv: string[]): Options {
  const flag = (name: string, fallback = ""): string => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 && i + 1 < argv.length ? argv[i + 1] : fallback;
  };
  const headers: Record<string, string> = {
    "x-palyra-principal": flag("principal", "user:ts"),
    "x-palyra-device-id": flag("device-id", "01J0000000000000000000000T"),
  };
  const token = flag("token");
  if (token) headers["authorization"] = `Bearer ${token}`;
  return { port: Number(flag("port", "7443")), host: flag("host", "127.0.0.1"), headers };
}

function method(service: string, name: string): DescMethod {
  const svc = SERVICES[service];
  const found = svc?.methods.find((m) => m.name === name);
  if (!found) throw new Error(`unknown method ${service}/${name}`);
  return found;
}

function headersFor(defaults: Record<string, string>, overrides: unknown): Record<string, string> {
  const merged: Record<string, string> = { ...defaults };
  for (const [k, v] of Object.entries((overrides ?? {}) as Record<string, string>)) {
    if (v === "") delete merged[k]; else merged[k] = v;
  }
  return merged;
}

function errorJson(err: unknown): Json {
  const e = ConnectError.from(err);
  return { error: { grpc_code: e.code, code: e.metadata.get("x-palyra-error-code") ?? "", message: e.rawMessage } };
}

// The oneof member name of a TapeEvent in proto3-JSON (camelCase) → snake_case kind.
function kindOf(event: Json): string {
  const skip = new Set(["runId", "tapeSeq", "position", "tsUnixMs", "sessionId"]);
  const key = Object.keys(event).find((k) => !skip.has(k)) ?? "";
  return key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

async function runOp(transport: Transport, opts: Options, op: Json): Promise<Json> {
  const desc = method(String(op.service), String(op.method));
  const client = createClient(SERVICES[String(op.service)], transport) as unknown as Record<string, (...args: unknown[]) => unknown>;
  const headers = headersFor(opts.headers, op.headers);
  const call = client[desc.localName].bind(client);
  const input = (v: unknown) => fromJson(desc.input as DescMessage, (v ?? {}) as JsonValue);
  const output = (m: unknown) => toJson(desc.output as DescMessage, m as never) as Json;
  try {
    if (op.op === "call") {
      return { response: output(await (call(input(op.request), { headers }) as Promise<unknown>)) };
    }
    const abort = new AbortController();
    const timeout = setTimeout(() => abort.abort(), Number(op.timeout_ms ?? 30000));
    const maxEvents = Number(op.max_events ?? 1e9);
    const until = new Set((op.until as string[] | undefined) ?? []);
    const responses: Json[] = [];
    let ended = false;
    async function* requests() {
      for (const r of (op.requests as unknown[]) ?? []) yield input(r);
    }
    const stream = (op.op === "bidi" ? call(requests(), { headers, signal: abort.signal })
      : call(input(op.request), { headers, signal: abort.signal })) as AsyncIterable<unknown>;
    try {
      for await (const message of stream) {
        const json = output(message);
        responses.push(json);
        const event = json.event as Json | undefined;
        if (responses.length >= maxEvents || (event && until.has(kindOf(event)))) break;
      }
      ended = responses.length < maxEvents && !responses.some((r) => r.event && until.has(kindOf(r.event as Json)));
    } catch (err) {
      if (!abort.signal.aborted) return { responses, ...errorJson(err) };
    } finally {
      clearTimeout(timeout);
      abort.abort();
    }
    return { responses, ended };
  } catch (err) {
    return errorJson(err);
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const opts = parseOptions(argv);
  const transport = createGrpcTransport({ baseUrl: `http://${opts.host}:${opts.port}` });
  if (argv[0] === "stdio") {
    const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
    for await (const line of lines) {
      if (!line.trim()) continue;
      const result = await runOp(transport, opts, JSON.parse(line) as Json);
      process.stdout.write(JSON.stringify(result) + "\n");
    }
    return;
  }
  const op = { op: argv[0], ...(JSON.parse(argv[1] ?? "{}") as Json) };
  process.stdout.write(JSON.stringify(await runOp(transport, opts, op)) + "\n");
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ error: { code: "CLIENT", message: String(err) } }) + "\n");
  process.exit(1);
});
