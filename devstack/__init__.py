"""Local development stack: runs the system with no AWS account and no API key."""
