// The approvals inbox: everything pending that the signed-in principal may see,
// with the tool, the exact (stored, redacted) arguments, the policy hash and the
// risk; decide here. Below, the decided ones with who decided and when.

import { ApprovalState } from "../../../generated/ts/palyra/v1/common_pb.js";
import type { Approval } from "../../../generated/ts/palyra/v1/common_pb.js";
import { ListApprovalsResponseSchema } from "../../../generated/ts/palyra/v1/approvals_pb.js";
import type { Api } from "../api";
import { approvalStateName, riskName, scopeName } from "../tape";
import { Age, ApprovalDecider, ErrorLine, Json, Section, usePoll, When } from "../ui";

export function ApprovalCard({ api, approval, onDone }: { api: Api; approval: Approval; onDone: () => void }) {
  const risk = riskName(approval.riskLevel || approval.prompt?.riskLevel || 0);
  return (
    <article class="approval-card" data-approval={approval.approvalId} aria-label={`Approval ${approval.approvalId}`}>
      <div class="card-head">
        <strong>{approval.toolName}</strong>
        <span class={`badge risk-${risk}`}>risk {risk}</span>
      </div>
      {approval.prompt?.title && <p>{approval.prompt.title}</p>}
      <dl class="facts">
        <dt>Run</dt><dd>{approval.runId ? <a href={`#/runs/${encodeURIComponent(approval.runId)}`}><code>{approval.runId}</code></a> : "—"}</dd>
        <dt>Requested</dt><dd><Age ms={approval.createdAtUnixMs} /> by {approval.requestedBy?.principal || "—"}</dd>
        <dt>Policy hash</dt><dd><code class="hash">{approval.policyHash || "—"}</code></dd>
        <dt>Expires</dt><dd><When ms={approval.expiresAtUnixMs} /></dd>
      </dl>
      <details open><summary>Arguments</summary><Json text={approval.argsJson} /></details>
      <ApprovalDecider api={api} approvalId={approval.approvalId} onDone={onDone} />
    </article>
  );
}

export function ApprovalsPage({ api }: { api: Api }) {
  const [pending, error, reload] = usePoll(
    () => api.get("/v1/approvals", ListApprovalsResponseSchema, { state: "APPROVAL_STATE_PENDING", limit: 100 }), 2000, [api]);
  const [all, allError, reloadAll] = usePoll(
    () => api.get("/v1/approvals", ListApprovalsResponseSchema, { limit: 200 }), 5000, [api]);
  const decided = (all?.approvals ?? []).filter((a) => a.state !== ApprovalState.PENDING)
    .sort((a, b) => Number(b.decidedAtUnixMs - a.decidedAtUnixMs)).slice(0, 50);
  const done = () => { reload(); reloadAll(); };
  return (
    <>
      <Section title={`Pending approvals (${pending?.approvals.length ?? 0})`}>
        <ErrorLine error={error} />
        {pending?.approvals.length === 0 && <p class="muted">Nothing waits for a decision.</p>}
        <div class="cards">
          {pending?.approvals.map((a) => <ApprovalCard key={a.approvalId} api={api} approval={a} onDone={done} />)}
        </div>
      </Section>
      <Section title="Decided">
        <ErrorLine error={allError} />
        <div class="table-wrap">
          <table>
            <thead><tr><th scope="col">Tool</th><th scope="col">Outcome</th><th scope="col">Scope</th><th scope="col">Decided by</th><th scope="col">When</th><th scope="col">Reason</th></tr></thead>
            <tbody>
              {decided.map((a) => (
                <tr key={a.approvalId} data-approval={a.approvalId}>
                  <td>{a.toolName}</td><td>{approvalStateName(a.state)}</td><td>{scopeName(a.scope)}</td>
                  <td>{a.decidedBy || "—"}</td><td><When ms={a.decidedAtUnixMs} /></td><td>{a.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </Section>
    </>
  );
}
