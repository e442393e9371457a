"""The web console's built assets, shipped in the package (no CDN, works offline).

The sources live in ``console/`` at the repository root; ``node console/build.mjs``
writes the bundle into ``assets/`` here, and the test command checks it for drift.
The HTTP gateway serves these files at ``/console/``.
"""

from palyra.console._assets import ConsoleAsset, console_asset

__all__ = ("ConsoleAsset", "console_asset")
