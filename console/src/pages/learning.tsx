// Learning: what post-run reflection proposes to remember, with its evidence
// (links to the tape events it came from); accept or reject.

import { AcceptCandidateRequestSchema, AcceptCandidateResponseSchema, ListCandidatesResponseSchema, RejectCandidateRequestSchema, RejectCandidateResponseSchema } from "../../../generated/ts/palyra/v1/learning_pb.js";
import { useState } from "preact/hooks";
import { body, type Api } from "../api";
import { Age, ErrorLine, messageOf, Section, usePoll } from "../ui";

const STATES = ["unspecified", "pending review", "applied", "accepted", "rejected"];

export function LearningPage({ api }: { api: Api }) {
  const [list, error, reload] = usePoll(() => api.get("/v1/learning/candidates", ListCandidatesResponseSchema, { limit: 200 }), 3000, [api]);
  const [actionError, setActionError] = useState("");
  const act = async (id: string, accept: boolean) => {
    setActionError("");
    try {
      const path = `/v1/learning/candidates/${encodeURIComponent(id)}:${accept ? "accept" : "reject"}`;
      if (accept) await api.post(path, AcceptCandidateResponseSchema, body(AcceptCandidateRequestSchema, { candidateId: id, reason: "accepted in the web console" }));
      else await api.post(path, RejectCandidateResponseSchema, body(RejectCandidateRequestSchema, { candidateId: id, reason: "rejected in the web console" }));
      reload();
    } catch (e) {
      setActionError(messageOf(e));
    }
  };
  const candidates = list?.candidates ?? [];
  return (
    <Section title="Learning candidates">
      <ErrorLine error={error || actionError} />
      {candidates.length === 0 && <p class="muted">No candidates.</p>}
      <div class="cards">
        {candidates.map((c) => (
          <article class="card-inner" key={c.candidateId} data-candidate={c.candidateId} aria-label={`Candidate ${c.candidateId}`}>
            <div class="card-head"><strong>{c.kind}</strong><span class="badge" data-testid="candidate-state">{STATES[c.state] ?? c.state}</span></div>
            <p>{c.text}</p>
            <p class="muted">confidence {(c.confidenceBps / 100).toFixed(0)} % · <Age ms={c.createdAtUnixMs} />
              {c.memoryId && <> · memory <code>{c.memoryId}</code></>}
              {c.decidedBy && <> · decided by {c.decidedBy}</>}</p>
            {c.runId && (
              <p>Evidence: {c.tapeSeqs.map((s) => (
                <a key={String(s)} class="evidence" href={`#/runs/${encodeURIComponent(c.runId)}?from=${String(s)}`}>event {String(s)} </a>
              ))}</p>
            )}
            {c.state === 1 && (
              <div class="actions">
                <button class="approve" onClick={() => act(c.candidateId, true)}>Accept</button>
                <button class="deny" onClick={() => act(c.candidateId, false)}>Reject</button>
              </div>
            )}
          </article>
        ))}
      </div>
    </Section>
  );
}
