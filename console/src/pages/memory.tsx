// Memory: search your items, see where each came from (links to its run's tape), delete.

import { useState } from "preact/hooks";
import type { MemoryItem } from "../../../generated/ts/palyra/v1/memory_pb.js";
import { DeleteMemoryResponseSchema, ListMemoryResponseSchema, SearchMemoryRequestSchema, SearchMemoryResponseSchema } from "../../../generated/ts/palyra/v1/memory_pb.js";
import { body, type Api } from "../api";
import { Age, ErrorLine, messageOf, Section, usePoll } from "../ui";

export function MemoryPage({ api }: { api: Api }) {
  const [query, setQuery] = useState("");
  const [hits, setHits] = useState<{ item: MemoryItem; score: number }[] | null>(null);
  const [list, error, reload] = usePoll(() => api.get("/v1/memory", ListMemoryResponseSchema, { limit: 100 }), 0, [api]);
  const [actionError, setActionError] = useState("");
  const search = async (e: Event) => {
    e.preventDefault();
    setActionError("");
    try {
      const found = await api.post("/v1/memory:search", SearchMemoryResponseSchema, body(SearchMemoryRequestSchema, { query, limit: 20 }));
      setHits(found.hits.filter((h) => h.item).map((h) => ({ item: h.item!, score: h.scoreBps })));
    } catch (err) { setActionError(messageOf(err)); }
  };
  const remove = async (id: string) => {
    setActionError("");
    try { await api.del(`/v1/memory/${encodeURIComponent(id)}`, DeleteMemoryResponseSchema); setHits(null); reload(); }
    catch (err) { setActionError(messageOf(err)); }
  };
  const shown = hits ?? (list?.items ?? []).map((item) => ({ item, score: -1 }));
  return (
    <Section title="Memory">
      <form class="inline" onSubmit={search}>
        <label for="memory-query">Search</label>
        <input id="memory-query" value={query} onInput={(e) => setQuery(e.currentTarget.value)} />
        <button type="submit">Search</button>
        {hits && <button type="button" class="link" onClick={() => setHits(null)}>Show all</button>}
      </form>
      <ErrorLine error={error || actionError} />
      <div class="cards">
        {shown.map(({ item, score }) => (
          <article class="card-inner" key={item.memoryId}>
            <p>{item.text}</p>
            <p class="muted">{item.source} · <Age ms={item.createdAtUnixMs} />{score >= 0 && <> · score {(score / 100).toFixed(0)} %</>}
              {item.tags.map((t) => <span class="badge" key={t}>{t}</span>)}</p>
            {item.provenance?.runId && (
              <p>From run <a href={`#/runs/${encodeURIComponent(item.provenance.runId)}${item.provenance.tapeSeqs.length ? `?from=${String(item.provenance.tapeSeqs[0])}` : ""}`}><code>{item.provenance.runId}</code></a>
                {item.provenance.tapeSeqs.length > 0 && <> events {item.provenance.tapeSeqs.map(String).join(", ")}</>}</p>
            )}
            <button class="deny" onClick={() => remove(item.memoryId)}>Delete</button>
          </article>
        ))}
      </div>
    </Section>
  );
}
