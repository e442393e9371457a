"""palyra: a self-hosted AI-agent daemon."""
