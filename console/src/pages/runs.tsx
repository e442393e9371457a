// A live list of runs. The API has no "list runs" call, so the list is built from
// what it does offer: each session's latest run and every run with a pending
// approval, refreshed every few seconds.

import { ApprovalState } from "../../../generated/ts/palyra/v1/common_pb.js";
import type { Run } from "../../../generated/ts/palyra/v1/common_pb.js";
import { ListApprovalsResponseSchema } from "../../../generated/ts/palyra/v1/approvals_pb.js";
import { GetRunResponseSchema, ListSessionsResponseSchema } from "../../../generated/ts/palyra/v1/gateway_pb.js";
import type { Api } from "../api";
import { runStateName } from "../tape";
import { Age, ErrorLine, Section, usePoll } from "../ui";

async function loadRuns(api: Api): Promise<Run[]> {
  const [sessions, approvals] = await Promise.all([
    api.get("/v1/sessions", ListSessionsResponseSchema, { limit: 100 }),
    api.get("/v1/approvals", ListApprovalsResponseSchema, { state: "APPROVAL_STATE_PENDING", limit: 100 }),
  ]);
  const ids = new Set<string>();
  for (const s of sessions.sessions) if (s.lastRunId) ids.add(s.lastRunId);
  for (const a of approvals.approvals) if (a.runId && a.state === ApprovalState.PENDING) ids.add(a.runId);
  const runs = await Promise.all([...ids].map((id) =>
    api.get(`/v1/runs/${encodeURIComponent(id)}`, GetRunResponseSchema).then((r) => r.run, () => undefined)));
  return runs.filter((r): r is Run => r !== undefined)
    .sort((a, b) => Number(b.updatedAtUnixMs - a.updatedAtUnixMs));
}

export function RunsPage({ api }: { api: Api }) {
  const [runs, error] = usePoll(() => loadRuns(api), 2000, [api]);
  return (
    <Section title="Runs">
      <p class="muted">Each session's latest run and every run waiting for an approval; refreshed every 2 s.</p>
      <ErrorLine error={error} />
      <div class="table-wrap">
        <table>
          <thead><tr><th scope="col">Run</th><th scope="col">State</th><th scope="col">Session</th><th scope="col">Age</th><th scope="col">Turns</th><th scope="col">Pending approval</th></tr></thead>
          <tbody>
            {runs?.map((r) => (
              <tr key={r.runId}>
                <td><a href={`#/runs/${encodeURIComponent(r.runId)}`}><code>{r.runId}</code></a></td>
                <td><span class={`badge state-${r.state}`}>{runStateName(r.state)}</span></td>
                <td><code>{r.sessionId.slice(-10)}</code></td>
                <td><Age ms={r.createdAtUnixMs} /></td>
                <td>{r.turnCount}</td>
                <td>{r.pendingApprovalId ? <a href="#/approvals">{r.pendingApprovalId.slice(-8)}</a> : "—"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {runs?.length === 0 && <p class="muted">No runs yet.</p>}
    </Section>
  );
}
