"""``palyra memory ingest | search | list | show | delete``: your memory, with provenance."""

from __future__ import annotations

import argparse

from palyra_gen.palyra import v1

from palyra.cli._client import Stubs
from palyra.cli._command import Shown, SubParsers, add_command, add_group
from palyra.cli._render import format_ms

_HEADER = ["MEMORY", "KIND", "SOURCE", "CREATED", "TEXT"]


def _clip(text: str, width: int = 60) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def _row(item: v1.MemoryItem) -> list[str]:
    return [item.memory_id, item.kind or "-", item.source or "-",
            format_ms(item.created_at_unix_ms), _clip(item.text)]


def _provenance(p: v1.MemoryProvenance | None) -> list[str]:
    if p is None:
        return ["provenance     -"]
    return [f"provenance     session={p.session_id or '-'} run={p.run_id or '-'} "
            f"event={p.event_id or '-'}",
            f"  tape seqs    {', '.join(map(str, p.tape_seqs)) or '-'}",
            f"  positions    {', '.join(map(str, p.positions)) or '-'}",
            f"  sha256       {p.sha256 or '-'}",
            f"  source       {p.source or '-'}"]


def _item_lines(item: v1.MemoryItem) -> str:
    return "\n".join([f"memory         {item.memory_id}", f"kind           {item.kind or '-'}",
                      f"scope          {item.scope or '-'} (owner {item.owner or '-'})",
                      f"session        {item.session_id or '-'}",
                      f"tags           {', '.join(item.tags) or '-'}",
                      f"created        {format_ms(item.created_at_unix_ms)}",
                      f"expires        {format_ms(item.expires_at_unix_ms)}",
                      *_provenance(item.provenance), f"text           {item.text}"])


async def _ingest(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.memory.ingest_memory(v1.IngestMemoryRequest(item=v1.MemoryItem(
        text=args.text, source=args.source, tags=list(args.tags), session_id=args.session,
        kind=args.kind)))
    item = answer.item or v1.MemoryItem()
    return Shown(item, line=f"memory {item.memory_id} stored")


async def _search(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.memory.search_memory(v1.SearchMemoryRequest(
        query=args.query, limit=args.limit, session_id=args.session))
    rows = [[h.item.memory_id if h.item else "-", str(h.score_bps),
             _clip(h.item.text if h.item else "")] for h in answer.hits]
    return Shown(answer.hits, ["MEMORY", "SCORE BPS", "TEXT"], rows)


async def _list(stubs: Stubs, args: argparse.Namespace) -> Shown:
    items: list[v1.MemoryItem] = []
    after = ""
    while len(items) < args.limit:
        page = await stubs.memory.list_memory(v1.ListMemoryRequest(
            session_id=args.session, after_memory_id=after, limit=min(args.limit, 500)))
        items += page.items
        after = page.next_after_memory_id
        if not after:
            break
    items = items[: args.limit]
    return Shown(items, _HEADER, [_row(i) for i in items])


async def _show(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.memory.get_memory(v1.GetMemoryRequest(memory_id=args.memory_id))
    item = answer.item or v1.MemoryItem()
    return Shown(item, line=_item_lines(item))


async def _delete(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.memory.delete_memory(v1.DeleteMemoryRequest(memory_id=args.memory_id))
    return Shown(answer, line=f"memory {args.memory_id} "
                 + ("deleted" if answer.deleted else "was not there"))


def add_parser(commands: SubParsers) -> None:
    """Register the ``memory`` group."""
    sub = add_group(commands, "memory", "ingest, search, list, show (with provenance) and "
                                        "delete memory items")
    ingest = add_command(sub, "ingest", "store a memory item (no model on the write path)",
                         _ingest)
    ingest.add_argument("text")
    ingest.add_argument("--source", default="cli", help="where the item comes from")
    ingest.add_argument("--tag", dest="tags", action="append", default=[], help="a tag (repeat)")
    ingest.add_argument("--session", default="", help="scope the item to this session id")
    ingest.add_argument("--kind", default="", help="e.g. fact or preference")
    search = add_command(sub, "search", "hybrid search (BM25 + embeddings + recency)", _search)
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=10)
    search.add_argument("--session", default="", help="search within this session id")
    listing = add_command(sub, "list", "list your memory items", _list)
    listing.add_argument("--session", default="", help="only this session id's items")
    listing.add_argument("--limit", type=int, default=100)
    add_command(sub, "show", "one item and where it came from", _show).add_argument("memory_id")
    add_command(sub, "delete", "delete one item (Cedar memory.delete: operators by default)",
                _delete).add_argument("memory_id")
