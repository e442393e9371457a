// Shared pieces of the pages: polling, errors, times, the approval decision form.

import { useEffect, useRef, useState } from "preact/hooks";
import type { ComponentChildren } from "preact";
import { ApprovalDecision, ApprovalScope } from "../../generated/ts/palyra/v1/common_pb.js";
import { DecideApprovalRequestSchema, DecideApprovalResponseSchema } from "../../generated/ts/palyra/v1/approvals_pb.js";
import { body, type Api } from "./api";

/** Call `load` now and every `ms` while mounted; returns [value, error, reload]. */
export function usePoll<T>(load: () => Promise<T>, ms: number, deps: unknown[] = []):
    [T | null, string, () => void] {
  const [value, setValue] = useState<T | null>(null);
  const [error, setError] = useState("");
  const [tick, setTick] = useState(0);
  const latest = useRef(load);
  latest.current = load;
  useEffect(() => {
    let alive = true;
    let timer = 0;
    const run = async () => {
      try {
        const v = await latest.current();
        if (alive) { setValue(v); setError(""); }
      } catch (e) {
        if (alive) setError(messageOf(e));
      }
      if (alive && ms > 0) timer = window.setTimeout(run, ms);
    };
    void run();
    return () => { alive = false; window.clearTimeout(timer); };
  }, [...deps, tick]);
  return [value, error, () => setTick((t) => t + 1)];
}

export function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

export function ErrorLine({ error }: { error: string }) {
  return error ? <p class="error" role="alert">{error}</p> : null;
}

export function Age({ ms }: { ms: number | bigint }) {
  const t = Number(ms);
  if (!t) return <span>—</span>;
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  const text = s < 60 ? `${s}s` : s < 3600 ? `${Math.floor(s / 60)}m` : s < 86400 ? `${Math.floor(s / 3600)}h` : `${Math.floor(s / 86400)}d`;
  return <time dateTime={new Date(t).toISOString()} title={new Date(t).toLocaleString()}>{text} ago</time>;
}

export function When({ ms }: { ms: number | bigint }) {
  const t = Number(ms);
  return t ? <time dateTime={new Date(t).toISOString()}>{new Date(t).toLocaleString()}</time> : <span>—</span>;
}

export function Section({ title, children, actions }: { title: string; children: ComponentChildren; actions?: ComponentChildren }) {
  return (
    <section class="card">
      <header class="card-head"><h2>{title}</h2>{actions}</header>
      {children}
    </section>
  );
}

/** Approve or deny one approval with a scope and, for timeboxed, a TTL. */
export function ApprovalDecider({ api, approvalId, onDone }: { api: Api; approvalId: string; onDone?: () => void }) {
  const [scope, setScope] = useState<ApprovalScope>(ApprovalScope.ONCE);
  const [ttl, setTtl] = useState(3600);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const decide = async (decision: ApprovalDecision) => {
    setBusy(true);
    setError("");
    try {
      await api.post(`/v1/approvals/${encodeURIComponent(approvalId)}:decide`, DecideApprovalResponseSchema,
        body(DecideApprovalRequestSchema, {
          approvalId, decision, scope,
          ttlSeconds: scope === ApprovalScope.TIMEBOXED ? ttl : 0,
          reason: "decided in the web console",
        }));
      onDone?.();
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setBusy(false);
    }
  };
  const id = `d-${approvalId}`;
  return (
    <div class="decider">
      <label for={`${id}-scope`}>Scope</label>
      <select id={`${id}-scope`} value={scope} onChange={(e) => setScope(Number(e.currentTarget.value))}>
        <option value={ApprovalScope.ONCE}>once</option>
        <option value={ApprovalScope.SESSION}>this session</option>
        <option value={ApprovalScope.TIMEBOXED}>timeboxed</option>
      </select>
      <label for={`${id}-ttl`}>TTL (s)</label>
      <input id={`${id}-ttl`} type="number" min={1} value={ttl} disabled={scope !== ApprovalScope.TIMEBOXED}
             onInput={(e) => setTtl(Number(e.currentTarget.value))} />
      <button class="approve" disabled={busy} onClick={() => decide(ApprovalDecision.APPROVE)}>Approve</button>
      <button class="deny" disabled={busy} onClick={() => decide(ApprovalDecision.DENY)}>Deny</button>
      <ErrorLine error={error} />
    </div>
  );
}

/** Pretty-print a JSON string when it parses, else show it as is. */
export function Json({ text }: { text: string }) {
  let shown = text;
  try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch { /* shown as stored */ }
  return <pre class="json">{shown}</pre>;
}
