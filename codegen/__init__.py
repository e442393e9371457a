"""palyra's code generator: a pure function from ``spec/`` to ``generated/``.

``python -m codegen`` regenerates everything (betterproto2 messages and grpclib
stubs, the fast JSON and binary codecs, lifecycle state tables and machines, the
error mapping, the HTTP route table, the TypeScript client and Mermaid diagrams);
``--check`` fails on drift.
``python -m codegen.spec_diff`` reports spec changes against a git ref.

Modules, one per concern:

- ``layout``: where the spec, the output and the tools live.
- ``diagnostics``: the errors the generator raises.
- ``descriptors``: protoc descriptor set → plain records (RPCs, enums, options).
- ``lifecycle_model``: lifecycle YAML → plain records.
- ``checks``: spec consistency rules, each naming the offending element.
- ``proto_python`` / ``proto_ts``: protoc plugin runs.
- ``render_lifecycle`` / ``render_errors`` / ``render_routes`` / ``render_mermaid``:
  source text for the hand-rolled outputs.
- ``codec_plans`` / ``render_codecs``: betterproto2's field plans of the generated
  messages → one straight-line encoder and one decoding table per message;
  ``codec_runtime`` is copied beside them as the loops and helpers they call.
- ``banner``: DO-NOT-EDIT banners and ruff formatting.
- ``drift``: tree comparison for ``--check``.
- ``pipeline``: the orchestration; ``__main__``: the CLI.
"""
