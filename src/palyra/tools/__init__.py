"""Tools: typed specs, a registry with one safe execution path, built-ins.

``default_registry(ToolsConfig())`` gives the built-ins; ``await
registry.execute(name, args, ToolContext(...))`` runs one call and always
returns a ``ToolResult`` (or propagates cancellation). Policy is not checked
here: the run engine asks ``palyra.policy`` first.
"""

from palyra.core.capabilities import SENSITIVE_CAPABILITIES, Capability, is_sensitive
from palyra.tools._attestation import (
    ATTESTATION_DOMAIN,
    args_digest,
    attest,
    canonical_args_json,
)
from palyra.tools._builtin_basic import ADD, ECHO, MEMORY_SEARCH, TIME_NOW
from palyra.tools._builtin_fs import FS_LIST, FS_READ, FS_WRITE
from palyra.tools._builtin_http import HTTP_FETCH
from palyra.tools._builtin_patch import FS_APPLY_PATCH
from palyra.tools._builtin_process import PROCESS_RUN
from palyra.tools._defaults import BUILTIN_TOOLS, ToolsConfig, default_registry
from palyra.tools._registry import ToolRegistry, cap_output
from palyra.tools._sandbox import SandboxConfig
from palyra.tools._spec import (
    MemorySearchHook,
    ToolContext,
    ToolError,
    ToolImage,
    ToolOutput,
    ToolResult,
    ToolSpec,
)
from palyra.tools._workspace import BLOCKED_COMPONENTS, resolve_in_workspace

__all__ = [
    "ADD",
    "ATTESTATION_DOMAIN",
    "BLOCKED_COMPONENTS",
    "BUILTIN_TOOLS",
    "ECHO",
    "FS_APPLY_PATCH",
    "FS_LIST",
    "FS_READ",
    "FS_WRITE",
    "HTTP_FETCH",
    "MEMORY_SEARCH",
    "PROCESS_RUN",
    "SENSITIVE_CAPABILITIES",
    "TIME_NOW",
    "Capability",
    "MemorySearchHook",
    "SandboxConfig",
    "ToolContext",
    "ToolError",
    "ToolImage",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolsConfig",
    "args_digest",
    "attest",
    "canonical_args_json",
    "cap_output",
    "default_registry",
    "is_sensitive",
    "resolve_in_workspace",
]
