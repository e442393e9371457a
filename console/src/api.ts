// The daemon's public HTTP/JSON + SSE API, typed by the spec's generated messages
// (generated/ts, protoc-gen-es): requests are built with create() and sent as
// proto3 JSON; answers are parsed with fromJson(), so a field the spec renames
// breaks the build, not the page.

import { create, fromJson, toJson } from "@bufbuild/protobuf";
import type { DescMessage, JsonValue, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import { ErrorDetailSchema } from "../../generated/ts/palyra/v1/errors_pb.js";
import { authHeaders, type Credentials } from "./auth";
import { readSse, type SseFrame } from "./sse";

export class ApiError extends Error {
  constructor(message: string, readonly status: number, readonly code: string) {
    super(message);
  }
}

const JSON_OPTIONS = { ignoreUnknownFields: true } as const;

/** Proto3 JSON of a request built from its schema (unset fields omitted). */
export function body<D extends DescMessage>(schema: D, init: MessageInitShape<D>): JsonValue {
  return toJson(schema, create(schema, init));
}

export function parse<D extends DescMessage>(schema: D, json: JsonValue): MessageShape<D> {
  return fromJson(schema, json, JSON_OPTIONS);
}

async function failure(response: Response): Promise<ApiError> {
  const text = await response.text();
  try {
    const detail = parse(ErrorDetailSchema, JSON.parse(text) as JsonValue);
    return new ApiError(detail.message || text, response.status, errorCodeName(JSON.parse(text)));
  } catch {
    return new ApiError(text || response.statusText, response.status, "");
  }
}

function errorCodeName(json: unknown): string {
  const code = (json as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : "";
}

export interface Api {
  credentials: Credentials;
  get<D extends DescMessage>(path: string, schema: D, query?: Record<string, string | number | boolean>): Promise<MessageShape<D>>;
  post<D extends DescMessage>(path: string, schema: D, json?: JsonValue): Promise<MessageShape<D>>;
  del<D extends DescMessage>(path: string, schema: D): Promise<MessageShape<D>>;
  patch<D extends DescMessage>(path: string, schema: D, json: JsonValue): Promise<MessageShape<D>>;
  /** Open an SSE stream; resolves when it ends, rejects on an HTTP or `event: error` failure. */
  stream(path: string, init: StreamInit, onFrames: (frames: SseFrame[]) => void): Promise<void>;
}

export interface StreamInit {
  method?: "GET" | "POST";
  json?: JsonValue;
  query?: Record<string, string | number | boolean>;
  lastEventId?: string;
  signal?: AbortSignal;
  /** Called once the daemon has accepted the stream (headers received). */
  onOpen?: () => void;
}

function withQuery(path: string, query?: Record<string, string | number | boolean>): string {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== "" && v !== undefined) params.set(k, String(v));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

export function createApi(credentials: Credentials, base = ""): Api {
  const headers = authHeaders(credentials);
  async function unary<D extends DescMessage>(method: string, path: string, schema: D,
                                               json?: JsonValue): Promise<MessageShape<D>> {
    const response = await fetch(base + path, {
      method,
      headers: json === undefined ? headers : { ...headers, "content-type": "application/json" },
      body: json === undefined ? undefined : JSON.stringify(json),
    });
    if (!response.ok) throw await failure(response);
    return parse(schema, (await response.json()) as JsonValue);
  }
  return {
    credentials,
    get: (path, schema, query) => unary("GET", withQuery(path, query), schema),
    post: (path, schema, json) => unary("POST", path, schema, json ?? {}),
    del: (path, schema) => unary("DELETE", path, schema),
    patch: (path, schema, json) => unary("PATCH", path, schema, json),
    async stream(path, init, onFrames) {
      const h: Record<string, string> = { ...headers, accept: "text/event-stream" };
      if (init.json !== undefined) h["content-type"] = "application/json";
      if (init.lastEventId) h["last-event-id"] = init.lastEventId;
      const response = await fetch(base + withQuery(path, init.query), {
        method: init.method ?? "GET",
        headers: h,
        body: init.json === undefined ? undefined : JSON.stringify(init.json),
        signal: init.signal,
      });
      if (!response.ok) throw await failure(response);
      init.onOpen?.();
      let error: ApiError | null = null;
      await readSse(response, (frames) => {
        const good = frames.filter((f) => f.event !== "error");
        const bad = frames.find((f) => f.event === "error");
        if (good.length > 0) onFrames(good);
        if (bad) {
          const json = JSON.parse(bad.data) as { message?: string; code?: string };
          error = new ApiError(json.message ?? bad.data, 200, json.code ?? "");
        }
      });
      if (error) throw error;
    },
  };
}

/** `GET /healthz` needs no credentials. */
export async function health(base = ""): Promise<JsonValue> {
  const response = await fetch(`${base}/healthz`);
  return (await response.json()) as JsonValue;
}
