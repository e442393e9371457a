"""Process sandbox tiers for ``process.run`` (the command line is pure; no I/O here).

* **a**: argv (no shell), a minimal environment, its own process group; killed
  with its group on timeout or cancel.
* **b**: tier a plus resource limits set by util-linux ``prlimit`` right before
  the program starts: CPU seconds, address space, open files, processes, bytes
  per written file; stdout and stderr are capped by the tool as in every tier.
  Optionally the program runs as an unprivileged ``user`` (``setpriv``): the
  kernel does not apply the process limit to root, so a daemon running as root
  must name one for the fork-bomb limit to hold.
* **c**: tier b inside a bubblewrap namespace sandbox: no network (its own
  network namespace), its own PID, IPC and UTS namespaces, the whole filesystem
  read-only, a private ``/tmp``, and the workspace bound as the only writable
  place (or read-only too: ``workspace = "ro"``); it dies with the daemon.

Wrappers only ``exec`` (no extra process stays between the daemon and the
program), so killing the process group still kills everything.

The tier follows the tool's posture (``postures``): an operator who lets
``process.run`` run without asking (``always_allow``) can confine those calls
tighter than the ones a person approves one by one. The posture is resolved
when the call is decided and taped with the decision, so an approved call, or
one re-run after a restart, runs at the tier its approval prompt stated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypeAlias

Tier: TypeAlias = Literal["a", "b", "c"]
WorkspaceMode: TypeAlias = Literal["rw", "ro"]

TIERS = frozenset({"a", "b", "c"})
# Postures under which a tool runs at all (``disabled`` never does).
RUNNING_POSTURES = ("always_allow", "ask_each_time")

BWRAP = "/usr/bin/bwrap"
PRLIMIT = "/usr/bin/prlimit"
SETPRIV = "/usr/bin/setpriv"


@dataclasses.dataclass(frozen=True, slots=True)
class SandboxConfig:
    """``[tools.sandbox]``: how ``process.run`` confines what it starts.

    Attributes:
        tier: ``a``, ``b`` (the default) or ``c`` (see the module doc).
        workspace: Tier c only: ``rw`` binds the workspace writable, ``ro``
            read-only (then ``process.run`` changes nothing: MEDIUM risk).
        cpu_s: CPU seconds (the program gets SIGXCPU, then SIGKILL).
        memory_bytes: Address space.
        open_files: Open file descriptors.
        processes: Processes and threads of the program's user.
        file_bytes: Largest file the program may write.
        user: Run the program as this user (``nobody``); needs a daemon
            running as root. Empty: the daemon's own user.
        postures: The tier for a call whose resolved posture is the key
            (``always_allow``, ``ask_each_time``), e.g.
            ``postures = { always_allow = "c" }``; other postures use ``tier``.
    """

    tier: Tier = "b"
    workspace: WorkspaceMode = "rw"
    cpu_s: int = 30
    memory_bytes: int = 1024 * 1024 * 1024
    open_files: int = 256
    processes: int = 256
    file_bytes: int = 64 * 1024 * 1024
    user: str = ""
    postures: Mapping[str, Tier] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if min(self.cpu_s, self.memory_bytes, self.open_files, self.processes,
               self.file_bytes) <= 0:
            raise ValueError("sandbox limits must be positive")
        for posture, tier in self.postures.items():
            if posture not in RUNNING_POSTURES:
                raise ValueError(f"sandbox posture {posture!r} is not one of "
                                 f"{', '.join(RUNNING_POSTURES)}")
            if tier not in TIERS:
                raise ValueError(f"sandbox tier {tier!r} (for {posture}) is not a, b or c")

    def for_posture(self, posture: str) -> SandboxConfig:
        """The confinement of a call decided under ``posture`` ("" or unlisted: ``tier``)."""
        tier = self.postures.get(posture)
        if tier is None or tier == self.tier:
            return self
        return dataclasses.replace(self, tier=tier, postures={})

    @property
    def read_only(self) -> bool:
        """Whether the program can change nothing that outlives it (tier c, ``ro``)."""
        return self.tier == "c" and self.workspace == "ro"

    def facts(self) -> dict[str, str]:
        """What the attestation records about the confinement."""
        facts: dict[str, str] = {"sandbox.tier": self.tier}
        if self.tier != "a":
            facts["sandbox.limits"] = (f"cpu_s={self.cpu_s},memory_bytes={self.memory_bytes},"
                                       f"open_files={self.open_files},processes={self.processes},"
                                       f"file_bytes={self.file_bytes}")
            if self.user:
                facts["sandbox.user"] = self.user
        if self.tier == "c":
            facts["sandbox.workspace"] = self.workspace
            facts["sandbox.network"] = "none"
        return facts


def command_line(config: SandboxConfig, argv: list[str], workspace: Path, cwd: Path,
                 ids: tuple[int, int] | None = None) -> list[str]:
    """The full command that runs ``argv`` at ``config``'s tier, in ``cwd``.

    ``ids`` are the uid and gid of ``config.user`` (looked up by the caller).
    """
    if config.tier == "a":
        return list(argv)
    limited = [PRLIMIT, f"--cpu={config.cpu_s}", f"--as={config.memory_bytes}",
               f"--nofile={config.open_files}", f"--nproc={config.processes}",
               f"--fsize={config.file_bytes}", "--"]
    if ids is not None:
        limited += [SETPRIV, f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups", "--"]
    limited += argv
    if config.tier == "b":
        return limited
    root = str(workspace.resolve())
    bind = "--bind" if config.workspace == "rw" else "--ro-bind"
    return [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", bind, root, root,
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--new-session", "--chdir", str(cwd), "--", *limited]
