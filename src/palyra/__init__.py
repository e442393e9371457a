"""palyra: a self-hosted AI-agent daemon."""

from palyra.imports import import_lean

# First, before any module of palyra imports them (see palyra.imports).
import_lean()
