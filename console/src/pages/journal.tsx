// The journal: head, event count, the last signed checkpoint (from the head; sign
// a new one), "verify now" (streamed: a determinate bar of the positions checked,
// then the result), and the
// export of a session bundle (NDJSON, verifiable offline with
// `palyra journal verify --bundle`).

import { useEffect, useState } from "preact/hooks";
import type { VerifyJournalResponse } from "../../../generated/ts/palyra/v1/journal_pb.js";
import { CreateCheckpointResponseSchema, ExportJournalResponseSchema, GetJournalHeadResponseSchema, WatchJournalVerifyResponseSchema } from "../../../generated/ts/palyra/v1/journal_pb.js";
import type { JsonValue } from "@bufbuild/protobuf";
import { parse, type Api } from "../api";
import { ErrorLine, messageOf, Section, usePoll, When } from "../ui";

export function JournalPage({ api }: { api: Api }) {
  const [head, headError, reloadHead] = usePoll(() => api.get("/v1/journal/head", GetJournalHeadResponseSchema), 3000, [api]);
  const [verify, setVerify] = useState<VerifyJournalResponse | null>(null);
  const [verifying, setVerifying] = useState<number | null>(null);
  // Positions checked and the head when the walk began; kept once it is done.
  const [progress, setProgress] = useState<{ checked: number; total: number } | null>(null);
  const [elapsed, setElapsed] = useState(0);
  const [error, setError] = useState("");
  const [sessionId, setSessionId] = useState("");
  const [exported, setExported] = useState<{ url: string; bytes: number; name: string } | null>(null);
  const [exportChunks, setExportChunks] = useState<number | null>(null);

  useEffect(() => {
    if (verifying === null) return;
    const timer = setInterval(() => setElapsed(Date.now() - verifying), 100);
    return () => clearInterval(timer);
  }, [verifying]);

  const runVerify = async () => {
    setError("");
    setVerify(null);
    setProgress(null);
    setVerifying(Date.now());
    setElapsed(0);
    try {
      await api.stream("/v1/journal:watchVerify", {}, (frames) => {
        for (const f of frames) {
          const step = parse(WatchJournalVerifyResponseSchema, JSON.parse(f.data) as JsonValue);
          const checked = Number(step.checked);
          // Events appended during the walk are verified too: the bar grows with them.
          setProgress({ checked, total: Math.max(Number(step.total), checked) });
          if (step.result) setVerify(step.result);
        }
      });
    } catch (e) {
      setError(messageOf(e));
    } finally {
      setVerifying(null);
    }
  };

  const sign = async () => {
    setError("");
    try { await api.post("/v1/journal:checkpoint", CreateCheckpointResponseSchema, {}); reloadHead(); }
    catch (e) { setError(messageOf(e)); }
  };

  const runExport = async (e: Event) => {
    e.preventDefault();
    setError("");
    if (exported) URL.revokeObjectURL(exported.url);
    setExported(null);
    setExportChunks(0);
    const parts: Uint8Array[] = [];
    try {
      await api.stream("/v1/journal:export", { query: { session_id: sessionId.trim() } }, (frames) => {
        for (const f of frames) parts.push(parse(ExportJournalResponseSchema, JSON.parse(f.data) as JsonValue).chunk);
        setExportChunks(parts.length);
      });
      const blob = new Blob(parts as BlobPart[], { type: "application/x-ndjson" });
      const name = `palyra-${sessionId.trim() || "journal"}.ndjson`;
      setExported({ url: URL.createObjectURL(blob), bytes: blob.size, name });
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setExportChunks(null);
    }
  };

  const total = Number(head?.eventCount ?? 0n);
  return (
    <>
      <Section title="Journal">
        <ErrorLine error={headError} />
        {head && (
          <dl class="facts">
            <dt>Events</dt><dd data-testid="event-count">{total}</dd>
            <dt>Head position</dt><dd>{String(head.headPosition)}</dd>
            <dt>Head hash</dt><dd><code class="hash">{head.headHash}</code></dd>
            {head.prunedThrough > 0n && <><dt>Pruned through</dt><dd>{String(head.prunedThrough)}</dd></>}
          </dl>
        )}
      </Section>
      <Section title="Verify">
        <p class="muted">Re-hashes the whole chain on the daemon and checks every signed checkpoint and compaction digest.</p>
        <button onClick={runVerify} disabled={verifying !== null}>Verify now</button>
        {progress && (
          <div role="status" class="progress">
            <progress aria-label="Verifying the journal" data-testid="verify-progress" value={progress.checked} max={Math.max(progress.total, 1)} />
            <span data-testid="verify-checked">{progress.checked} / {progress.total} positions checked</span>
            {verifying !== null && <span class="muted">{(elapsed / 1000).toFixed(1)} s</span>}
          </div>
        )}
        {verify && (
          <div role="status" data-testid="verify-result" class={verify.ok ? "result ok" : "result failed"}>
            {verify.ok
              ? <p>Intact: {String(verify.eventCount)} events, {verify.checkpointsVerified} signed checkpoints verified, head <code class="hash">{verify.headHash.slice(0, 16)}…</code></p>
              : <p>Tampered at position {String(verify.firstBadPosition ?? "?")}: {verify.reason}</p>}
          </div>
        )}
      </Section>
      <Section title="Last signed checkpoint">
        {head && !head.lastCheckpoint && <p class="muted" data-testid="no-checkpoint">No checkpoint has been signed yet.</p>}
        {head?.lastCheckpoint && (
          <dl class="facts" data-testid="last-checkpoint">
            <dt>Position</dt><dd data-testid="checkpoint-position">{String(head.lastCheckpoint.position)}
              {head.headPosition > head.lastCheckpoint.position && <span class="muted"> ({String(head.headPosition - head.lastCheckpoint.position)} events behind the head)</span>}</dd>
            <dt>Head hash</dt><dd><code class="hash">{head.lastCheckpoint.headHash}</code></dd>
            <dt>Signed</dt><dd><When ms={head.lastCheckpoint.tsUnixMs} /></dd>
            <dt>Key (ed25519 public)</dt><dd><code class="hash" data-testid="checkpoint-key">{head.lastCheckpoint.publicKey}</code></dd>
            <dt>Signature</dt><dd><code class="hash">{head.lastCheckpoint.signature}</code></dd>
          </dl>
        )}
        <button onClick={sign}>Sign the head now</button>
      </Section>
      <Section title="Export a bundle">
        <form class="inline" onSubmit={runExport}>
          <label for="export-session">Session id (empty: everything you may see)</label>
          <input id="export-session" value={sessionId} onInput={(e) => setSessionId(e.currentTarget.value)} />
          <button type="submit" disabled={exportChunks !== null}>Export</button>
        </form>
        {exportChunks !== null && <p role="status">received {exportChunks} chunks…</p>}
        {exported && <p><a href={exported.url} download={exported.name}>Download {exported.name}</a> ({exported.bytes} bytes)</p>}
        <ErrorLine error={error} />
      </Section>
    </>
  );
}
